// Reductions (autograd/ops_reduce.cpp): forward values against float64 references and
// finite-difference gradients over all dims, subsets of dims, with and without keepdim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::Layout;
using ember::testing::loose_tol_sum;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using TL = std::vector<Tensor>;

TEST_CASE("sum, mean, max, min, amax, amin, argmax: forward values", "[cpu][autograd]") {
  // x (3, 4, 5) transposed in memory; reference reductions over dim 1 and over dims {0, 2}.
  Tensor x = random_tensor({3, 4, 5}, DType::f32, 300, -1, 1, Layout::Transposed);
  const auto v = to_f64(x);
  auto at = [&](int i, int j, int k) { return v[(i * 4 + j) * 5 + k]; };
  std::vector<double> s1, m1, mx1, mn1, am1, s02, mx02;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double s = 0, mx = -1e30, mn = 1e30;
      int arg = 0;
      for (int j = 0; j < 4; ++j) {
        s += at(i, j, k);
        if (at(i, j, k) > mx) mx = at(i, j, k), arg = j;
        mn = std::min(mn, at(i, j, k));
      }
      s1.push_back(s), m1.push_back(s / 4), mx1.push_back(mx), mn1.push_back(mn), am1.push_back(arg);
    }
  for (int j = 0; j < 4; ++j) {
    double s = 0, mx = -1e30;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) s += at(i, j, k), mx = std::max(mx, at(i, j, k));
    s02.push_back(s), mx02.push_back(mx);
  }
  double total = 0;
  for (double e : v) total += e;
  const double rt = loose_tol_sum(DType::f32, 60);
  check_close(sum(x), {total}, rt, rt);
  check_close(mean(x), {total / 60}, rt, rt);
  check_close(sum(x, {1}), s1, rt, rt);
  CHECK(sum(x, {1}, true).sizes() == Shape{3, 1, 5});
  check_close(mean(x, {-2}), m1, rt, rt);
  check_close(sum(x, {0, 2}), s02, rt, rt);
  check_close(max(x, 1), mx1, 0.0);
  check_close(min(x, 1), mn1, 0.0);
  CHECK(max(x, 1, true).sizes() == Shape{3, 1, 5});
  check_close(argmax(x, 1), am1, 0.0);
  check_close(amax(x, {0, 2}), mx02, 0.0);
  check_close(amin(x), {*std::min_element(v.begin(), v.end())}, 0.0);
}

TEST_CASE("gradcheck: sum and mean over all dims, dim subsets, keepdim", "[cpu][autograd]") {
  const Tensor x = random_tensor({3, 4, 5}, DType::f64, 310, -1, 1, Layout::Transposed);
  EMBER_CHECK_GRADIENTS([](const TL& t) { return sum(t[0]); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return mean(t[0]); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return sum(t[0], {1}); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return sum(t[0], {0, 2}, true); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return mean(t[0], {-1}); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return mean(t[0], {2, 0}, true); }, {x});
  // A reduction output feeding a broadcast op (gradient arrives as an expanded view).
  EMBER_CHECK_GRADIENTS([](const TL& t) { return t[0] - mean(t[0], {1}, true); }, {x});
}

TEST_CASE("gradcheck: max/min along a dim and amax/amin over dims", "[cpu][autograd]") {
  const Tensor x = random_tensor({4, 6, 3}, DType::f64, 320, -1, 1, Layout::Strided);
  EMBER_CHECK_GRADIENTS([](const TL& t) { return max(t[0], 1); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return max(t[0], -1, true); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return min(t[0], 0); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return min(t[0], 2, true); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return amax(t[0], {0, 2}); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return amin(t[0], {1}, true); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return amax(t[0]); }, {x});
}

TEST_CASE("max along a dim sends the gradient to the first arg-max, amax shares it among ties", "[cpu][autograd]") {
  Tensor x = from_vector({1, 3, 3, 2, 5, 5}, {2, 3}, {.dtype = DType::f64});
  x.requires_grad_();
  sum(max(x, 1)).backward();
  check_close(x.grad(), {0, 1, 0, 0, 1, 0}, 0.0);
  Tensor y = from_vector({1, 3, 3, 2, 5, 5}, {2, 3}, {.dtype = DType::f64});
  y.requires_grad_();
  sum(amax(y, {1})).backward();
  check_close(y.grad(), {0, 0.5, 0.5, 0, 0.5, 0.5}, 0.0);
  Tensor z = from_vector({4, 1, 1, 4}, {4}, {.dtype = DType::f64});
  z.requires_grad_();
  sum(min(z, 0)).backward();
  check_close(z.grad(), {0, 1, 0, 0}, 0.0);
}
