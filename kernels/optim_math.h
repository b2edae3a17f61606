#pragma once
// Per-element math of the fused optimizer steps (kernels/optim.h), shared by the CPU and CUDA
// implementations so both devices run the same formulas in the same order. M is the math type:
// float for f32 parameters, double for f64. Hyperparameters are rounded to M once on the host,
// as PyTorch passes Python floats to float kernels.
#include <cmath>
#include <cstdint>

#include <ember/core/half.h>
#include <ember/kernels/optim.h>

namespace ember::kernels::optim_math {

EMBER_HOST_DEVICE inline float sqrt_(float x) { return sqrtf(x); }
EMBER_HOST_DEVICE inline double sqrt_(double x) { return sqrt(x); }

/// SGD coefficients in the math type.
template <typename M> struct SgdCoeffs {
  M lr, momentum, one_minus_dampening, weight_decay;
  bool use_momentum, nesterov, use_weight_decay;
};
template <typename M> inline SgdCoeffs<M> sgd_coeffs(const SgdHyper& h) {
  return {static_cast<M>(h.lr),           static_cast<M>(h.momentum), static_cast<M>(1.0 - h.dampening),
          static_cast<M>(h.weight_decay), h.momentum != 0.0,          h.nesterov,
          h.weight_decay != 0.0};
}

/// One element of an SGD step: updates p (and buf when momentum is on) from gradient g.
/// init: this is the buffer's first step (buf = g, no dampening), as in PyTorch.
template <typename M> EMBER_HOST_DEVICE inline void sgd_update(M& p, M g, M& buf, bool init, const SgdCoeffs<M>& c) {
  if (c.use_weight_decay) g = g + c.weight_decay * p;
  if (c.use_momentum) {
    buf = init ? g : c.momentum * buf + c.one_minus_dampening * g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p = p - c.lr * g;
}

/// Adam coefficients in the math type (the per-parameter bias corrections are in AdamTensorCoeffs).
template <typename M> struct AdamCoeffs {
  M one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor;
  bool use_weight_decay, decoupled;
};
template <typename M> inline AdamCoeffs<M> adam_coeffs(const AdamHyper& h) {
  return {static_cast<M>(1.0 - h.beta1),  static_cast<M>(h.beta2),
          static_cast<M>(1.0 - h.beta2),  static_cast<M>(h.eps),
          static_cast<M>(h.weight_decay), static_cast<M>(1.0 - h.lr * h.weight_decay),
          h.weight_decay != 0.0,          h.decoupled};
}
/// Bias-corrected step size lr / (1 - beta1^step) and sqrt(1 - beta2^step), computed in double.
template <typename M> struct AdamTensorCoeffs { M step_size, bias_correction2_sqrt; };
template <typename M> inline AdamTensorCoeffs<M> adam_tensor_coeffs(const AdamHyper& h, int64_t step) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  return {static_cast<M>(h.lr / bc1), static_cast<M>(std::sqrt(bc2))};
}

/// One element of an Adam/AdamW step: updates p, m (exp_avg), v (exp_avg_sq) from gradient g.
template <typename M>
EMBER_HOST_DEVICE inline void adam_update(M& p, M g, M& m, M& v, const AdamCoeffs<M>& c, const AdamTensorCoeffs<M>& t) {
  if (c.use_weight_decay) {
    if (c.decoupled) p = p * c.decay_factor;
    else g = g + c.weight_decay * p;
  }
  m = m + c.one_minus_beta1 * (g - m);
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  const M denom = sqrt_(v) / t.bias_correction2_sqrt + c.eps;
  p = p - t.step_size * (m / denom);
}

/// The clipping factor min(1, max_norm / (norm + eps)); NaN stays NaN.
template <typename M> EMBER_HOST_DEVICE inline M clip_factor(M norm, M max_norm, M eps) {
  const M f = max_norm / (norm + eps);
  return f > M(1) ? M(1) : f;
}

}  // namespace ember::kernels::optim_math
