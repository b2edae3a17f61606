// conv2d (autograd) and the Conv2d layer: float64 finite-difference gradchecks for x, weight and
// bias on odd geometries, gradients computed only where needed, output shapes, PyTorch's default
// init (bounds, spread, reproducible from the seed), printing, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/conv.h>
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::Conv2d;
using ember::testing::error_of;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

struct GradCase {
  const char* what;
  Shape xs, ws;
  Conv2dFuncOptions opts;
};

}  // namespace

TEST_CASE("conv2d gradcheck (float64) for x, weight and bias", "[cpu][layers]") {
  const std::vector<GradCase> cases = {
      {"kernel 3x2, stride 2, pad 1, dilation 2, groups 3", {2, 3, 7, 9}, {6, 1, 3, 2}, {2, 1, 2, 3}},
      {"3x3, pad 1", {2, 2, 5, 6}, {3, 2, 3, 3}, {1, 1, 1, 1}},
      {"1x1 direct path, groups 2", {2, 4, 3, 5}, {4, 2, 1, 1}, {1, 0, 1, 2}},
      {"asymmetric stride, padding, dilation", {1, 2, 7, 6}, {2, 2, 2, 3}, {{2, 1}, {0, 2}, {1, 2}, 1}},
  };
  uint64_t seed = 11;
  for (const GradCase& c : cases) {
    INFO(c.what);
    const Conv2dFuncOptions opts = c.opts;
    Tensor x = random_tensor(c.xs, DType::f64, seed++, -1, 1, Layout::Transposed);
    Tensor w = random_tensor(c.ws, DType::f64, seed++, -1, 1, Layout::Strided);
    Tensor b = random_tensor({c.ws[0]}, DType::f64, seed++);
    EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], opts); }, {x, w, b});
    // Without bias.
    EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), opts); }, {x, w});
  }
}

TEST_CASE("conv2d feeding relu and max_pool2d: gradcheck of the chain (MNIST block shape)", "[cpu][layers]") {
  Tensor x = random_tensor({2, 2, 8, 7}, DType::f64, 3);
  Tensor w = random_tensor({3, 2, 3, 3}, DType::f64, 4);
  Tensor b = random_tensor({3}, DType::f64, 5, -0.2, 0.2);
  EMBER_CHECK_GRADIENTS([](const std::vector<Tensor>& in) { return max_pool2d(relu(conv2d(in[0], in[1], in[2])), 2); },
                        {x, w, b});
}

TEST_CASE("conv2d computes only the gradients that are needed", "[cpu][layers]") {
  Tensor x = random_tensor({2, 3, 6, 5}, DType::f32, 1);
  Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 2).requires_grad_();
  Tensor b = random_tensor({4}, DType::f32, 3);  // a constant bias
  Tensor y = conv2d(x, w, b);
  REQUIRE(y.requires_grad());
  sum(y).backward();
  CHECK(w.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // dL/dbias for L = sum(y) is the number of output positions per channel: N * Ho * Wo = 2*4*3.
  Tensor b2 = random_tensor({4}, DType::f32, 3).requires_grad_();
  sum(conv2d(x, w.detach(), b2)).backward();
  for (double v : to_f64(b2.grad())) CHECK(v == 24.0);
  // Under NoGradGuard nothing is recorded.
  {
    NoGradGuard guard;
    CHECK_FALSE(conv2d(x, w, b2).requires_grad());
  }
}

TEST_CASE("Conv2d layer: parameters, output shapes, forward equals conv2d", "[cpu][layers]") {
  manual_seed(5);
  Conv2d conv(3, 6, {3, 2}, {.stride = 2, .padding = 1, .dilation = 2, .groups = 3});
  auto named = conv.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(conv.weight().sizes() == Shape{6, 1, 3, 2});
  CHECK(conv.bias().sizes() == Shape{6});
  CHECK(conv.weight().requires_grad());
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f32, 9);
  Tensor y = conv.forward(x);
  CHECK(y.sizes() == Shape{2, 6, 3, 5});
  CHECK(to_f64(y) == to_f64(conv2d(x, conv.weight(), conv.bias(), {2, 1, 2, 3})));

  // The MNIST CNN's layers: (64, 1, 28, 28) -> (64, 32, 26, 26) -> (64, 64, 24, 24).
  Conv2d c1(1, 32, 3), c2(32, 64, 3);
  CHECK(c2.forward(c1.forward(zeros({4, 1, 28, 28}))).sizes() == Shape{4, 64, 24, 24});

  Conv2d nb(4, 2, 1, {.bias = false});
  CHECK(nb.named_parameters().size() == 1);
  CHECK_FALSE(nb.bias().defined());
  CHECK(nb.forward(zeros({1, 4, 3, 3})).sizes() == Shape{1, 2, 3, 3});
  auto sd = conv.state_dict();
  CHECK(sd.count("weight") == 1);
  CHECK(sd.count("bias") == 1);
}

