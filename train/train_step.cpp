// StepRunner, NonFiniteWatch, make_epoch_metrics (train/train_step.h).
#include <ember/train/train_step.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <ember/autograd/autocast.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include <ember/optim/clip.h>

namespace ember::train {

StepRunner::StepRunner(layers::Module& net, layers::Module& model, optim::Optimizer& opt, optim::LRScheduler* schedule,
                       amp::GradScaler& scaler, parallel::DistributedDataParallel* ddp, PhaseTimers& timers,
                       Device device, StepSettings settings, LossFn loss)
    : net_(net),
      model_(model),
      opt_(opt),
      schedule_(schedule),
      scaler_(scaler),
      ddp_(ddp),
      timers_(timers),
      device_(device),
      settings_(settings),
      loss_(std::move(loss)) {}

Tensor StepRunner::loss(const Tensor& output, const Tensor& target) const {
  return loss_ ? loss_(output, target) : layers::cross_entropy(output, target);
}

Tensor StepRunner::forward_backward(const Tensor& input, const Tensor& target, bool steps_now,
                                    const std::function<bool(const Tensor&)>& backward_ok) {
  std::optional<parallel::DistributedDataParallel::NoSyncGuard> local_only;
  if (ddp_ && !steps_now) local_only.emplace(*ddp_);
  Tensor loss_value;
  {
    auto scope = timers_.scope(Phase::Forward);
    std::optional<amp::Autocast> low_precision;  // forward and loss only (docs/amp.md)
    if (settings_.precision != Precision::fp32)
      low_precision.emplace(device_.type(), settings_.precision == Precision::bf16 ? DType::bf16 : DType::f16);
    loss_value = loss(net_.forward(input), target);  // 0-d, f32 (f64 for an f64 model)
  }
  const bool run_backward = backward_ok(loss_value);
  auto scope = timers_.scope(Phase::Backward);
  const int64_t n = settings_.accumulation_steps;
  if (run_backward) scaler_.scale(n > 1 ? loss_value * (1.0 / static_cast<double>(n)) : loss_value).backward();
  return loss_value;
}

void StepRunner::optimizer_step() {
  auto scope = timers_.scope(Phase::OptimizerStep);
  if (settings_.clip_grad_norm > 0) {
    scaler_.unscale_(opt_);  // clip the true gradients (a no-op without fp16)
    optim::clip_grad_norm_(model_.parameters(), settings_.clip_grad_norm);
  }
  scaler_.step(opt_);  // opt_.step(), skipped under fp16 when a gradient is not finite
  scaler_.update();
  opt_.zero_grad();
  if (schedule_) schedule_->step();
}

Tensor StepRunner::graph_body(const Tensor& input, const Tensor& target) {
  Tensor loss_value;
  {
    std::optional<amp::Autocast> low_precision;  // forward and loss only (docs/amp.md)
    if (settings_.precision != Precision::fp32)
      low_precision.emplace(device_.type(), settings_.precision == Precision::bf16 ? DType::bf16 : DType::f16);
    loss_value = loss(net_.forward(input), target);
  }
  loss_value.backward();
  if (settings_.clip_grad_norm > 0) optim::clip_grad_norm_(model_.parameters(), settings_.clip_grad_norm);
  opt_.step();
  return loss_value.detach();
}

void StepRunner::skip_step() {
  opt_.zero_grad();
  if (schedule_) schedule_->step();
}

NonFiniteWatch::NonFiniteWatch(NonFinitePolicy policy, const ParallelRun& parallel, Device device)
    : policy_(policy),
      par_(parallel),
      device_(device),
      first_bad_(full({}, std::numeric_limits<double>::infinity(), {.dtype = DType::f64, .device = device})) {}

bool NonFiniteWatch::after_forward(const Tensor& loss, int64_t batch_no, bool steps_now) {
  if (skipping()) {
    // One host read per batch: the price of deciding before the backward.
    batch_bad_ = !std::isfinite(loss.item<double>());
    step_bad_ = step_bad_ || batch_bad_;
    if (steps_now && par_.distributed()) step_bad_ = max_over_ranks(par_, step_bad_ ? 1 : 0) != 0;
    return !step_bad_;
  }
  // stop: no host read; loss - loss is 0 exactly when the loss is finite.
  NoGradGuard no_grad;
  const Tensor here = full({}, static_cast<double>(batch_no), {.dtype = DType::f64, .device = device_});
  first_bad_ = where(eq(loss.detach() - loss.detach(), 0.0), first_bad_, minimum(first_bad_, here));
  return true;
}

void NonFiniteWatch::end_step(bool skipped) {
  if (skipped) ++skipped_steps_;
  step_bad_ = false;
}

void NonFiniteWatch::check_at_progress(int64_t epoch, int64_t batches) const {
  if (skipping() || par_.distributed()) return;
  fail(epoch, first_bad_.item<double>(), batches, false);
}

void NonFiniteWatch::check_at_epoch_end(int64_t epoch, int64_t batches) const {
  if (skipping()) return;
  const double bad = first_bad_.item<double>();
  if (max_over_ranks(par_, std::isfinite(bad) ? 1 : 0) != 0) fail(epoch, bad, batches, true);
}

void NonFiniteWatch::fail(int64_t epoch, double first_bad, int64_t batches, bool agreed) const {
  if (!std::isfinite(first_bad) && !agreed) return;
  std::string where = "epoch " + std::to_string(epoch);
  if (std::isfinite(first_bad)) {
    where += ", batch " + std::to_string(static_cast<int64_t>(first_bad)) + " of " + std::to_string(batches);
    if (par_.distributed()) where += " on rank " + std::to_string(par_.rank);
  } else {
    where += " on another rank";
  }
  EMBER_FAIL("the training loss became NaN or inf at ", where,
             "; training stops before this epoch's checkpoint and metrics line, so the run directory holds the "
             "model from before it. Lower optim.lr, set optim.clip_grad_norm, or set train.on_nonfinite=skip "
             "to drop such steps");
}

EpochMetrics make_epoch_metrics(int64_t epoch, const EpochTotals& t) {
  EpochMetrics m;
  m.epoch = epoch;
  const int64_t counted = t.images - t.dropped_images;
  m.train_loss = counted > 0 ? t.loss_sum / static_cast<double>(counted) : 0.0;
  m.nonfinite_steps = static_cast<double>(t.skipped_steps);
  m.epoch_seconds = t.seconds;
  m.images_per_second = t.seconds > 0 ? static_cast<double>(t.images) / t.seconds : 0.0;
  m.lr = t.lr;
  m.data_wait_seconds = t.phases[Phase::DataWait];
  m.h2d_seconds = t.phases[Phase::HostToDevice];
  m.h2d_copied = t.h2d_copied;
  m.forward_seconds = t.phases[Phase::Forward];
  m.backward_seconds = t.phases[Phase::Backward];
  m.optimizer_seconds = t.phases[Phase::OptimizerStep];
  m.cpu_seconds = t.cpu_seconds;
  m.loader_cpu_seconds = t.loader_cpu_seconds;
  m.pool_wait_seconds = t.pool_wait_seconds;
  return m;
}

}  // namespace ember::train
