// Linear and BatchNorm2d take option structs as Conv2d does; their short positional forms keep
// working, and an empty braced list means the default options (never bias = false or eps = 0).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>

using namespace ember;
using namespace ember::layers;

TEST_CASE("layer options: Linear with LinearOptions and the positional bias", "[cpu]") {
  CHECK(Linear(3, 4).bias().defined());
  CHECK_FALSE(Linear(3, 4, {.bias = false}).bias().defined());
  CHECK(Linear(3, 4, {}).bias().defined());
  CHECK_FALSE(Linear(3, 4, false).bias().defined());
  // The same generator state gives the same weights through either form.
  Generator g1(7), g2(7);
  Linear a(3, 4, LinearOptions{}, g1);
  Linear b(3, 4, true, g2);
  CHECK(a.weight().to_vector<float>() == b.weight().to_vector<float>());
  CHECK(a.bias().to_vector<float>() == b.bias().to_vector<float>());
}

TEST_CASE("layer options: BatchNorm2d with BatchNorm2dOptions and the positional form", "[cpu]") {
  const BatchNorm2d d(4);
  CHECK(d.eps() == 1e-5);
  CHECK(d.momentum() == 0.1);
  CHECK(d.weight().defined());
  const BatchNorm2d o(4, {.eps = 1e-3, .momentum = 0.01, .affine = false});
  CHECK(o.eps() == 1e-3);
  CHECK(o.momentum() == 0.01);
  CHECK_FALSE(o.weight().defined());
  CHECK(BatchNorm2d(4, {}).eps() == 1e-5);
  const BatchNorm2d p(4, 1e-3, 0.2, false);
  CHECK(p.eps() == 1e-3);
  CHECK(p.momentum() == 0.2);
  CHECK_FALSE(p.bias().defined());
  CHECK_THROWS_WITH(BatchNorm2d(4, {.eps = 0.0}), Catch::Contains("eps must be positive"));
  // clone_structure keeps the options.
  const auto c = std::dynamic_pointer_cast<BatchNorm2d>(o.clone_structure());
  REQUIRE(c);
  CHECK(c->eps() == 1e-3);
  CHECK(c->momentum() == 0.01);
  CHECK_FALSE(c->weight().defined());
}

TEST_CASE("cross_entropy: one function, taking options or the short label-smoothing form", "[cpu]") {
  const Tensor z = tensor({{1.0, 2.0, 0.5}, {0.1, 0.2, 3.0}});
  const Tensor t64 = tensor({1, 2});
  const Tensor t32 = t64.to(DType::i32);
  const double s = 0.1;
  // The reference, row by row: logsumexp(z) - (1 - s) z[t] - s / C * sum(z).
  double ref = 0;
  const double rows[2][3] = {{1.0, 2.0, 0.5}, {0.1, 0.2, 3.0}};
  const int target[2] = {1, 2};
  for (int n = 0; n < 2; ++n) {
    double e = 0, sum = 0;
    for (double v : rows[n]) e += std::exp(v), sum += v;
    ref += std::log(e) - (1 - s) * rows[n][target[n]] - s / 3 * sum;
  }
  ref /= 2;
  CHECK(ember::cross_entropy(z, t64, {.label_smoothing = s}).item<double>() == Approx(ref).epsilon(1e-12));
  CHECK(ember::cross_entropy(z, t32, {.label_smoothing = s}).item<double>() == Approx(ref).epsilon(1e-12));
  CHECK(ember::cross_entropy(z, t64, s).item<double>() == Approx(ref).epsilon(1e-12));
  CHECK(layers::cross_entropy(z, t32, CrossEntropyOptions{.label_smoothing = s}).item<double>() ==
        Approx(ref).epsilon(1e-12));
  CHECK_THROWS_WITH(ember::cross_entropy(z, t64.to(DType::f32)),
                    Catch::StartsWith("cross_entropy: target must hold class indices (i64 or i32)"));
}
