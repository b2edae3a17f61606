#pragma once
// Float64 reference loops of the optimizers, written from PyTorch's documented algorithms
// (torch.optim.SGD, Adam, AdamW; amsgrad off), independent of ember's kernels: plain loops over
// std::vector<double>. Used by tests/optim/*.cpp, tests/kernels/test_optim.cpp and the CUDA test.
//
// Tolerance: an f32 step performs a handful of roundings on values of magnitude about |p| and 1
// (gradients and moments are O(1) in these tests), so after a few steps ember's f32 result is within
// a small multiple of tol(f32) * (|p| + 1) of the float64 one; opt_bound() gives 4x that.
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/reference.h"

namespace ember::testing {

struct SgdRef {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> buf{};
  bool has_buf = false;

  void step(std::vector<double>& p, const std::vector<double>& g) {
    std::vector<double> d = g;
    for (size_t i = 0; i < p.size(); ++i) d[i] += weight_decay * p[i];
    if (momentum != 0) {
      if (!has_buf) {
        buf = d;  // first step: the buffer is the gradient itself, no dampening
        has_buf = true;
      } else {
        for (size_t i = 0; i < p.size(); ++i) buf[i] = momentum * buf[i] + (1 - dampening) * d[i];
      }
      for (size_t i = 0; i < p.size(); ++i) d[i] = nesterov ? d[i] + momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * d[i];
  }
};

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW
  std::vector<double> m{}, v{};
  int64_t t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g_in) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    std::vector<double> g = g_in;
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) p[i] *= 1 - lr * weight_decay;
      else g[i] += weight_decay * p[i];
    }
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

/// Allowed |ember - reference| for a parameter after a few optimizer steps in dtype dt.
inline double opt_bound(DType dt, double ref) { return 4.0 * tol(dt) * (std::fabs(ref) + 1.0); }

/// CHECKs every element of `actual` against `ref` within opt_bound(dt).
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
