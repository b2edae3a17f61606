#pragma once
// Float64 reference loops of the optimizers, written from PyTorch's documented algorithms
// (torch.optim.SGD, Adam, AdamW; amsgrad off), independent of ember's kernels: plain loops over
// std::vector<double>. Used by tests/optim/*.cpp, tests/kernels/test_optim.cpp and the CUDA test.
//
// Bounds. With `u` set to the unit roundoff of ember's math dtype (unit_roundoff(f32) for f32
// parameters, whatever the gradients' dtype; unit_roundoff(f64) for f64), each step also carries a
// running error bound (Higham, Accuracy and Stability of Numerical Algorithms, 3.3): err_p bounds
// |ember's parameter - the exact result| + |this reference's - the exact result| elementwise, and
// err_buf / err_m / err_v the same for the state. It is built from the formulas of
// kernels/optim_math.h: every operation ember performs rounds once in its math dtype (u) and every
// operation of this loop once in float64 (u64 = 2^-53), so each operation contributes
// r |result| with r = u + u64 (ember's casts of the hyperparameters to the math dtype are one more
// rounding each, counted as r |term|), and errors already made propagate through the formula's
// partial derivatives. The bias corrections 1 - beta^t are the same double in ember
// (adam_tensor_coeffs) and here, so their cancellation cancels out. First order: the neglected
// O(u^2) terms are below n u (n < 30 operations per step) of the bound, which the factor
// kSecondOrder of check_bounded(actual, ref, err) (support/reference.h) covers.
//
// opt_bound(dt, ref) / check_param(actual, ref, dt) are loose: 4 * loose_tol(dt) * (|ref| + 1),
// i.e. 671 u (f32) or 36029 u (f64) times (|ref| + 1). Kept for the callers whose errors are not
// tracked (parameters trained through forward/backward, the CUDA twins).
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "support/reference.h"

namespace ember::testing {

struct SgdRef {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> buf{};
  bool has_buf = false;
  double u = 0;  // unit roundoff of ember's math dtype; 0 leaves the bounds at the reference's own
  std::vector<double> err_p{}, err_buf{};  // running error bounds of p and buf (top of the file)

  void step(std::vector<double>& p, const std::vector<double>& g) {
    const double r = u + unit_roundoff(DType::f64);
    if (err_p.size() != p.size()) err_p.assign(p.size(), 0.0);
    if (err_buf.size() != p.size()) err_buf.assign(p.size(), 0.0);  // a given buffer is exact
    std::vector<double> d = g, ed(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double wp = weight_decay * p[i];
      d[i] += wp;
      // g + wd p: ember casts wd and rounds the product and the sum; this loop the last two.
      if (weight_decay != 0) ed[i] = weight_decay * err_p[i] + r * (2 * std::fabs(wp) + std::fabs(d[i]));
    }
    if (momentum != 0) {
      if (!has_buf) {
        buf = d;  // first step: the buffer is the gradient itself, no dampening
        err_buf = ed;
        has_buf = true;
      } else {
        for (size_t i = 0; i < p.size(); ++i) {
          const double mb = momentum * buf[i], dd = (1 - dampening) * d[i];
          buf[i] = mb + dd;
          // momentum buf: cast and product (ember), product (here); (1 - dampening) d: 1 - x in
          // double, cast and product (ember), subtraction and product (here); the sum, once each.
          err_buf[i] = momentum * err_buf[i] + (1 - dampening) * ed[i] +
                       r * (2 * std::fabs(mb) + 3 * std::fabs(dd) + std::fabs(buf[i]));
        }
      }
      for (size_t i = 0; i < p.size(); ++i) {
        if (nesterov) {
          const double mb = momentum * buf[i];
          d[i] = d[i] + mb;
          ed[i] = ed[i] + momentum * err_buf[i] + r * (2 * std::fabs(mb) + std::fabs(d[i]));
        } else {
          d[i] = buf[i];
          ed[i] = err_buf[i];
        }
      }
    }
    for (size_t i = 0; i < p.size(); ++i) {
      const double step = lr * d[i];
      p[i] -= step;
      // lr d: cast and product (ember), product (here); the subtraction, once each.
      err_p[i] += lr * ed[i] + r * (2 * std::fabs(step) + std::fabs(p[i]));
    }
  }
};

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW
  std::vector<double> m{}, v{};
  int64_t t = 0;
  double u = 0;  // unit roundoff of ember's math dtype; 0 leaves the bounds at the reference's own
  std::vector<double> err_p{}, err_m{}, err_v{};  // running error bounds (top of the file)

