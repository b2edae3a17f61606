#pragma once
// Losses, mean-reduced over the batch. Each returns a 0-d tensor.
#include <ember/core/tensor.h>

namespace ember::layers {

struct CrossEntropyOptions {
  /// Target distribution (1 - s) * one_hot + s / C, as in PyTorch.
  double label_smoothing = 0.0;
};
/// logits (N, C) floating, target (N) class indices (i64 or i32) -> 0-d f32 (f64 for f64 logits,
/// as in PyTorch): the mean over rows of -log softmax(logits)[target] (with label smoothing), by
/// the fused kernel.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
/// log_probs (N, C), target (N) class indices (i64 or i32) -> 0-d of log_probs' dtype:
/// -mean_n log_probs[n, target[n]]. Targets are range-checked on every device (for a GPU target,
/// one copy to the host and a sync); one outside [0, C) is an error naming it and its row.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target);
/// a, b of one shape -> 0-d: mean((a - b)^2).
Tensor mse_loss(const Tensor& a, const Tensor& b);

}  // namespace ember::layers
