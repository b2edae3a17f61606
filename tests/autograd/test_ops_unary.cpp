// Unary ops (autograd/ops_unary.cpp): forward values against float64 references and
// finite-difference gradients on non-contiguous inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/caching_allocator.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::loose_tol;
using TL = std::vector<Tensor>;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input range (inside the op's domain, away from kinks)
};

std::vector<UnaryCase> cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -2, 2},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 3},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -3, 3},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -2, 2},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3},
  };
}

}  // namespace

TEST_CASE("unary ops: forward values (f32 and f64, non-contiguous)", "[cpu][autograd]") {
  for (const UnaryCase& c : cases()) {
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(c.name << " " << dtype_name(dt));
      Tensor x = random_tensor({5, 7}, dt, 100, c.lo, c.hi, Layout::Transposed);
      std::vector<double> ref;
      for (double v : to_f64(x)) ref.push_back(c.ref(v));
      check_close(c.op(x), ref, 4 * loose_tol(dt), 4 * loose_tol(dt));
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
