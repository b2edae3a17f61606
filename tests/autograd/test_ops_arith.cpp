// Arithmetic ops (autograd/ops_arith.cpp): forward values against float64 references (operand
// order, broadcasting, scalars on either side), dtype handling, and finite-difference gradients
// including broadcast and non-contiguous operands.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::Layout;
using ember::testing::loose_tol;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using TL = std::vector<Tensor>;

namespace {

// Broadcast reference: a (3, 1, 5) with b (4, 5) -> (3, 4, 5).
std::vector<double> bcast_ref(const std::vector<double>& a, const std::vector<double>& b,
                              const std::function<double(double, double)>& f) {
  std::vector<double> out;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) out.push_back(f(a[i * 5 + k], b[j * 5 + k]));
  return out;
}

std::vector<double> map(const std::vector<double>& a, const std::function<double(double)>& f) {
  std::vector<double> out(a.size());
  std::transform(a.begin(), a.end(), out.begin(), f);
  return out;
}

}  // namespace

TEST_CASE("binary ops broadcast and keep operand order (f32, non-contiguous)", "[cpu][autograd]") {
  Tensor a = random_tensor({3, 1, 5}, DType::f32, 1, -2, 2, Layout::Strided);
  Tensor b = random_tensor({4, 5}, DType::f32, 2, 0.5, 2, Layout::Transposed);
  const auto va = to_f64(a), vb = to_f64(b);
  const double rt = loose_tol(DType::f32);
  check_close(a + b, bcast_ref(va, vb, [](double x, double y) { return x + y; }), rt, 1e-6);
  check_close(a - b, bcast_ref(va, vb, [](double x, double y) { return x - y; }), rt, 1e-6);
  check_close(b - a, bcast_ref(va, vb, [](double x, double y) { return y - x; }), rt, 1e-6);
  check_close(a * b, bcast_ref(va, vb, [](double x, double y) { return x * y; }), rt);
  check_close(a / b, bcast_ref(va, vb, [](double x, double y) { return x / y; }), rt);
  check_close(maximum(a, b), bcast_ref(va, vb, [](double x, double y) { return std::max(x, y); }), 0.0);
  check_close(minimum(a, b), bcast_ref(va, vb, [](double x, double y) { return std::min(x, y); }), 0.0);
  CHECK((a + b).sizes() == Shape{3, 4, 5});
}

TEST_CASE("scalar ops on either side", "[cpu][autograd]") {
  Tensor a = random_tensor({2, 7}, DType::f64, 3, 0.5, 2, Layout::Transposed);
  const auto va = to_f64(a);
  const double rt = loose_tol(DType::f64);
  check_close(a + 1.5, map(va, [](double x) { return x + 1.5; }), rt);
  check_close(1.5 + a, map(va, [](double x) { return x + 1.5; }), rt);
  check_close(a - 1.5, map(va, [](double x) { return x - 1.5; }), rt);
  check_close(1.5 - a, map(va, [](double x) { return 1.5 - x; }), rt);
  check_close(a * -3.0, map(va, [](double x) { return x * -3.0; }), rt);
  check_close(-3.0 * a, map(va, [](double x) { return x * -3.0; }), rt);
  check_close(a / 4.0, map(va, [](double x) { return x / 4.0; }), rt);
  check_close(4.0 / a, map(va, [](double x) { return 4.0 / x; }), rt);
  check_close(-a, map(va, [](double x) { return -x; }), 0.0);
}

TEST_CASE("comparisons give boolean tensors and no gradient", "[cpu][autograd]") {
  Tensor a = from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::f32});
  Tensor b = from_vector({4, 2, 1, 4}, {4}, {.dtype = DType::f32});
  a.requires_grad_();
  CHECK((a < b).dtype() == DType::boolean);
  CHECK(!(a < b).requires_grad());
  check_close(a < b, {1, 0, 0, 0}, 0.0);
  check_close(a <= b, {1, 1, 0, 1}, 0.0);
  check_close(a > b, {0, 0, 1, 0}, 0.0);
  check_close(a >= b, {0, 1, 1, 1}, 0.0);
  check_close(a == b, {0, 1, 0, 1}, 0.0);
  check_close(a != b, {1, 0, 1, 0}, 0.0);
  check_close(a < 2.5, {1, 1, 0, 0}, 0.0);
  check_close(2.5 < a, {0, 0, 1, 1}, 0.0);
  check_close(a >= 3.0, {0, 0, 1, 1}, 0.0);
  check_close(3.0 >= a, {1, 1, 1, 0}, 0.0);
  check_close(a == 2.0, {0, 1, 0, 0}, 0.0);
  check_close(2.0 != a, {1, 0, 1, 1}, 0.0);
  check_close(eq(a, b), {0, 1, 0, 1}, 0.0);
  check_close(ne(a, 1.0), {0, 1, 1, 1}, 0.0);
}

