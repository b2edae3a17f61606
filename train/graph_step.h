#pragma once
// train.cuda_graphs: the trainer's training step as a CUDA graph (docs/cuda_graphs.md).
//
//   warm-up   the first kWarmupSteps batches run eagerly on a side stream, so the per-stream cuBLAS
//             and cuDNN handles, cuDNN's engine choices and the optimizer's state exist before
//             anything is captured (none of them may be created inside a capture);
//   capture   the next batch is copied into static input and target tensors, the gradients are set
//             to none, and one whole step (forward, loss, backward, clipping, optimizer step) is
//             captured on that side stream (cuda::GraphCapture);
//   replay    every later batch of the same shapes and dtypes is copied into the statics and the
//             graph replayed on the current stream; the loss is a copy of the static loss, read by
//             the caller after the replay. The schedule steps on the host after each replay.
//
// A batch of other shapes (the epoch's last, partial batch) runs eagerly and the next batch that fits
// re-captures (the eager step moved the host's optimizer step counts and RNG offsets past what the
// graph's device-side counters hold), and a learning rate that differs from the captured one (a
// schedule's step) re-captures: host scalars are baked into the captured launches. A learning rate
// that changes at kMaxLrRecaptures steps in a row (a schedule that moves it every step: cosine,
// onecycle, a warm-up) would cost a capture per step, slower than eager steps: the graph is then
// given up for the rest of the run, said once through `say`, and every later step is eager. Phase
// times: a replay is timed as one span under the forward phase (its backward and optimizer kernels
// are inside the same launch).
#include <cstdint>
#include <functional>
#include <string>

#include <ember/core/cuda_graph.h>
#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/core/tensor.h>
#include <ember/train/phase_timer.h>
#include <ember/train/train_step.h>

namespace ember::train {

class GraphStep {
 public:
  static constexpr int64_t kWarmupSteps = 3;
  static constexpr int64_t kMaxLrRecaptures = 3;

  /// `device` must be a CUDA device (cuda::Graph says so otherwise, at the first capture). `say`
  /// gets one line when the graph is given up (see the top comment).
  GraphStep(StepRunner& runner, PhaseTimers& timers, Device device, std::function<void(const std::string&)> say = {});

  /// One optimizer step on (input, target), both on the device. `after_loss(loss)` sees the loss
  /// (0-d, on the device) after the forward of an eager step or after a replay; its result is
  /// ignored (train.on_nonfinite stop records the loss and never drops a backward). Returns the loss.
  Tensor step(const Tensor& input, const Tensor& target, const std::function<bool(const Tensor&)>& after_loss);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_steps_; }
  /// Whether the graph was given up (every step eager from then on).
  bool given_up() const { return given_up_; }
  const cuda::Graph& graph() const { return graph_; }

 private:
  Tensor eager(const Tensor& input, const Tensor& target, const std::function<bool(const Tensor&)>& after_loss);
  /// Whether (input, target) fit the static tensors (same sizes, strides and dtypes).
  bool fits(const Tensor& input, const Tensor& target) const;
  void capture(const Tensor& input, const Tensor& target);
  /// Drops the graph and what lives in its pool (the gradients, the static loss).
  void release_graph();

  StepRunner& runner_;
  PhaseTimers& timers_;
  Device device_;
  Stream side_;  // warm-up and capture stream
  cuda::Graph graph_;
  Tensor static_input_, static_target_, static_loss_;
  double captured_lr_ = 0;
  bool recapture_ = false;  // an eager step ran since the capture
  bool given_up_ = false;
  std::function<void(const std::string&)> say_;
  int64_t lr_recaptures_in_row_ = 0;
  int64_t warm_ = 0, captures_ = 0, replays_ = 0, eager_steps_ = 0;
};

}  // namespace ember::train
