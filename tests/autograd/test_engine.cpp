// The backward engine: accumulation, graph shapes, retain_graph, errors, grad mode, detach, and the
// grad-accumulated hooks DDP relies on (order and timing).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <ember/autograd/engine.h>
#include <ember/autograd/function.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/node.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::error_of;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

Tensor leaf(const std::vector<double>& v, const Shape& s, DType dt = DType::f64) {
  Tensor t = from_vector(v, s, {.dtype = dt});
  t.requires_grad_();
  return t;
}

}  // namespace

TEST_CASE("backward of a scalar fills leaf gradients", "[cpu][autograd]") {
  Tensor x = leaf({1.5, -2.0, 3.0}, {3});
  Tensor y = sum(x * x);  // dy/dx = 2x
  CHECK(!y.is_leaf());
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().sizes() == Shape{3});
  check_close(x.grad(), {3.0, -4.0, 6.0}, 1e-12);
}

TEST_CASE("gradients accumulate across backward calls into the same buffer", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  sum(x * 3.0).backward();
  Tensor g1 = x.grad();
  check_close(g1, {3.0, 3.0}, 1e-12);
  sum(x * x).backward();  // += 2x
  check_close(x.grad(), {5.0, 7.0}, 1e-12);
  // += is in place: a handle taken earlier (e.g. a DDP bucket view) sees the sum.
  CHECK(x.grad().storage().is_same(g1.storage()));
  check_close(g1, {5.0, 7.0}, 1e-12);
}

TEST_CASE("first accumulation copies and never aliases the incoming gradient", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0, 3.0}, {3});
  Tensor g = from_vector({0.5, -1.0, 2.0}, {3}, {.dtype = DType::f64});
  x.backward(g);  // x is its own root: the engine hands g straight to the accumulator
  REQUIRE(x.grad().defined());
  CHECK(!x.grad().storage().is_same(g.storage()));
  check_close(x.grad(), {0.5, -1.0, 2.0}, 0.0);
  // Broadcast gradients (stride 0) are materialized into a fresh contiguous buffer.
  Tensor b = leaf({2.0, 4.0}, {2, 1});
  sum(b.expand({2, 3})).backward();
  CHECK(b.grad().is_contiguous());
  check_close(b.grad(), {3.0, 3.0}, 0.0);
}

TEST_CASE("diamond graph sums the gradients of both paths", "[cpu][autograd]") {
  // x -> a = 2x, b = x^2, y = a * b + a => dy/dx = d(2x^3 + 2x)/dx = 6x^2 + 2
  Tensor x = leaf({0.5, -1.5, 2.0}, {3});
  Tensor a = x * 2.0;
  Tensor b = x * x;
  Tensor y = sum(a * b + a);
  y.backward();
  check_close(x.grad(), {6 * 0.25 + 2, 6 * 2.25 + 2, 6 * 4.0 + 2}, 1e-12);
  // The same leaf used twice in one op (x + x): one accumulation of 2.
  Tensor z = leaf({1.0}, {1});
  sum(z + z).backward();
  check_close(z.grad(), {2.0}, 0.0);
}

TEST_CASE("retain_graph allows a second backward, otherwise it is a clear error", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_close(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)}, 1e-12);
  std::string msg = error_of([&] { y.backward(); });
  CHECK(msg.find("backward through a graph whose saved tensors were freed") != std::string::npos);
  CHECK(msg.find("retain_graph=true") != std::string::npos);
}

TEST_CASE("non-scalar backward requires a gradient of the same shape", "[cpu][autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x * 2.0;
  std::string msg = error_of([&] { y.backward(); });
  CHECK(msg.find("gradient is required") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  msg = error_of([&] { y.backward(ones({3, 2}, {.dtype = DType::f64})); });
  CHECK(msg.find("[3, 2]") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  // The right shape works and scales the gradient.
  y.backward(full({2, 3}, 0.5, {.dtype = DType::f64}));
  check_close(x.grad(), std::vector<double>(6, 1.0), 0.0);
  // A tensor without history cannot be backpropagated.
  Tensor plain = ones({1}, {.dtype = DType::f64});
  CHECK(error_of([&] { plain.backward(); }).find("does not require grad") != std::string::npos);
}

TEST_CASE("requires_grad_ only on floating tensors and only leaves may turn it off", "[cpu][autograd]") {
  Tensor i = arange(5);
  std::string msg = error_of([&] { i.requires_grad_(); });
  CHECK(msg.find("floating") != std::string::npos);
  CHECK(msg.find("i64") != std::string::npos);
  Tensor x = leaf({1.0}, {1});
  Tensor y = x * 2.0;
  CHECK(!error_of([&] { y.requires_grad_(false); }).empty());
  x.requires_grad_(false);
  CHECK(!x.requires_grad());
  CHECK(!(x * 2.0).requires_grad());
}

TEST_CASE("NoGradGuard stops recording and EnableGradGuard restores it", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  CHECK(GradMode::is_enabled());
  {
    NoGradGuard ng;
    CHECK(!GradMode::is_enabled());
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    {
      EnableGradGuard eg;
      CHECK(GradMode::is_enabled());
      CHECK((x * 2.0).requires_grad());
    }
    CHECK(!GradMode::is_enabled());
    // In-place updates of parameters are allowed without grad mode (optimizer steps).
    x.fill_(3.0);
  }
  CHECK(GradMode::is_enabled());
  check_close(x, {3.0, 3.0}, 0.0);
  // ...and refused with grad mode on, naming the shape.
  std::string msg = error_of([&] { x.zero_(); });
  CHECK(msg.find("leaf") != std::string::npos);
  CHECK(msg.find("[2]") != std::string::npos);
  CHECK(!error_of([&] { x.copy_(ones({2}, {.dtype = DType::f64})); }).empty());
}

TEST_CASE("grad mode is thread-local", "[cpu][autograd]") {
  NoGradGuard ng;
  bool other = false;
  std::thread t([&] { other = GradMode::is_enabled(); });
  t.join();
  CHECK(other);
  CHECK(!GradMode::is_enabled());
}

TEST_CASE("detach shares storage and cuts the graph", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0, 3.0}, {3});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK(!d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage().is_same(y.storage()));
  // Only the non-detached path contributes.
  Tensor loss = sum(y * d);  // d/dx = d * 2 = 4x
  loss.backward();
  check_close(x.grad(), {4.0, 8.0, 12.0}, 1e-12);
}

