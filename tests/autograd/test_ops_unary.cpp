// Unary ops (autograd/ops_unary.cpp): forward values against float64 references and
// finite-difference gradients on non-contiguous inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/caching_allocator.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_bounded;
using ember::testing::check_close;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::unit_roundoff;
using TL = std::vector<Tensor>;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input range (inside the op's domain, away from kinks)
  // First-order bound on |op(x) computed in a dtype of unit roundoff u - the exact op(x)|, for the
  // formula of kernels/elementwise_math.h (the kernel's, in the element type) and of `ref` (in
  // double). libm's exp, log, tanh, erf are taken within 2 ulp (glibc's x86_64 maxima are <= 2),
  // so 4 u |y| (one ulp is at most 2 u |y|); sqrt and + - * / round once (u).
  std::function<double(double, double)> err;
};

double none(double, double) { return 0.0; }  // neg, abs, relu: exact

std::vector<UnaryCase> cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -2, 2, none},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -2, 2, none},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -2, 2,
       [](double x, double u) { return 4 * u * std::exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2, 3,
       [](double x, double u) { return 4 * u * std::fabs(std::log(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 3,
       [](double x, double u) { return u * std::sqrt(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2, 2,
       [](double x, double u) { return 4 * u * std::fabs(std::tanh(x)); }},
      // 1 / (1 + e), e = exp(-x): e's 4 u reaches y scaled by e / (1 + e); the sum and the division u each.
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3,
       [](double x, double u) {
         const double e = std::exp(-x), y = 1 / (1 + e);
         return y * (4 * u * e / (1 + e) + 2 * u);
       }},
      // 0.5 x (1 + erf(t)), t = x / sqrt(2): t carries 2 u (the constant or sqrt(2), and the product
      // or division), which erf turns into erf'(t) |t| 2 u; erf's own 4 u |erf t|; 1 + erf u; the
      // product by 0.5 x u |y| (0.5 x is exact).
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3,
       [](double x, double u) {
         const double t = x / std::sqrt(2.0), e = std::erf(t), y = 0.5 * x * (1 + e);
         const double de = 2 * std::numbers::inv_sqrtpi * std::exp(-t * t) * std::fabs(t) * 2 * u;
         return 0.5 * std::fabs(x) * (de + 4 * u * std::fabs(e) + u * (1 + e)) + u * std::fabs(y);
       }},
  };
}

}  // namespace

TEST_CASE("unary ops: forward values (f32 and f64, non-contiguous)", "[cpu][autograd]") {
  for (const UnaryCase& c : cases()) {
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(c.name << " " << dtype_name(dt));
      Tensor x = random_tensor({5, 7}, dt, 100, c.lo, c.hi, Layout::Transposed);
      // The kernel's roundings (unit roundoff of dt: it computes f32 in float) plus the reference's
      // (double), per element.
      std::vector<double> ref, bound;
      for (double v : to_f64(x)) {
        ref.push_back(c.ref(v));
        bound.push_back(c.err(v, unit_roundoff(dt)) + c.err(v, unit_roundoff(DType::f64)));
      }
      check_bounded(c.op(x), ref, bound);
    }
  }
}

TEST_CASE("gradcheck: every unary op", "[cpu][autograd]") {
  for (const UnaryCase& c : cases()) {
    INFO(c.name);
    // Strided input, and a contiguous one reached through a broadcast op to exercise expanded grads.
    const Tensor x = random_tensor({4, 6}, DType::f64, 200, c.lo, c.hi, Layout::Strided);
    auto op = c.op;
    EMBER_CHECK_GRADIENTS([op](const TL& t) { return op(t[0]); }, {x});
    const Tensor row = random_tensor({6}, DType::f64, 201, c.lo, c.hi);
    EMBER_CHECK_GRADIENTS([op](const TL& t) { return op(t[0].expand({3, 6})); }, {row});
  }
}

TEST_CASE("relu and abs gradients at and around zero", "[cpu][autograd]") {
  Tensor x = from_vector({-1.0, 0.0, 2.0}, {3}, {.dtype = DType::f64});
  x.requires_grad_();
  sum(relu(x)).backward();
  check_close(x.grad(), {0.0, 0.0, 1.0}, 0.0);
  Tensor y = from_vector({-1.0, 0.0, 2.0}, {3}, {.dtype = DType::f64});
  y.requires_grad_();
  sum(abs(y)).backward();
  check_close(y.grad(), {-1.0, 0.0, 1.0}, 0.0);
}

TEST_CASE("autograd: relu keeps its output for the backward, not its input", "[cpu][autograd]") {
  // relu(x * 2): the product is relu's input; the scalar multiply saves nothing, so once relu keeps
  // only its output the product is freed when the forward returns (a batch norm's output before a
  // ReLU, in a CNN). The CPU tensors' caching allocator counts the bytes still handed out.
  auto& host = dynamic_cast<CachingAllocator&>(cpu_allocator());
  Tensor x = random_tensor({256, 256}, DType::f32, 61);
  x.requires_grad_();
  const size_t one = static_cast<size_t>(x.numel()) * sizeof(float);
  const size_t before = host.stats().allocated;
  Tensor y = relu(x * 2.0);
  const size_t live = host.stats().allocated - before;
  CHECK(live >= one);
  CHECK(live < one + one / 2);  // y alone, not y and the product
  sum(y).backward();
  const std::vector<double> xv = to_f64(x), gv = to_f64(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) REQUIRE(gv[i] == (xv[i] > 0 ? 2.0 : 0.0));
}
