// Pooling ops (autograd) and layers: float64 finite-difference gradchecks, output shapes, the
// layers against the functional ops and simple identities, printing, errors.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/kernels/factory.h>
#include <ember/layers/pool.h>
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::AdaptiveAvgPool2d;
using ember::layers::AvgPool2d;
using ember::layers::MaxPool2d;
using ember::testing::check_close;
using ember::testing::error_of;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;

TEST_CASE("max_pool2d gradcheck (float64), overlapping and padded windows", "[cpu][layers]") {
  // Random values are distinct far beyond eps, so the arg-max is stable under the perturbation.
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f64, 1, -1, 1, Layout::Transposed);
  const std::vector<Pool2dFuncOptions> opts = {
      {.kernel = 2},
      {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}},
      {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true},
      {.kernel = 3, .stride = 1},
  };
  for (const auto& o : opts) {
    INFO("kernel (" << o.kernel.h << ", " << o.kernel.w << ") stride (" << o.stride.h << ", " << o.stride.w << ")");
    EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); }, {x});
  }
}

TEST_CASE("avg_pool2d gradcheck (float64), count_include_pad both ways, ceil_mode", "[cpu][layers]") {
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f64, 2, -1, 1, Layout::Strided);
  const std::vector<Pool2dFuncOptions> opts = {
      {.kernel = 2},
      {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}},
      {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false},
      {.kernel = 2, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = true},
  };
  for (const auto& o : opts) {
    INFO("kernel (" << o.kernel.h << ", " << o.kernel.w << ") include_pad " << o.count_include_pad);
    EMBER_CHECK_GRADIENTS([&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); }, {x});
  }
}

TEST_CASE("adaptive_avg_pool2d gradcheck (float64), down and up", "[cpu][layers]") {
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f64, 3, -1, 1, Layout::Transposed);
  for (auto [oh, ow] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4}, {5, 2}, {10, 11}}) {
    INFO("out " << oh << "x" << ow);
    EMBER_CHECK_GRADIENTS(
        [&, oh = oh, ow = ow](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], oh, ow); }, {x});
  }
}

TEST_CASE("pooling layers: shapes, agreement with the functional ops, identities", "[cpu][layers]") {
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f32, 4);
  MaxPool2d mp(2);
  CHECK(mp.forward(x).sizes() == Shape{2, 3, 3, 4});
  CHECK(MaxPool2d(2, 2, 0, true).forward(x).sizes() == Shape{2, 3, 4, 5});
  CHECK(MaxPool2d({3, 2}, {2, 1}, {1, 0}).forward(x).sizes() == Shape{2, 3, 4, 8});
  CHECK(to_f64(mp.forward(x)) == to_f64(max_pool2d(x, 2)));
  CHECK(mp.named_parameters().empty());
  // The MNIST pool: (64, 64, 24, 24) -> (64, 64, 12, 12).
  CHECK(mp.forward(zeros({64, 64, 24, 24})).sizes() == Shape{64, 64, 12, 12});

  AvgPool2d ap(3, 2, 1);
  CHECK(ap.forward(x).sizes() == Shape{2, 3, 4, 5});
  CHECK(to_f64(ap.forward(x)) == to_f64(avg_pool2d(x, 3, 2, 1)));
  CHECK(AvgPool2d(3, 2, 1, true, false).forward(x).sizes() == Shape{2, 3, 4, 5});

  // Global average pooling is the mean over H and W.
  AdaptiveAvgPool2d gap(1);
  Tensor g = gap.forward(x);
  CHECK(g.sizes() == Shape{2, 3, 1, 1});
  check_close(g, to_f64(mean(x, {2, 3}, true)), ember::testing::loose_tol_sum(DType::f32, 63), 1e-6);
  // Output size equal to the input size is the identity.
  CHECK(to_f64(AdaptiveAvgPool2d({7, 9}).forward(x)) == to_f64(x));
  CHECK(AdaptiveAvgPool2d({3, 4}).forward(x).sizes() == Shape{2, 3, 3, 4});

  // Max pooling a tensor that requires grad: the gradient of sum() is 1 at each window's max.
  Tensor xr = random_tensor({1, 1, 4, 4}, DType::f32, 5).requires_grad_();
  sum(mp.forward(xr)).backward();
  const std::vector<double> gx = to_f64(xr.grad()), xv = to_f64(xr);
  double total = 0;
  for (double v : gx) total += v;
  CHECK(total == 4.0);
  for (int64_t bh = 0; bh < 2; ++bh)
    for (int64_t bw = 0; bw < 2; ++bw) {
      int64_t arg = -1;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t k = (2 * bh + i) * 4 + 2 * bw + j;
          if (arg < 0 || xv[k] > xv[arg]) arg = k;
        }
      CHECK(gx[arg] == 1.0);
    }
}

TEST_CASE("pooling layers: printing and errors", "[cpu][layers]") {
  using Catch::Matchers::Contains;
  CHECK(MaxPool2d(2).extra_repr() == "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False");
  CHECK(MaxPool2d({3, 2}, 1, {1, 0}, true).extra_repr() ==
        "kernel_size=(3, 2), stride=1, padding=(1, 0), dilation=1, ceil_mode=True");
  CHECK(AvgPool2d(3, 2, 1, false, false).extra_repr() == "kernel_size=3, stride=2, padding=1, count_include_pad=False");
  CHECK(AdaptiveAvgPool2d({1, 1}).extra_repr() == "output_size=1");
  CHECK(AdaptiveAvgPool2d({3, 4}).str() == "AdaptiveAvgPool2d(output_size=(3, 4))");
  CHECK_THAT(error_of([] { MaxPool2d(2, 2, 2); }), Contains("padding") && Contains("half"));
  CHECK_THAT(error_of([] { AvgPool2d(0); }), Contains("kernel_size"));
  CHECK_THAT(error_of([] { AdaptiveAvgPool2d({0, 2}); }), Contains("output_size"));
  CHECK_THAT(error_of([] { MaxPool2d(2).forward(zeros({3, 8, 8})); }), Contains("[3, 8, 8]"));
  CHECK_THAT(error_of([] {
               MaxPool2d(5).forward(zeros({1, 1, 4, 4}));
             }),
             Contains("[1, 1, 4, 4]") && Contains("too small"));
  CHECK_THAT(error_of([] { AdaptiveAvgPool2d(2).forward(zeros({1, 1, 0, 4})); }), Contains("[1, 1, 0, 4]"));
}