  void step(std::vector<double>& p, const std::vector<double>& g_in) {
    const double r = u + unit_roundoff(DType::f64);
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    if (err_p.size() != p.size()) err_p.assign(p.size(), 0.0);
    if (err_m.size() != p.size()) err_m.assign(p.size(), 0.0), err_v.assign(p.size(), 0.0);
    ++t;
    std::vector<double> g = g_in, eg(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled && weight_decay != 0) {
        // p (1 - lr wd): lr wd and 1 - x in double, the cast and the product (ember); the same
        // three in double here.
        const double f = 1 - lr * weight_decay;
        err_p[i] = f * err_p[i] + r * std::fabs(p[i]) * (2 * lr * weight_decay + 3 * f);
        p[i] *= f;
      } else if (!decoupled) {
        const double wp = weight_decay * p[i];
        g[i] += wp;
        if (weight_decay != 0) eg[i] = weight_decay * err_p[i] + r * (2 * std::fabs(wp) + std::fabs(g[i]));
      }
    }
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      const double m0 = m[i], v0 = v[i], ag = std::fabs(g[i]);
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      // ember: m + c1 (g - m), c1 = (1 - beta1) in double then cast: the difference, c1's two
      // roundings and the product on (1 - beta1) |g - m|, the sum on |m'|. Here: beta1 m, 1 - beta1
      // and its product with g, the sum.
      err_m[i] =
          beta1 * err_m[i] + (1 - beta1) * eg[i] +
          r * (3 * (1 - beta1) * std::fabs(g[i] - m0) + beta1 * std::fabs(m0) + 2 * (1 - beta1) * ag + std::fabs(m[i]));
      // beta2 v: cast and product (ember), product (here); c2 g g: 1 - beta2 in double, cast and
      // two products (ember), the same without the cast (here); the sum.
      err_v[i] = beta2 * err_v[i] + 2 * (1 - beta2) * ag * eg[i] +
                 r * (2 * beta2 * std::fabs(v0) + 4 * (1 - beta2) * ag * ag + std::fabs(v[i]));
      const double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
      const double sq = std::sqrt(v_hat), den = sq + eps, d = lr * m_hat / den;
      // The denominator sqrt(v_hat) + eps. ember: sqrt(v) / c (c = sqrt(bc2) in double, cast),
      // + eps (cast): sqrt, c's two roundings and the division on sqrt(v_hat), the cast on eps, the
      // sum on den. Here: v / bc2 (half a rounding after the sqrt), sqrt, the sum. Plus err_v
      // through d sqrt(v_hat) / dv = 1 / (2 sqrt(v bc2)) (or sqrt(err_v / bc2) at v = 0).
      const double e_sq = v[i] > 0 ? err_v[i] / (2 * std::sqrt(v[i] * bc2)) : std::sqrt(err_v[i] / bc2);
      const double e_den = e_sq + r * (3 * sq + eps + den);
      // The numerator lr m / bc1. ember: lr / bc1 in double, cast; here m / bc1, lr m_hat.
      const double e_num = lr / bc1 * err_m[i] + r * 2 * std::fabs(lr * m_hat);
      // d = num / den: ember's m / den and the product by lr / bc1, this loop's division.
      const double e_d = e_num / den + std::fabs(d) * e_den / den + r * 2 * std::fabs(d);
      p[i] -= d;
      err_p[i] += e_d + r * std::fabs(p[i]);
    }
  }
};

/// A loose allowed |ember - reference| after a few optimizer steps in dtype dt, not derived (top of
/// the file): 4 * loose_tol(dt) * (|ref| + 1).
inline double opt_bound(DType dt, double ref) { return 4.0 * loose_tol(dt) * (std::fabs(ref) + 1.0); }

/// CHECKs every element of `actual` against `ref` within the loose opt_bound(dt).
inline void check_param(const Tensor& actual, const std::vector<double>& ref, DType dt) {
  const std::vector<double> got = to_f64(actual);
  REQUIRE(got.size() == ref.size());
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - ref[i]) <= opt_bound(dt, ref[i])) && bad++ < 5)
      os << "  [" << i << "] got " << got[i] << " expected " << ref[i] << "\n";
  }
  INFO("shape " << actual.shape_str() << " dtype " << dtype_name(dt) << ", " << bad << " mismatches:\n" << os.str());
  CHECK(bad == 0);
}

}  // namespace ember::testing