TEST_CASE("set_grad replaces or clears the gradient and checks its shape", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  x.set_grad(full({2}, 5.0, {.dtype = DType::f64}));
  sum(x).backward();
  check_close(x.grad(), {6.0, 6.0}, 0.0);
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
  CHECK(error_of([&] { x.set_grad(ones({3}, {.dtype = DType::f64})); }).find("[3]") != std::string::npos);
}

TEST_CASE("integer paths are cut: comparisons, argmax and casts to integers carry no gradient", "[cpu][autograd]") {
  Tensor x = leaf({0.5, -1.0, 2.0}, {3});
  CHECK(!(x > 0.0).requires_grad());
  CHECK((x > 0.0).dtype() == DType::boolean);
  CHECK(!argmax(x, 0).requires_grad());
  CHECK(!x.to(DType::i64).requires_grad());
  CHECK(x.to(DType::f32).requires_grad());
}

TEST_CASE("hooks fire once per backward pass with the final gradient, before backward returns", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  std::vector<std::vector<double>> seen;
  int64_t h = x.register_grad_accumulated_hook([&](const Tensor& l) {
    CHECK(l.is_same(x));
    seen.push_back(to_f64(l.grad()));
  });
  // x feeds three paths; the hook must see the sum of all three, once.
  Tensor y = sum(x * 2.0) + sum(x * x) + sum(exp(x));
  y.backward();
  REQUIRE(seen.size() == 1);
  check_close(x.grad(), {2 + 2 * 1.0 + std::exp(1.0), 2 + 2 * 2.0 + std::exp(2.0)}, 1e-12);
  CHECK(seen[0] == to_f64(x.grad()));
  // Second pass: fires again, with the accumulated value.
  sum(x).backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == to_f64(x.grad()));
  x.remove_grad_accumulated_hook(h);
  sum(x).backward();
  CHECK(seen.size() == 2);
  CHECK(!error_of([&] { x.remove_grad_accumulated_hook(h); }).empty());
  // Only leaves requiring grad take hooks.
  Tensor nl = x * 2.0;
  CHECK(error_of([&] { nl.register_grad_accumulated_hook([](const Tensor&) {}); }).find("leaf") != std::string::npos);
}