TEST_CASE("where selects with broadcasting", "[cpu][autograd]") {
  Tensor cond = from_vector({1, 0, 1}, {3}, {.dtype = DType::boolean});
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f32});
  Tensor b = from_vector({-1}, {1}, {.dtype = DType::f32});
  check_close(where(cond, a, b), {1, -1, 3, 4, -1, 6}, 0.0);
}

TEST_CASE("mixed-dtype operands get gradients in their own dtype", "[cpu][autograd]") {
  Tensor a = from_vector({1.0, 2.0}, {2}, {.dtype = DType::f32});
  Tensor b = from_vector({3.0, 4.0}, {2}, {.dtype = DType::f64});
  a.requires_grad_();
  b.requires_grad_();
  Tensor y = a * b;
  CHECK(y.dtype() == DType::f64);
  sum(y).backward();
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f64);
  check_close(a.grad(), {3.0, 4.0}, 0.0);
  check_close(b.grad(), {1.0, 2.0}, 0.0);
}

TEST_CASE("gradcheck: binary ops with broadcasting and non-contiguous operands", "[cpu][autograd]") {
  const Tensor a = random_tensor({3, 1, 5}, DType::f64, 21, -1, 1, Layout::Strided);
  const Tensor b = random_tensor({4, 5}, DType::f64, 22, -1, 1, Layout::Transposed);
  const Tensor bp = random_tensor({4, 5}, DType::f64, 23, 0.5, 2, Layout::Transposed);  // away from 0
  const Tensor s = random_tensor({}, DType::f64, 24, 0.5, 2);  // 0-d operand
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] + x[1]; }, {a, b});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] - x[1]; }, {a, b});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[1] - x[0]; }, {a, b});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] * x[1]; }, {a, b});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] / x[1]; }, {a, bp});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[1] / x[0]; }, {bp, a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] * x[1] - x[1] / x[2]; }, {a, b, s});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return maximum(x[0], x[1]); }, {a, b});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return minimum(x[0], x[1]); }, {a, b});
  // The same tensor on both sides.
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] * x[0] + x[0]; }, {b});
}

TEST_CASE("gradcheck: scalar ops", "[cpu][autograd]") {
  const Tensor a = random_tensor({3, 4}, DType::f64, 31, 0.5, 2, Layout::Transposed);
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] + 2.0; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return 2.0 + x[0]; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] - 2.0; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return 2.0 - x[0]; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] * -1.5; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return -1.5 * x[0]; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return x[0] / 3.0; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return 3.0 / x[0]; }, {a});
  EMBER_CHECK_GRADIENTS([](const TL& x) { return -x[0]; }, {a});
}

TEST_CASE("gradcheck: where (broadcast condition and operands)", "[cpu][autograd]") {
  const Tensor cond = from_vector({1, 0, 0, 1, 1}, {5}, {.dtype = DType::boolean});
  const Tensor a = random_tensor({4, 5}, DType::f64, 41, -1, 1, Layout::Transposed);
  const Tensor b = random_tensor({4, 1}, DType::f64, 42);
  EMBER_CHECK_GRADIENTS([cond](const TL& x) { return where(cond, x[0], x[1]); }, {a, b});
  // A gradient reaches only the chosen side.
  Tensor a2 = a.detach(), b2 = b.detach();
  a2.requires_grad_();
  b2.requires_grad_();
  sum(where(cond, a2, b2)).backward();
  check_close(a2.grad(), {1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1}, 0.0);
  check_close(b2.grad(), {2, 2, 2, 2}, 0.0);
}

TEST_CASE("maximum and minimum split the gradient evenly on ties", "[cpu][autograd]") {
  Tensor a = from_vector({1.0, 2.0, 3.0}, {3}, {.dtype = DType::f64});
  Tensor b = from_vector({2.0, 2.0, 1.0}, {3}, {.dtype = DType::f64});
  a.requires_grad_();
  b.requires_grad_();
  sum(maximum(a, b)).backward();
  check_close(a.grad(), {0.0, 0.5, 1.0}, 0.0);
  check_close(b.grad(), {1.0, 0.5, 0.0}, 0.0);
}
