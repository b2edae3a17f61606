// clip_grad_norm_: the global L2 norm against a float64 reference, clipping to max_norm,
// no-op below it, parameters without gradients, strided gradients, f64, NaN, and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/optim/clip.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

struct Setup {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // float64 copies of the gradients before clipping
  double norm = 0;  // float64 reference norm
  int64_t count = 0;  // elements summed
};

/// Parameters of the given shapes with gradients U[lo, hi) (none for index `skip`).
Setup make(const std::vector<Shape>& shapes, DType dt, double lo, double hi, size_t skip = 99,
           Layout layout = Layout::Contiguous) {
  Setup s;
  double sq = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = zeros(shapes[i], {.dtype = dt}).requires_grad_();
    std::vector<double> g;
    if (i != skip) {
      Tensor gt = random_tensor(shapes[i], dt, 300 + i, lo, hi, layout);
      p.set_grad(gt);
      g = to_f64(gt);
      for (double v : g) sq += v * v;
      s.count += static_cast<int64_t>(g.size());
    }
    s.params.push_back(p);
    s.grads.push_back(g);
  }
  s.norm = std::sqrt(sq);
  return s;
}

/// Relative error bound of the norm global_norm returns in dtype dt over `count` elements
/// (kernels/cpu/optim.cpp): squares of f32 values are exact in double (48 bits), of f64 values one
/// rounding each; the chunked double sum, like the reference's sequential one, is within
/// gamma_count(u64) of the exact sum of squares (kept at half by the sqrt, for both sides); one
/// sqrt in double each side (2 u64); the result's cast to dt (u; none for f64, counted anyway).
double norm_bound(DType dt, int64_t count) {
  const double u64 = unit_roundoff(DType::f64);
  return unit_roundoff(dt) + gamma_n(count, u64) + 2 * u64;
}

/// Relative error bound of a clipped gradient g f, f = max_norm / (norm + 1e-6), against the
/// float64 g f_ref: the norm it was computed from (norm_bound), the factor's sum and division in
/// double on each side (4 u64), its cast to the math dtype and the product (2 u), the
/// reference's product (u64). For f64 u is u64 and the cast is exact (counted anyway).
double clip_bound(DType dt, int64_t count) {
  const double u64 = unit_roundoff(DType::f64);
  return norm_bound(dt, count) + 4 * u64 + 2 * unit_roundoff(dt) + u64;
}

}  // namespace

TEST_CASE("clip_grad_norm_: above max_norm, gradients are scaled to it", "[cpu][optim]") {
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Setup s = make({{33, 17}, {9}, {70001}, {2, 3}}, dt, -1, 1, /*skip=*/3);
    const double max_norm = 2.5;
    Tensor n = optim::clip_grad_norm_(s.params, max_norm);
    CHECK(n.dim() == 0);
    CHECK(n.dtype() == dt);
    CHECK(n.item<double>() == Approx(s.norm).epsilon(norm_bound(dt, s.count)));
    REQUIRE(s.norm > max_norm);
    const double f = max_norm / (s.norm + 1e-6);
    double sq = 0;
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (s.grads[i].empty()) {
        CHECK_FALSE(s.params[i].grad().defined());
        continue;
      }
      std::vector<double> want = s.grads[i];
      for (double& v : want) v *= f;
      check_close(s.params[i].grad(), want, clip_bound(dt, s.count));
      for (double v : to_f64(s.params[i].grad())) sq += v * v;
    }
    // The clipped norm: every gradient within clip_bound of g f_ref, whose norm is max_norm (1 -
    // 1e-6 / (norm + 1e-6)); this loop's sum of squares and sqrt in double: gamma_count + u64.
    const double u64 = unit_roundoff(DType::f64);
    CHECK(std::sqrt(sq) ==
          Approx(max_norm).epsilon(clip_bound(dt, s.count) + gamma_n(s.count, u64) + u64 + 1e-6 / (s.norm + 1e-6)));
  }
}

TEST_CASE("clip_grad_norm_: below max_norm, gradients are unchanged", "[cpu][optim]") {
  Setup s = make({{5, 4}, {3}}, DType::f32, -0.1, 0.1);
  REQUIRE(s.norm < 1.0);
  Tensor n = optim::clip_grad_norm_(s.params, 1.0);
  CHECK(n.item<double>() == Approx(s.norm).epsilon(norm_bound(DType::f32, s.count)));
  for (size_t i = 0; i < s.params.size(); ++i) CHECK(to_f64(s.params[i].grad()) == s.grads[i]);  // factor exactly 1
}

TEST_CASE("clip_grad_norm_: strided gradients are read and scaled through their strides", "[cpu][optim]") {
  for (const Layout layout : {Layout::Transposed, Layout::Strided}) {
    Setup s = make({{6, 9}, {4, 3}}, DType::f32, -2, 2, 99, layout);
    REQUIRE_FALSE(s.params[0].grad().is_contiguous());
    Tensor n = optim::clip_grad_norm_(s.params, 0.5);
    CHECK(n.item<double>() == Approx(s.norm).epsilon(norm_bound(DType::f32, s.count)));
    const double f = 0.5 / (s.norm + 1e-6);
    for (size_t i = 0; i < s.params.size(); ++i) {
      std::vector<double> want = s.grads[i];
      for (double& v : want) v *= f;
      check_close(s.params[i].grad(), want, clip_bound(DType::f32, s.count));
    }
  }
}

TEST_CASE("clip_grad_norm_: no gradients, a NaN gradient, errors", "[cpu][optim]") {
  Tensor p = zeros({3}).requires_grad_();
  Tensor n = optim::clip_grad_norm_({p}, 1.0);
  CHECK(n.item<double>() == 0.0);
  CHECK(n.device() == Device::cpu());

  p.set_grad(from_vector<double>({1.0, NAN, 2.0}, {3}, {.dtype = DType::f32}));
  Tensor nn = optim::clip_grad_norm_({p}, 1.0);
  CHECK(std::isnan(nn.item<double>()));
  for (double v : to_f64(p.grad())) CHECK(std::isnan(v));  // the problem shows, as in PyTorch

  try {
    optim::clip_grad_norm_({p}, -1.0);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("max_norm must be >= 0, got -1"));
  }
}
