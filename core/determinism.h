#pragma once
// The determinism switch, process-wide (as torch.use_deterministic_algorithms): when on, ops that
// have a nondeterministic CUDA implementation (atomics, or cuDNN engines noted NONDETERMINISTIC)
// take a deterministic one, and an op that has none is an error naming it (docs/determinism.md).
#include <string>

namespace ember {

/// Turns deterministic algorithms on or off for the whole process. When on: CUDA convolutions use
/// only cuDNN engines (graph API) and algorithms (legacy calls) that cuDNN reports deterministic;
/// CUDA index_add and max_pool2d's backward sum duplicates in a fixed order instead of with atomics;
/// an op with no deterministic path throws an ember::Error naming it (detail::alert_nondeterministic).
/// The CPU kernels are deterministic whether it is on or not (docs/determinism.md). Off by
/// default. Thread-safe; it takes effect from the next call, and cached convolution plans are kept
/// per setting. Deterministic means: the same inputs on the same GPU model, build and library
/// versions give bitwise-equal results run after run (not equal across GPU models).
void set_deterministic(bool on);
/// The current setting of set_deterministic (false unless it was turned on).
bool deterministic();

/// Sets the switch for a scope and restores the previous setting on exit (tests, one phase of a
/// program). Not for concurrent scopes on several threads: the switch is process-wide.
class DeterministicGuard {
 public:
  explicit DeterministicGuard(bool on) : previous_(deterministic()) { set_deterministic(on); }
  ~DeterministicGuard() { set_deterministic(previous_); }
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool previous_;
};

namespace detail {
/// The error an op without a deterministic path raises while the switch is on:
/// "<op> has no deterministic implementation[ (<why>)]; call ember::set_deterministic(false) (or set
/// train.deterministic false) to allow it".
std::string nondeterministic_message(const std::string& op, const std::string& why = "");
/// Throws ember::Error(nondeterministic_message(op, why)) when deterministic() is on; does nothing
/// otherwise. For ops that have no deterministic implementation (as torch's alert_not_deterministic).
void alert_nondeterministic(const std::string& op, const std::string& why = "");
}  // namespace detail

}  // namespace ember
