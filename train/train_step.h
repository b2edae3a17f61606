#pragma once
// The parts of the trainer's training pass (train/trainer.cpp), each readable on its own:
//
//   StepRunner        one batch: forward and loss under autocast, backward (scaled by
//                     1/accumulation_steps and by fp16's GradScaler; under DDP inside no_sync
//                     before the step's last batch), and the optimizer step (clipping, the
//                     scaler's step and update, the schedule).
//   NonFiniteWatch    train.on_nonfinite: "stop" keeps the first bad batch on the device and checks
//                     it where the host reads anyway; "skip" reads each loss and drops a step in
//                     which any batch on any rank was NaN or inf.
//   make_epoch_metrics  an epoch's EpochMetrics from its totals (already summed over the ranks).
#include <cstdint>
#include <functional>

#include <ember/core/device.h>
#include <ember/core/tensor.h>
#include <ember/layers/module.h>
#include <ember/optim/grad_scaler.h>
#include <ember/optim/optimizer.h>
#include <ember/optim/schedule.h>
#include <ember/parallel/ddp.h>
#include <ember/train/config.h>
#include <ember/train/metrics.h>
#include <ember/train/parallel_setup.h>
#include <ember/train/phase_timer.h>

namespace ember::train {

using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

struct StepSettings {
  Precision precision = Precision::fp32;
  int64_t accumulation_steps = 1;
  double clip_grad_norm = 0;  // 0: no clipping
};

class StepRunner {
 public:
  /// `net` is what the loop calls (the model, or it wrapped in DataParallel / DDP: `ddp`), `model`
  /// the plain model whose gradients are clipped. `loss` empty: layers::cross_entropy.
  StepRunner(layers::Module& net, layers::Module& model, optim::Optimizer& opt, optim::LRScheduler* schedule,
             amp::GradScaler& scaler, parallel::DistributedDataParallel* ddp, PhaseTimers& timers, Device device,
             StepSettings settings, LossFn loss);

  /// The loss of a batch without autograd bookkeeping beyond what the caller's mode says.
  Tensor loss(const Tensor& output, const Tensor& target) const;
  /// Forward and loss of one batch (timed as Forward); then, when `backward_ok(loss)` says so, its
  /// backward (timed as Backward). Before the last batch of an optimizer step (`steps_now` false)
  /// both run under DDP's no_sync, so gradients cross the network once per step. Returns the loss
  /// (0-d, on the device).
  Tensor forward_backward(const Tensor& input, const Tensor& target, bool steps_now,
                          const std::function<bool(const Tensor&)>& backward_ok);
  /// The optimizer step (timed): clipping of the unscaled gradients, the scaler's step (skipped by
  /// fp16 when a gradient is not finite) and update, zero_grad, one schedule step.
  void optimizer_step();
  /// A step not taken (train.on_nonfinite=skip): gradients dropped, parameters and optimizer
  /// state kept; the schedule still counts it, as with fp16's skipped steps.
  void skip_step();
  /// The untimed whole step that a CUDA graph captures (train/graph_step.h): forward and loss
  /// under autocast, backward, clipping and the optimizer's step; no zero_grad and no schedule
  /// step (host-side changes that a replay would not see). Returns the loss (0-d, on the device).
  Tensor graph_body(const Tensor& input, const Tensor& target);
  optim::Optimizer& optimizer() { return opt_; }
  optim::LRScheduler* schedule() { return schedule_; }

 private:
  layers::Module &net_, &model_;
  optim::Optimizer& opt_;
  optim::LRScheduler* schedule_;
  amp::GradScaler& scaler_;
  parallel::DistributedDataParallel* ddp_;
  PhaseTimers& timers_;
  Device device_;
  StepSettings settings_;
  LossFn loss_;
};

class NonFiniteWatch {
 public:
  NonFiniteWatch(NonFinitePolicy policy, const ParallelRun& parallel, Device device);

  bool skipping() const { return policy_ == NonFinitePolicy::skip; }
  /// After the forward of batch `batch_no` (1-based within the epoch): records its loss and says
  /// whether its backward runs. skip: false once a batch of the current step was bad; at the
  /// step's last batch the ranks agree first (every rank must join the same backward reduction).
  bool after_forward(const Tensor& loss, int64_t batch_no, bool steps_now);
  /// skip: whether this batch's loss was not finite (it is left out of the epoch's mean loss).
  bool batch_bad() const { return batch_bad_; }
  /// skip: whether the step that ends with this batch must not be taken; end_step() resets it.
  bool step_bad() const { return step_bad_; }
  void end_step(bool skipped);
  int64_t skipped_steps() const { return skipped_steps_; }
  /// stop, at a progress line: a single process stops at once (ranks reach progress lines at
  /// different times, so under ddp only the epoch's end checks).
  void check_at_progress(int64_t epoch, int64_t batches) const;
  /// stop, at the end of the epoch, before its checkpoint and metrics line: every rank learns
  /// whether any rank saw a bad batch.
  void check_at_epoch_end(int64_t epoch, int64_t batches) const;

 private:
  /// Throws an Error naming the epoch and this rank's first bad batch, or, when `agreed` and
  /// this rank had none, another rank.
  void fail(int64_t epoch, double first_bad, int64_t batches, bool agreed) const;
  NonFinitePolicy policy_;
  const ParallelRun& par_;
  Device device_;
  Tensor first_bad_;  // stop: the first bad batch number (f64, on the device), +inf while none
  bool batch_bad_ = false, step_bad_ = false;
  int64_t skipped_steps_ = 0;
};

/// What one epoch's training pass summed up, over all ranks where the trainer reduces them.
struct EpochTotals {
  double loss_sum = 0;  // sum of loss * batch size
  int64_t images = 0;
  int64_t dropped_images = 0;  // in batches whose loss was not finite (skip): not in the mean
  int64_t skipped_steps = 0;  // steps not taken for a non-finite loss
  double seconds = 0;
  double lr = 0;  // at the epoch's start
  PhaseTotals phases;
  bool h2d_copied = false;
  double cpu_seconds = 0, loader_cpu_seconds = 0, pool_wait_seconds = 0;
};

/// train_loss (mean over the images whose loss was finite; 0 when none), images/s, the phase
/// times and CPU use; evaluation, loss-scale and communication fields stay 0 for the caller.
EpochMetrics make_epoch_metrics(int64_t epoch, const EpochTotals& t);

}  // namespace ember::train
