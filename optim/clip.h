#pragma once
// Gradient clipping by global norm (PyTorch's clip_grad_norm_ with the L2 norm).
#include <vector>

#include <ember/core/tensor.h>

namespace ember::optim {

/// Computes the L2 norm of all gradients of `params` taken together (one fused reduction over
/// every gradient; parameters without a gradient are skipped) and scales every gradient in place
/// by min(1, max_norm / (norm + 1e-6)), read on the gradients' device. Returns the norm before clipping:
/// a 0-d tensor on the gradients' device (f32, or f64 when every gradient is f64), so on a GPU
/// nothing waits for it until the caller reads it (.item<double>()). No gradients: a CPU 0.
/// All gradients must share one device. A non-finite norm makes the gradients NaN (as PyTorch
/// does without error_if_nonfinite), so the problem shows instead of silently passing.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace ember::optim