TEST_CASE("an early layer's hook fires after later layers' hooks, and before the rest of the pass ends",
          "[cpu][autograd]") {
  // A 3-layer MLP: x -> (w1, b1) -> tanh -> (w2, b2) -> tanh -> (w3, b3) -> loss.
  Tensor x = random_tensor({4, 5}, DType::f64, 1);
  Tensor w1 = random_tensor({5, 6}, DType::f64, 2), b1 = random_tensor({6}, DType::f64, 3);
  Tensor w2 = random_tensor({6, 7}, DType::f64, 4), b2 = random_tensor({7}, DType::f64, 5);
  Tensor w3 = random_tensor({7, 3}, DType::f64, 6), b3 = random_tensor({3}, DType::f64, 7);
  std::vector<Tensor> params{w1, b1, w2, b2, w3, b3};
  std::vector<std::string> names{"w1", "b1", "w2", "b2", "w3", "b3"};
  std::vector<std::string> order;
  // Counts nodes run so far, through a custom node placed at the very start of the graph (on x):
  // it runs last, so a hook that fires before it proves hooks fire during the pass, not at the end.
  bool input_node_ran = false;
  std::vector<bool> fired_before_input_node;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].requires_grad_();
    params[i].register_grad_accumulated_hook([&, i](const Tensor& p) {
      order.push_back(names[i]);
      fired_before_input_node.push_back(!input_node_ran);
      CHECK(p.grad().defined());
    });
  }
  Tensor xin = random_tensor({4, 5}, DType::f64, 8);
  xin.requires_grad_();
  Tensor x_tracked = x + xin;  // the input now has a grad path ending in xin's accumulator
  // A marker op on the input side: identity forward, records when its backward runs.
  Tensor marked = x_tracked.detach();
  autograd::record(
      marked, "Marker",
      [&](const Tensor& g) {
        input_node_ran = true;
        return autograd::TensorList{g};
      },
      x_tracked);
  Tensor h1 = tanh(matmul(marked, w1) + b1);
  Tensor h2 = tanh(matmul(h1, w2) + b2);
  Tensor loss = sum(matmul(h2, w3) + b3);
  loss.backward();
  REQUIRE(order.size() == 6);
  auto pos = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  CHECK(pos("w3") < pos("w2"));
  CHECK(pos("b3") < pos("w2"));
  CHECK(pos("w2") < pos("w1"));
  CHECK(pos("b2") < pos("w1"));
  CHECK(pos("b2") < pos("b1"));
  for (bool b : fired_before_input_node) CHECK(b);
  CHECK(input_node_ran);
  CHECK(xin.grad().defined());
}

TEST_CASE("a leaf in the graph whose gradient is cut still fires its hook", "[cpu][autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor w = leaf({3.0, 4.0}, {2});
  int fired = 0;
  w.register_grad_accumulated_hook([&](const Tensor&) { ++fired; });
  // where() routes no gradient to w (all-true condition): w's accumulator gets an undefined grad.
  Tensor cond = from_vector({1, 1}, {2}, {.dtype = DType::boolean});
  sum(where(cond, x, w)).backward();
  CHECK(fired == 1);
  check_close(x.grad(), {1.0, 1.0}, 0.0);
}

TEST_CASE("deep graphs are freed without recursion", "[cpu][autograd]") {
  Tensor x = leaf({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y + 0.0;
  y = Tensor();  // drops a chain of 200k nodes; would overflow the stack if freed recursively
  Tensor z = x;
  for (int i = 0; i < 20000; ++i) z = z * 1.0;
  z.backward();
  check_close(x.grad(), {1.0}, 0.0);
}

TEST_CASE("ops check devices and dtypes, naming both operands", "[cpu][autograd]") {
  Tensor a = ones({2, 3});
  Tensor b = ones({4, 3});
  std::string msg = error_of([&] { (void)(a + b); });
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4, 3]") != std::string::npos);
  msg = error_of([&] { (void)matmul(a, ones({2, 3})); });
  CHECK(msg.find("[2, 3]") != std::string::npos);
  msg = error_of([&] { (void)cross_entropy(ones({2, 3}), arange(3)); });
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[3]") != std::string::npos);
}

TEST_CASE("multi-output nodes receive one gradient per output", "[cpu][autograd]") {
  // A custom split of x (4) into halves, recorded with record_multi.
  Tensor x = leaf({1.0, 2.0, 3.0, 4.0}, {4});
  std::vector<Tensor> outs{x.detach().slice(0, 0, 2).contiguous(), x.detach().slice(0, 2, 4).contiguous()};
  autograd::record_multi(outs, "Split",
                         [](const autograd::TensorList& g) {
                           Tensor gx = zeros({4}, {.dtype = DType::f64});
                           if (g[0].defined()) gx.slice(0, 0, 2).copy_(g[0]);
                           if (g[1].defined()) gx.slice(0, 2, 4).copy_(g[1]);
                           return autograd::TensorList{gx};
                         },
                         {x});
  CHECK(outs[0].grad_fn() == outs[1].grad_fn());
  // Only the second output is used: the first slot arrives undefined.
  sum(outs[1] * 3.0).backward();
  check_close(x.grad(), {0.0, 0.0, 3.0, 3.0}, 0.0);
}

TEST_CASE("engine: end-of-backward callbacks", "[cpu][autograd]") {
  Tensor w = tensor({1.0f, 2.0f}).requires_grad_();
  std::vector<std::string> order;
  w.register_grad_accumulated_hook([&](const Tensor&) {
    order.push_back("hook");
    autograd::queue_callback([&] {
      order.push_back("first callback, grad " + std::to_string(w.grad().to_vector<float>()[1]));
      autograd::queue_callback([&] { order.push_back("queued by a callback"); });
    });
    autograd::queue_callback([&] { order.push_back("second callback"); });
  });
  sum(w * w).backward();
  CHECK(order ==
        std::vector<std::string>{"hook", "first callback, grad 4.000000", "second callback", "queued by a callback"});
  CHECK_FALSE(autograd::in_backward());
  CHECK_THAT(error_of([] { autograd::queue_callback([] {}); }), Catch::Contains("no backward pass is running"));
}
