#pragma once
// Batch normalization over (N, H, W) per channel of NCHW (or over N of (N, C)), and dropout.
// CUDA: cuDNN batch norm; dropout is a hand-written kernel on the counter-based RNG.
#include <cmath>
#include <cstdint>

#include <ember/core/rng.h>
#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

struct BatchNormResult {
  Tensor out;  // shape of x
  Tensor save_mean;  // (C) f32: batch mean (training) — empty in eval mode
  Tensor save_invstd;  // (C) f32: 1/sqrt(batch var + eps) (training) — empty in eval mode
};
/// Parameter dtype ("f32" above): f64 when x is f64, else f32 (cuDNN's rule). weight, bias and the
/// running statistics must have it; save_mean / save_invstd are allocated with it by the front.
/// x is (N, C) or (N, C, ...) (e.g. NCHW); training needs more than one value per channel.
/// Running statistics may be undefined in training (then nothing is tracked), never in eval.
/// training: normalizes with batch statistics (biased variance) and updates running_mean and
/// running_var in place: r = (1 - momentum) * r + momentum * batch_stat (unbiased variance for
/// running_var). eval: normalizes with the running statistics. weight/bias (C) may be undefined.
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps);
struct BatchNormGrads {
  Tensor grad_x, grad_weight, grad_bias;
};
/// Backward of batch_norm. In training mode uses save_mean/save_invstd; in eval mode the running
/// statistics (pass them as save_mean = running_mean, save_invstd = 1/sqrt(running_var + eps)).
BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training, double eps);

/// Dropout keeps element i (row-major index) iff (philox_element(seed, offset, i) >> 8) >=
/// dropout_threshold(p): exactly u >= p for u = uint_to_unit_float(bits), in integer arithmetic, so
/// CPU and CUDA masks agree bit for bit.
EMBER_HOST_DEVICE inline uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(::ceil(p * 16777216.0)); }
/// y = x * keep / (1 - p), keep = (u >= p) with u the Philox uniform of element i at
/// (seed, offset) — so the mask is regenerated, not stored, for the backward. i counts the elements
/// in the memory order of x's layout (x.suggest_memory_format()): a channels-last x is masked in
/// place, in NHWC order, so its mask differs from a row-major x's. 0 <= p <= 1; the front handles p == 1 (all
/// zeros) itself, so implementations only see p < 1 and dense x, out of one layout.
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);
/// grad * keep / (1 - p) with the mask dropout() drew for an x of layout `format`
/// (x.suggest_memory_format()); the result has that layout.
Tensor dropout_backward(const Tensor& grad, double p, uint64_t seed, uint64_t offset,
                        MemoryFormat format = MemoryFormat::contiguous);

// ---- implementation signatures: contiguous tensors; x viewed as (N, C, S) with S = H*W ----
using BatchNormFn = void(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum, double eps,
                         const BatchNormResult& out);
using BatchNormBackwardFn = void(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                 const Tensor& save_invstd, bool training, double eps, const BatchNormGrads& out);
using DropoutFn = void(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out);
extern DispatchTable<BatchNormFn> batch_norm_table;
extern DispatchTable<BatchNormBackwardFn> batch_norm_backward_table;
extern DispatchTable<DropoutFn> dropout_table;

}  // namespace ember::kernels
