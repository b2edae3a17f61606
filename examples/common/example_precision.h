#pragma once
// example_precision.h: --precision fp32|bf16|fp16 for ember's example programs (examples/mnist,
// examples/cifar), as ember-train's "precision" key does it (docs/amp.md):
//
// * bf16 and fp16 run each batch's forward and loss inside amp::Autocast(device type, bf16 | f16):
//   Linear and Conv2d compute in the low dtype, the loss and BatchNorm in f32; the parameters, the
//   backward's gradients and the optimizer stay f32. Evaluation on the test split runs in f32.
// * fp16 adds an amp::GradScaler (initial scale 65536): the loss is scaled before backward, the
//   gradients are unscaled once per optimizer step (with --accumulation-steps, after the last batch
//   of the step), a step whose gradients are not all finite is skipped and the scale halves; it
//   doubles after 2000 clean steps. Under DDP the ranks agree on each skip
//   (parallel::found_inf_sync). The epoch line and the --metrics-out line add the loss scale and
//   the steps skipped in the epoch; checkpoints hold the scaler's state and --resume restores it.
// * --data-parallel with bf16 or fp16 is a usage error: DataParallel runs each replica on a thread
//   of its own, which does not see this thread's autocast guard.
//
// Header-only, against ember's installed public headers, like example_cli.h.
#include <ember/ember.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "example_cli.h"

namespace ember_examples {

/// --precision V: fp32, bf16 or fp16; otherwise a UsageError naming FLAG and V.
inline std::string parse_precision_flag(const std::string& flag, const std::string& v) {
  if (v != "fp32" && v != "bf16" && v != "fp16")
    throw UsageError(flag + " expects fp32, bf16 or fp16, got '" + v + "'");
  return v;
}

/// Appends --precision to FLAGS, storing into PRECISION.
inline void add_precision_flag(std::vector<Flag>& flags, std::string& precision) {
  flags.push_back({"--precision", [&precision](auto& f, auto& v) { precision = parse_precision_flag(f, v); }});
}

/// The --precision lines of both examples' usage text.
inline std::string precision_usage() {
  return "  --precision P         fp32 | bf16 | fp16 (default fp32): bf16 and fp16 run the forward and the\n"
         "                        loss under amp::Autocast, fp16 with a dynamic loss scale (amp::GradScaler)\n";
}

/// A run's precision: the autocast guard for each forward and the gradient scaler (a pass-through
/// unless fp16).
class MixedPrecision {
 public:
  /// PRECISION as --precision spells it, for tensors on DEVICE_TYPE; under DDP, GROUP (else
  /// nullptr) makes the ranks agree on each skipped step. DATA_PARALLEL: the run uses
  /// DataParallel, which bf16 and fp16 cannot (a UsageError).
  MixedPrecision(std::string precision, ember::DeviceType device_type,
                 const std::shared_ptr<ember::parallel::ProcessGroup>& group, bool data_parallel)
      : precision_(std::move(precision)),
        device_type_(device_type),
        scaler_(ember::amp::GradScalerOptions{.enabled = precision_ == "fp16"}) {
    if (data_parallel && precision_ != "fp32")
      throw UsageError("--precision " + precision_ +
                       " and --data-parallel: DataParallel's replicas run on threads of their own, "
                       "outside the autocast guard; use fp32, or one rank per device under a launcher");
    if (scaler_.is_enabled() && group != nullptr) scaler_.set_found_inf_sync(ember::parallel::found_inf_sync(group));
  }

  const std::string& name() const { return precision_; }
  bool fp16() const { return scaler_.is_enabled(); }
  ember::amp::GradScaler& scaler() { return scaler_; }

  /// The guard for one forward and loss: autocast to bf16 / f16, or nothing under fp32.
  std::optional<ember::amp::Autocast> autocast() const {
    if (precision_ == "fp32") return std::nullopt;
    return std::optional<ember::amp::Autocast>(std::in_place, device_type_,
                                               precision_ == "bf16" ? ember::DType::bf16 : ember::DType::f16);
  }

  /// "; fp16 (autocast, parameters in f32, loss scale 65536)", "; bf16 (autocast, parameters in
  /// f32)", or "" under fp32: the end of the examples' setup line.
  std::string describe() const {
    if (precision_ == "fp32") return "";
    char scale[64] = "";
    if (fp16()) std::snprintf(scale, sizeof(scale), ", loss scale %g", scaler_.scale());
    return "; " + precision_ + " (autocast, parameters in f32" + scale + ")";
  }

  /// R with, under fp16, the loss scale (now) and the steps skipped since the last call; R itself
  /// otherwise.
  EpochResult end_epoch(EpochResult r) {
    if (!fp16()) return r;
    r.loss_scale = scaler_.scale();
    r.skipped_steps = scaler_.skipped_steps() - skipped_before_;
    skipped_before_ = scaler_.skipped_steps();
    return r;
  }

  /// After --resume: the skipped steps counted so far belong to earlier epochs.
  void resumed() { skipped_before_ = scaler_.skipped_steps(); }

 private:
  std::string precision_;
  ember::DeviceType device_type_;
  ember::amp::GradScaler scaler_;
  int64_t skipped_before_ = 0;
};

}  // namespace ember_examples