TEST_CASE("Conv2d layer: gradcheck through the layer in float64", "[cpu][layers]") {
  Conv2d conv(2, 4, {2, 3}, {.stride = {1, 2}, .padding = 1, .groups = 2});
  conv.to(DType::f64);
  Tensor x = random_tensor({2, 2, 5, 7}, DType::f64, 21);
  EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& in) { return conv.forward(in[0]); }, {x});
  // The parameters' gradients from one backward agree with the functional op's.
  Tensor xl = random_tensor({2, 2, 5, 7}, DType::f64, 22);
  Tensor g = random_tensor({2, 4, 6, 4}, DType::f64, 23);
  conv.zero_grad();
  conv.forward(xl).backward(g);
  Tensor w = conv.weight().detach().clone().requires_grad_(), b = conv.bias().detach().clone().requires_grad_();
  conv2d(xl, w, b, {{1, 2}, 1, 1, 2}).backward(g);
  CHECK(to_f64(conv.weight().grad()) == to_f64(w.grad()));
  CHECK(to_f64(conv.bias().grad()) == to_f64(b.grad()));
}

TEST_CASE("Conv2d layer: PyTorch default init, bounds and spread, reproducible from the generator", "[cpu][layers]") {
  // fan_in = 32 / 2 * 3 * 3 = 144; weight and bias ~ U[-1/12, 1/12).
  Generator g1(77), g2(77), g3(78);
  Conv2d a(32, 64, 3, {.groups = 2}, g1), b(32, 64, 3, {.groups = 2}, g2), c(32, 64, 3, {.groups = 2}, g3);
  const double bound = 1.0 / 12.0;
  const std::vector<double> w = to_f64(a.weight()), bias = to_f64(a.bias());
  REQUIRE(w.size() == 64u * 16 * 9);
  CHECK(w == to_f64(b.weight()));
  CHECK(bias == to_f64(b.bias()));
  CHECK(w != to_f64(c.weight()));
  double mean = 0, sq = 0, lo = 1, hi = -1;
  for (double v : w) {
    mean += v;
    sq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double n = static_cast<double>(w.size());
  mean /= n;
  sq /= n;
  for (double v : bias) CHECK(std::fabs(v) <= bound);
  CHECK(lo >= -bound);
  CHECK(hi < bound);
  // U[-a, a): mean 0 (sd a / sqrt(3n)), E[v^2] = a^2 / 3 (sd about a^2 * 0.3 / sqrt(n)); 5 sigma.
  CHECK(std::fabs(mean) < 5 * bound / std::sqrt(3 * n));
  CHECK(std::fabs(sq - bound * bound / 3) < 5 * 0.3 * bound * bound / std::sqrt(n));
  // The extremes come close to the bound (n = 9216 draws: within 1% of it almost surely).
  CHECK(hi > 0.99 * bound);
  CHECK(lo < -0.99 * bound);
  // The default generator: manual_seed makes it reproducible.
  manual_seed(3);
  Conv2d d(3, 4, 3);
  manual_seed(3);
  Conv2d e(3, 4, 3);
  CHECK(to_f64(d.weight()) == to_f64(e.weight()));
  CHECK(to_f64(d.bias()) == to_f64(e.bias()));
}

TEST_CASE("Conv2d layer: printing and errors", "[cpu][layers]") {
  using Catch::Matchers::Contains;
  CHECK(Conv2d(1, 32, 3).extra_repr() == "1, 32, kernel_size=(3, 3), stride=(1, 1)");
  CHECK(
      Conv2d(4, 8, {3, 2}, {.stride = 2, .padding = {1, 0}, .dilation = 2, .groups = 4, .bias = false}).extra_repr() ==
      "4, 8, kernel_size=(3, 2), stride=(2, 2), padding=(1, 0), dilation=(2, 2), groups=4, bias=False");
  CHECK_THAT(Conv2d(1, 32, 3).str(), Contains("Conv2d(1, 32, kernel_size=(3, 3)"));
  Conv2d conv(3, 4, 3);
  CHECK_THAT(error_of([&] {
               conv.forward(zeros({2, 5, 8, 8}));
             }),
             Contains("[2, 5, 8, 8]") && Contains("(N, 3, H, W)"));
  CHECK_THAT(error_of([&] { conv.forward(zeros({5, 8, 8})); }), Contains("[5, 8, 8]"));
  CHECK_THAT(error_of([&] { conv.forward(zeros({1, 3, 2, 2})); }), Contains("[1, 3, 2, 2]") && Contains("too small"));
  CHECK_THAT(error_of([&] { Conv2d(3, 4, 3, {.groups = 2}); }), Contains("groups = 2"));
  CHECK_THAT(error_of([&] { Conv2d(3, 4, 0); }), Contains("kernel_size"));
  CHECK_THAT(error_of([&] { Conv2d(3, 4, 3, {.stride = 0}); }), Contains("stride"));
  // Functional: mismatched channels name both shapes.
  CHECK_THAT(error_of([&] {
               conv2d(zeros({2, 3, 7, 9}), zeros({5, 4, 3, 3}));
             }),
             Contains("[2, 3, 7, 9]") && Contains("[5, 4, 3, 3]"));
  CHECK_THAT(error_of([&] { conv2d(Tensor(), zeros({5, 4, 3, 3})); }), Contains("undefined"));
}
