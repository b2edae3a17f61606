#pragma once
// Per-epoch phase timers: where a training step's time goes.
//
// Phases: data wait (host time blocked waiting for the next batch), host-to-device copy, forward,
// backward, optimizer step. On the CPU every phase is wall-clock time (CPU ops are synchronous).
// On a GPU, forward/backward/optimizer/copy are measured with CUDA events on the current stream
// (kernels run asynchronously, so host time would only measure launches), read once at
// finish_epoch(); data wait stays host time. In the CUDA build each phase is also an NVTX range,
// so Nsight Systems shows it on the timeline.
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <ember/core/device.h>

namespace ember::train {

enum class Phase : int { DataWait = 0, HostToDevice, Forward, Backward, OptimizerStep };
constexpr int kNumPhases = 5;
/// "data_wait", "h2d", "forward", "backward", "optimizer" (also the metrics.jsonl key stems:
/// "<name>_seconds").
const char* phase_name(Phase p);

struct PhaseTotals {
  std::array<double, kNumPhases> seconds{};  // summed over the epoch
  int64_t steps = 0;
  double operator[](Phase p) const { return seconds[static_cast<int>(p)]; }
  /// Sum of all phases.
  double step_seconds() const;
  /// True when data wait exceeds a fifth of the step time (sum of phases).
  bool input_bound() const;
  /// "" or "input-bound: data wait is 34% of the step; raise data.workers or set data.resident".
  std::string verdict() const;
};

class PhaseTimers {
 public:
  explicit PhaseTimers(Device device);
  ~PhaseTimers();
  PhaseTimers(const PhaseTimers&) = delete;
  PhaseTimers& operator=(const PhaseTimers&) = delete;

  /// Starts a phase (phases do not nest; beginning one while another is open is an error).
  void begin(Phase p);
  void end(Phase p);
  /// RAII: begin in the constructor, end in the destructor.
  class Scope {
   public:
    Scope(PhaseTimers& t, Phase p) : t_(t), p_(p) { t_.begin(p_); }
    ~Scope() { t_.end_in_scope(p_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimers& t_;
    Phase p_;
  };
  Scope scope(Phase p) { return Scope(*this, p); }
  /// Counts a finished step.
  void step_done();

  /// Totals since the last finish_epoch() (synchronizes the GPU stream to read events), then resets.
  PhaseTotals finish_epoch();

 private:
  /// end() for Scope's destructor, which must not throw (it is noexcept: a throw would terminate).
  /// An error end() raises outside of unwinding (e.g. a CUDA error from earlier asynchronous work,
  /// reported when the end event is recorded) is kept and rethrown by the next begin() or
  /// finish_epoch().
  void end_in_scope(Phase p) noexcept;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::train
