// Linear: forward against a float64 reference (contiguous and non-contiguous input), weight and
// bias gradients against hand-computed references, input gradcheck, default init bounds,
// reproducibility from the seed, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/linear.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::Linear;
using ember::testing::check_close;
using ember::testing::Layout;
using ember::testing::loose_tol_sum;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

// y[n, o] = sum_i x[n, i] * w[o, i] + b[o]
std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                               int64_t N, int64_t in, int64_t out) {
  std::vector<double> y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * w[o * in + i];
      y[n * out + o] = s;
    }
  return y;
}

}  // namespace

TEST_CASE("Linear: parameters, shapes and forward vs float64 reference", "[cpu][layers]") {
  const int64_t N = 7, in = 13, out = 5;
  manual_seed(123);
  Linear lin(in, out);
  auto named = lin.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(lin.weight().sizes() == Shape{out, in});
  CHECK(lin.bias().sizes() == Shape{out});
  for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
    Tensor x = random_tensor({N, in}, DType::f32, 7, -1, 1, layout);
    Tensor y = lin.forward(x);
    REQUIRE(y.sizes() == Shape{N, out});
    auto ref = linear_ref(to_f64(x), to_f64(lin.weight()), to_f64(lin.bias()), N, in, out);
    // Dot products of length `in` with |x|, |w| <= 1: absolute error ~ loose_tol_sum(f32, in) * sum|x w|.
    check_close(y, ref, loose_tol_sum(DType::f32, in), loose_tol_sum(DType::f32, in) * static_cast<double>(in));
  }
  // Leading batch dims are kept: (2, 3, in) -> (2, 3, out).
  Tensor x3 = random_tensor({2, 3, in}, DType::f32, 8);
  CHECK(lin.forward(x3).sizes() == Shape{2, 3, out});
}

TEST_CASE("Linear: weight, bias and input gradients", "[cpu][layers]") {
  const int64_t N = 6, in = 9, out = 4;
  Linear lin(in, out);
  lin.to(DType::f64);
  Tensor x = random_tensor({N, in}, DType::f64, 11);
  Tensor g = random_tensor({N, out}, DType::f64, 12);
  lin.forward(x).backward(g);
  auto xv = to_f64(x), gv = to_f64(g);
  std::vector<double> dw(static_cast<size_t>(out * in), 0.0), db(static_cast<size_t>(out), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      db[o] += gv[n * out + o];
      for (int64_t i = 0; i < in; ++i) dw[o * in + i] += gv[n * out + o] * xv[n * in + i];
    }
  check_close(lin.weight().grad(), dw, 1e-12, 1e-12);
  check_close(lin.bias().grad(), db, 1e-12, 1e-12);
  EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& v) { return lin.forward(v[0]); },
                        {random_tensor({N, in}, DType::f64, 13, -1, 1, Layout::Transposed)});
}

TEST_CASE("Linear: PyTorch default init bounds, reproducible from the seed, bias=false", "[cpu][layers]") {
  const int64_t in = 300, out = 40;
  manual_seed(7);
  Linear a(in, out);
  manual_seed(7);
  Linear b(in, out);
  manual_seed(8);
  Linear c(in, out);
  CHECK(to_f64(a.weight()) == to_f64(b.weight()));
  CHECK(to_f64(a.bias()) == to_f64(b.bias()));
  CHECK(to_f64(a.weight()) != to_f64(c.weight()));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto w = to_f64(a.weight());
  double mx = 0.0, sq = 0.0;
  for (double v : w) {
    mx = std::max(mx, std::abs(v));
    sq += v * v;
  }
  CHECK(mx <= bound);
  // E[w^2] = bound^2 / 3; the sample mean of w^2 has std sqrt(4/45) bound^2 / sqrt(n) (U[-b, b]).
  const double n = static_cast<double>(w.size());
  CHECK(std::abs(sq / n - bound * bound / 3.0) < 5.0 * std::sqrt(4.0 / 45.0) * bound * bound / std::sqrt(n));
  for (double v : to_f64(a.bias())) CHECK(std::abs(v) <= bound);
  Linear nb(in, out, false);
  CHECK(nb.parameters().size() == 1);
  CHECK_FALSE(nb.bias().defined());
  CHECK(nb.str() == "Linear(in_features=300, out_features=40, bias=False)");
}

TEST_CASE("Linear: a wrong input width names both sizes", "[cpu][layers]") {
  Linear lin(4, 2);
  CHECK_THROWS_WITH(lin.forward(zeros({3, 5})), Catch::Contains("[3, 5]") && Catch::Contains("(..., 4)"));
}
