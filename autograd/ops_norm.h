#pragma once
// Differentiable batch normalization and dropout (namespace ember, beside autograd/ops.h).
#include <cstdint>

#include <ember/core/tensor.h>

namespace ember {

/// Batch normalization of x (N, C) or (N, C, ...) per channel C. weight, bias (C) may be undefined
/// (no affine transform). training: normalizes with the batch mean and biased variance and, when
/// running_mean / running_var (C) are defined, updates them in place with `momentum` (unbiased
/// variance for running_var); eval: normalizes with the running statistics. Parameter tensors are
/// f64 for f64 input, else f32. Gradients flow to x, weight and bias (in both modes).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

/// Inverted dropout of x (any shape, floating): element i (row-major) is zeroed with probability p
/// and the rest scaled by 1/(1-p). The mask is a pure function of (seed, offset) (the Philox layout
/// of core/rng.h; reserve numel() elements from a Generator for the offset), regenerated rather
/// than stored for the backward, and identical on CPU and CUDA.
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);

}  // namespace ember
