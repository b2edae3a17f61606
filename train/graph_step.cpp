// GraphStep (train/graph_step.h): warm-up, capture and replay of the trainer's step.
#include <ember/train/graph_step.h>

#include <utility>

#include <ember/autograd/grad_mode.h>
#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>

namespace ember::train {

GraphStep::GraphStep(StepRunner& runner, PhaseTimers& timers, Device device,
                     std::function<void(const std::string&)> say)
    : runner_(runner), timers_(timers), device_(device), say_(std::move(say)) {
  EMBER_CHECK(device.is_cuda(), "train.cuda_graphs: true needs a CUDA device; this run's device is ", device.str());
  side_ = new_stream(device);
  if (side_ == current_stream(device)) side_ = new_stream(device);
}

bool GraphStep::fits(const Tensor& input, const Tensor& target) const {
  return static_input_.defined() && input.sizes() == static_input_.sizes() &&
         input.strides() == static_input_.strides() && input.dtype() == static_input_.dtype() &&
         target.sizes() == static_target_.sizes() && target.strides() == static_target_.strides() &&
         target.dtype() == static_target_.dtype();
}

Tensor GraphStep::eager(const Tensor& input, const Tensor& target,
                        const std::function<bool(const Tensor&)>& after_loss) {
  // After a replay the gradients are the graph's (static) tensors: an eager backward would add to them.
  runner_.optimizer().zero_grad();
  Tensor loss = runner_.forward_backward(input, target, true, after_loss);
  runner_.optimizer_step();
  ++eager_steps_;
  return loss;
}

void GraphStep::release_graph() {
  runner_.optimizer().zero_grad();  // the gradients live in the graph's pool, as the static loss does
  static_loss_ = Tensor();
  graph_.reset();
}

void GraphStep::capture(const Tensor& input, const Tensor& target) {
  // The previous graph's gradients go with it; those allocated inside this capture live in its
  // pool: static across replays.
  release_graph();
  {
    NoGradGuard no_grad;
    static_input_ = input.clone();
    static_target_ = target.clone();
  }
  {
    cuda::GraphCapture capture(graph_, side_);  // side_ is ordered after the current stream
    static_loss_ = runner_.graph_body(static_input_, static_target_);
    capture.end();
  }
  captured_lr_ = runner_.optimizer().lr();
  ++captures_;
}

Tensor GraphStep::step(const Tensor& input, const Tensor& target,
                       const std::function<bool(const Tensor&)>& after_loss) {
  if (warm_ < kWarmupSteps) {
    // Eager, on the stream the capture will use (its cuBLAS/cuDNN handles, engine choices).
    ++warm_;
    const Stream main = current_stream(device_);
    Event ready;
    ready.record(main);
    ready.wait(side_);
    Tensor loss;
    {
      StreamGuard on_side(side_);
      record_stream(input.storage(), side_);
      record_stream(target.storage(), side_);
      loss = eager(input, target, after_loss);
      record_stream(loss.storage(), main);
    }
    Event done;
    done.record(side_);
    done.wait(main);
    return loss;
  }
  if (given_up_) return eager(input, target, after_loss);
  if (graph_.captured() && !fits(input, target)) {
    // The eager step moves the optimizer's step counts and the generators' offsets on the host,
    // past the device-side counters the graph's replays advance: capture again at the next batch.
    recapture_ = true;
    return eager(input, target, after_loss);
  }
  const bool lr_moved = graph_.captured() && !recapture_ && runner_.optimizer().lr() != captured_lr_;
  lr_recaptures_in_row_ = lr_moved ? lr_recaptures_in_row_ + 1 : 0;
  if (lr_recaptures_in_row_ >= kMaxLrRecaptures) {
    // A capture per step costs more than it saves: eager from here on (the replays kept the host's
    // step counts and generator offsets in step, so an eager step continues where they left off).
    given_up_ = true;
    release_graph();
    if (say_)
      say_("train.cuda_graphs: the learning rate changed at " + std::to_string(kMaxLrRecaptures) +
           " steps in a row (a schedule that moves it every step), and a captured step holds a fixed one: "
           "CUDA graphs are off for the rest of the run, every step eager (a schedule that changes it only "
           "between epochs, such as step or multistep, keeps them)");
    return eager(input, target, after_loss);
  }
  if (!graph_.captured() || recapture_ || lr_moved) {
    capture(input, target);
    recapture_ = false;
  } else {
    NoGradGuard no_grad;
    static_input_.copy_(input);
    static_target_.copy_(target);
  }
  {
    auto scope = timers_.scope(Phase::Forward);
    graph_.replay();
  }
  ++replays_;
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = static_loss_.clone();  // the next replay overwrites the static loss
  }
  after_loss(loss);
  if (optim::LRScheduler* s = runner_.schedule()) s->step();
  return loss;
}

}  // namespace ember::train
