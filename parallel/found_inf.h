#pragma once
// The found-inf hook of amp::GradScaler (optim/grad_scaler.h) for data-parallel training: every
// rank must skip the same steps, or their parameters drift apart.
//
//   amp::GradScaler scaler;
//   scaler.set_found_inf_sync(parallel::found_inf_sync(pg));
#include <functional>
#include <memory>

#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// A function taking this rank's finding (true: a gradient was inf or NaN) and returning whether
/// any rank of `group` found one: an all_reduce (max) of a 0/1 value on group->message_device(),
/// waited for. Every rank must call it equally often (GradScaler::step does, once per step).
std::function<bool(bool)> found_inf_sync(std::shared_ptr<ProcessGroup> group);

}  // namespace ember::parallel
