#pragma once
// Mixed-precision support kernels: the gradient scaler's fused unscale pass (optim/grad_scaler.h).
// No autograd here.
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// For every tensor, in place: x = x * inv_scale (math in f32, f64 for f64 tensors), and
/// found_inf[0] = 1 when any element (before scaling) is inf or NaN; found_inf is left as it is
/// otherwise, so one flag can collect several calls. One fused pass over all tensors.
///   tensors:   any shapes and layouts, dtypes f32, f64, f16 or bf16, all on found_inf's device
///   found_inf: 1-element f32 on the tensors' device; read on the device, never by the host here
/// With a power-of-two scale inv_scale is exact, and so is the result (short of f16/bf16
/// subnormal underflow). Errors name the tensor that has the wrong dtype or device.
void non_finite_check_and_unscale_(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale);

// ---- implementation signature ----
// All tensors of a call are contiguous, non-empty and on found_inf's device (dtypes may mix).
using NonFiniteUnscaleFn = void(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale);
extern DispatchTable<NonFiniteUnscaleFn> non_finite_unscale_table;

}  // namespace ember::kernels
