#pragma once
// Dynamic loss scaling for f16 training (PyTorch's torch.amp.GradScaler). f16 gradients of small
// values underflow to 0; multiplying the loss by a large scale S before backward keeps them
// representable, and dividing the gradients by S before the optimizer step restores their value.
// When a gradient overflows (inf or NaN) the step is skipped and S shrinks; after growth_interval
// clean steps in a row S grows again. bf16 has f32's range and needs no scaler (enabled = false
// makes every call a pass-through, so one training loop serves both).
//
//   amp::GradScaler scaler;                      // init_scale 65536, growth 2, backoff 0.5, 2000
//   for (...) {
//     opt.zero_grad();
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                      // optional: only to look at or clip true gradients
//     scaler.step(opt);                          // skipped when a gradient is not finite
//     scaler.update();
//   }
//
// Under DDP every rank must skip the same steps: set_found_inf_sync(parallel::found_inf_sync(pg))
// makes step() combine the ranks' findings (parallel/found_inf.h). optim/ does not depend on
// parallel/, hence the hook.
//
// State dict layout (every value a 0-d CPU tensor, so checkpoints store it like model weights):
//   "scale" f64, "growth_tracker" i64, "skipped_steps" i64, "growth_factor" f64,
//   "backoff_factor" f64, "growth_interval" i64, "enabled" i64 (0 or 1).
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <ember/core/state_dict.h>
#include <ember/core/tensor.h>
#include <ember/optim/optimizer.h>

namespace ember::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // > 0 and finite
  double growth_factor = 2.0;  // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows; >= 1
  bool enabled = true;  // false: scale() returns the loss, step() is optimizer.step()
};

class GradScaler {
 public:
  /// Checks the options; an error names the bad value.
  explicit GradScaler(const GradScalerOptions& options = {});

  /// loss * scale(), differentiable (loss: any shape, usually 0-d; same shape, dtype and device
  /// out). Disabled: returns `loss` itself.
  Tensor scale(const Tensor& loss) const;

  /// Divides every gradient of `optimizer`'s parameters by the scale in place (gradients of
  /// dtype f32, f64, f16 or bf16; parameters without one are skipped) and notes whether any was
  /// inf or NaN, in one fused pass per device. The finding stays on the device (no host sync
  /// here); step() reads it. At most once per optimizer between update()s (a second call is an
  /// error). Disabled: does nothing.
  void unscale_(optim::Optimizer& optimizer);

  /// unscale_(optimizer) unless done already; reads the finding (combined across ranks by the
  /// found-inf sync hook, when set); when any gradient was not finite, skips optimizer.step()
  /// (parameters and optimizer state stay unchanged), counts it in skipped_steps() and returns
  /// false; else steps and returns true. Once per optimizer between update()s. Disabled: steps,
  /// returns true.
  bool step(optim::Optimizer& optimizer);

  /// Ends the iteration: when a step() since the last update() found a non-finite gradient, the
  /// scale is multiplied by backoff_factor and the growth tracker reset; else the tracker counts
  /// one more clean step and at growth_interval the scale is multiplied by growth_factor and the
  /// tracker reset. Needs a step() since the last update() (an error otherwise). Disabled: nothing.
  void update();

  /// The current scale (1 when disabled).
  double scale() const { return options_.enabled ? scale_ : 1.0; }
  /// Clean steps in a row since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  /// Optimizer steps skipped for a non-finite gradient since construction (or as loaded).
  int64_t skipped_steps() const { return skipped_steps_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  /// Sets the hook step() passes its local finding to (true: a gradient was not finite), using
  /// the returned value instead: under DDP, "did any rank find one". Every rank must call step()
  /// equally often then. An empty function removes the hook.
  void set_found_inf_sync(std::function<bool(bool)> sync) { sync_ = std::move(sync); }

  /// See the top of this file. Loading checks every key (missing, unexpected, not a 0-d tensor,
  /// bad value: an error naming the key) before changing anything, and forgets a half-done step.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  /// What happened to one optimizer since the last update().
  struct PerOptimizer {
    std::vector<std::pair<Device, Tensor>> found_inf;  // per gradient device: (1) f32 flag there
    bool unscaled = false;
    bool stepped = false;
    bool found = false;  // step()'s verdict (after the sync hook)
  };

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  std::function<bool(bool)> sync_;
};

}  // namespace ember::amp
