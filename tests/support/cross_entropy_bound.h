#pragma once
// Rounding bounds of cross_entropy against a float64 reference, per row (tests/autograd/test_ops_nn.cpp
// and tests/layers/test_loss.cpp check the loss and its gradient with them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <ember/core/dtype.h>

#include "support/reference.h"

namespace ember::testing {

/// Rounding bounds of cross_entropy on one row x of C logits (kernels/cpu/softmax.cpp: row_stats,
/// cross_entropy_typed, cross_entropy_backward_typed) against the double formulas here. uc: the
/// kernel's arithmetic and rows dtype (unit roundoff of float for f32 logits, double for f64);
/// u64: its double sums and log, and every step of the references. libm's exp and log are taken
/// within 2 ulp (4 u). z = x - max rounds (uc |z|) and exp(z) rounds (4 uc), so the kernel's sum
/// s = sum exp(z) in double has relative error eps_k = sum exp(z) (|z| + 4) uc / s + gamma_C(u64);
/// the reference's eps_r the same with u64. Non-finite z (a -inf logit) adds an exact 0.
struct CeRow {
  double mx = -INFINITY, L = 0, eps_k = 0, eps_r = 0;
};
inline CeRow ce_row(const double* x, int64_t C, double uc) {
  const double u64 = unit_roundoff(DType::f64);
  CeRow r;
  for (int64_t c = 0; c < C; ++c) r.mx = std::max(r.mx, x[c]);
  double s = 0, w = 0;
  int64_t n = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double z = x[c] - r.mx;
    if (!std::isfinite(z)) continue;
    s += std::exp(z);
    w += std::exp(z) * (std::fabs(z) + 4);
    ++n;
  }
  r.L = std::log(s);
  r.eps_k = w * uc / s + gamma_n(n, u64);
  r.eps_r = w * u64 / s + gamma_n(n, u64);
  return r;
}

/// First-order bound on |kernel's loss_n - the exact one| for row x, target t, smoothing ls:
/// the sum and the log in double (eps_k + 4 u64 L); (1 - ls) (max - x_t): the difference, 1 - ls
/// and the product (3 u64); ls / C sum (max - x): C + 1 roundings of the sum, the product and the
/// division (gamma_{C+1}(u64) + 2 u64); the two additions and the store into the rows' dtype
/// ((2 u64 + uc) loss_n, every term >= 0). Also returns loss_n itself.
inline double ce_loss_row_bound(const double* x, int64_t C, int64_t t, double ls, double uc, double& loss_n) {
  const double u64 = unit_roundoff(DType::f64);
  const CeRow r = ce_row(x, C, uc);
  double gap = 0;
  for (int64_t c = 0; c < C; ++c) gap += r.mx - x[c];
  const double A = (1 - ls) * (r.mx - x[t]), S = ls * gap / C;
  loss_n = r.L + A + S;
  return r.eps_k + 4 * u64 * r.L + 3 * u64 * A + (gamma_n(C + 1, u64) + 2 * u64) * S + (2 * u64 + uc) * loss_n;
}

/// First-order bound on |kernel's d[n, c] - the double reference| for row x, target t,
/// smoothing ls and g_n = 1 / N (fl(1 / N) in the rows' dtype: u64 + uc). The kernel's
/// p = exp((z - fl(L))): L's eps_k + 4 u64 L and its cast (uc L), z and the subtraction
/// (uc (|z| + |z - L|)), exp (4 uc). The reference's p, exp(x - lse) or exp(z) / s: eps_r + 4 u64 L,
/// lse = max + L and x - lse (u64 (|lse| + |z| + L)), exp and a division (6 u64). 1 - ls and
/// ls / C (u64 in double, uc the kernel's cast, u64 the reference's product), the two
/// differences (uc + u64 each), the product by g_n and the reference's division by N.
inline std::vector<double> ce_grad_row_bound(const double* x, int64_t C, int64_t t, double ls, double uc, int64_t N) {
  const double u64 = unit_roundoff(DType::f64);
  const CeRow r = ce_row(x, C, uc);
  const double lse = r.mx + r.L, smooth = ls / C;
  std::vector<double> b;
  for (int64_t c = 0; c < C; ++c) {
    const double z = x[c] - r.mx, hit = c == t ? 1 - ls : 0.0;
    double p = 0, pe = 0;
    if (std::isfinite(z)) {
      p = std::exp(z - r.L);
      const double az = std::fabs(z);
      pe = p * (r.eps_k + 4 * u64 * r.L + uc * r.L + uc * (az + az + r.L) + 4 * uc + r.eps_r + 4 * u64 * r.L +
                u64 * (std::fabs(lse) + az + r.L) + 6 * u64);
    }
    const double q = p - hit - smooth;
    const double e = pe + (2 * u64 + uc) * (hit + smooth) + (uc + u64) * (std::fabs(p - hit) + std::fabs(q));
    b.push_back(e / N + (2 * uc + 2 * u64) * std::fabs(q) / N);
  }
  return b;
}

}  // namespace ember::testing
