#pragma once
// Losses, mean-reduced over the batch. Each returns a 0-d tensor.
#include <ember/autograd/ops.h>
#include <ember/core/tensor.h>

namespace ember::layers {

/// cross_entropy(logits (N, C), target (N) class indices, {.label_smoothing = s}): ember's one
/// cross-entropy (autograd/ops.h), named here beside the other losses as PyTorch's
/// torch.nn.functional names it.
using ember::cross_entropy;
using ember::CrossEntropyOptions;
/// log_probs (N, C), target (N) class indices (i64 or i32) -> 0-d of log_probs' dtype:
/// -mean_n log_probs[n, target[n]]. Targets are range-checked on every device (for a GPU target,
/// one copy to the host and a sync); one outside [0, C) is an error naming it and its row.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target);
/// a, b of one shape -> 0-d: mean((a - b)^2).
Tensor mse_loss(const Tensor& a, const Tensor& b);

}  // namespace ember::layers
