// found_inf_sync: one small all_reduce (max) per optimizer step.
#include <ember/parallel/found_inf.h>

#include <ember/kernels/factory.h>

namespace ember::parallel {

std::function<bool(bool)> found_inf_sync(std::shared_ptr<ProcessGroup> group) {
  EMBER_CHECK(group != nullptr, "found_inf_sync: the process group is null");
  return [group = std::move(group)](bool found) {
    Tensor flag = full({1}, found ? 1.0 : 0.0, {.dtype = DType::f32, .device = group->message_device()});
    group->all_reduce(flag, ReduceOp::max)->wait();
    return flag.to(Device::cpu()).item<float>() != 0.0f;
  };
}

}  // namespace ember::parallel
