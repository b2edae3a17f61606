#pragma once
// Broadcasting helpers for the kernel front functions: views with stride 0 on broadcast dims.
#include <ember/core/tensor.h>

namespace ember::kernels {

/// True when `from` broadcasts to exactly `to` (NumPy rules, `from` may have fewer dims).
bool broadcasts_to(const Shape& from, const Shape& to);
/// A view of t with shape `sizes` (t's shape must broadcast to it): new leading dims and size-1
/// dims that grow get stride 0. No copy, no autograd. Returns t itself when the shape already matches.
Tensor expand_to(const Tensor& t, const Shape& sizes);

}  // namespace ember::kernels
