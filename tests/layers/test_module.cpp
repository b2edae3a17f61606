// Module: registration order and names, train/eval propagation, state_dict round trip,
// load_state_dict errors (and that a failed load modifies nothing), to() keeping parameter leaves.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/layers/module.h>
#include "support/reference.h"

using namespace ember;
using ember::layers::Module;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

// leaf: parameters a (2, 3), b (3); buffer stat (3). forward: x (N, 3) -> x * b + stat + sum(a).
class Leaf : public Module {
 public:
  explicit Leaf(uint64_t seed) {
    a_ = register_parameter("a", random_tensor({2, 3}, DType::f32, seed));
    b_ = register_parameter("b", random_tensor({3}, DType::f32, seed + 1));
    stat_ = register_buffer("stat", random_tensor({3}, DType::f32, seed + 2));
  }
  Tensor forward(const Tensor& x) override { return x * b_ + stat_ + sum(a_); }
  std::string name() const override { return "Leaf"; }
  std::string extra_repr() const override { return "3"; }
  Tensor a_, b_, stat_;
};

// Tree: parameter w (3), child "first" (Leaf), child "inner" holding child "deep" (Leaf),
// parameter after the children "z" (1).
class Inner : public Module {
 public:
  Inner() { deep = register_module("deep", std::make_shared<Leaf>(20)); }
  Tensor forward(const Tensor& x) override { return deep->forward(x); }
  std::string name() const override { return "Inner"; }
  std::shared_ptr<Leaf> deep;
};

class Tree : public Module {
 public:
  Tree() {
    w_ = register_parameter("w", random_tensor({3}, DType::f32, 1));
    first = register_module("first", std::make_shared<Leaf>(10));
    inner = register_module("inner", std::make_shared<Inner>());
    z_ = register_parameter("z", random_tensor({1}, DType::f32, 2));
  }
  Tensor forward(const Tensor& x) override { return inner->forward(first->forward(x * w_)) * z_; }
  std::string name() const override { return "Tree"; }
  std::shared_ptr<Leaf> first;
  std::shared_ptr<Inner> inner;
  Tensor w_, z_;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& p : v) out.push_back(p.first);
  return out;
}

}  // namespace

TEST_CASE("Module: parameters, buffers and children in registration order, depth first", "[cpu][layers]") {
  Tree t;
  // Own parameters first (in registration order), then each child's, depth first.
  CHECK(names_of(t.named_parameters()) ==
        std::vector<std::string>{"w", "z", "first.a", "first.b", "inner.deep.a", "inner.deep.b"});
  CHECK(names_of(t.named_buffers()) == std::vector<std::string>{"first.stat", "inner.deep.stat"});
  auto children = t.named_children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].first == "first");
  CHECK(children[1].first == "inner");
  CHECK(children[0].second.get() == t.first.get());
  const auto params = t.parameters();
  const auto named = t.named_parameters();
  REQUIRE(params.size() == named.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].is_same(named[i].second));
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
  }
  // The registered tensor is the layer's handle (same TensorImpl).
  CHECK(params[2].is_same(t.first->a_));
  for (auto& [n, b] : t.named_buffers()) CHECK_FALSE(b.requires_grad());
}

TEST_CASE("Module: a shared child or parameter is listed once by parameters(), under every name by state_dict",
          "[cpu][layers]") {
  class Tied : public Module {
   public:
    Tied() {
      shared = std::make_shared<Leaf>(3);
      register_module("enc", shared);
      register_module("dec", shared);
    }
    Tensor forward(const Tensor& x) override { return x; }
    std::string name() const override { return "Tied"; }
    std::shared_ptr<Leaf> shared;
  };
  Tied t;
  CHECK(names_of(t.named_parameters()) == std::vector<std::string>{"enc.a", "enc.b"});
  CHECK(t.parameters().size() == 2);
  StateDict sd = t.state_dict();
  CHECK(sd.size() == 6);
  CHECK(sd.count("dec.a") == 1);
  t.load_state_dict(sd);  // its own state: a no-op, no error
}

TEST_CASE("Module: duplicate and dotted names are rejected", "[cpu][layers]") {
  class Bad : public Module {
   public:
    explicit Bad(int mode) {
      register_parameter("p", zeros({2}));
      if (mode == 0) register_parameter("p", zeros({2}));
      if (mode == 1) register_buffer("p", zeros({2}));
      if (mode == 2) register_module("p", std::make_shared<Leaf>(1));
      if (mode == 3) register_parameter("a.b", zeros({2}));
      if (mode == 4) register_parameter("i", zeros({2}, {.dtype = DType::i64}));
    }
    Tensor forward(const Tensor& x) override { return x; }
    std::string name() const override { return "Bad"; }
  };
  for (int mode = 0; mode < 3; ++mode) CHECK_THROWS_WITH(Bad(mode), Catch::Contains("'p' is already registered"));
  CHECK_THROWS_WITH(Bad(3), Catch::Contains("must not contain '.'"));
  CHECK_THROWS_WITH(Bad(4), Catch::Contains("must be floating"));
}

TEST_CASE("Module: train/eval propagate to every descendant", "[cpu][layers]") {
  Tree t;
  CHECK(t.is_training());
  CHECK(t.inner->deep->is_training());
  t.eval();
  CHECK_FALSE(t.is_training());
  CHECK_FALSE(t.first->is_training());
  CHECK_FALSE(t.inner->is_training());
  CHECK_FALSE(t.inner->deep->is_training());
  t.inner->train();
  CHECK(t.inner->deep->is_training());
  CHECK_FALSE(t.first->is_training());
  t.train();
  CHECK(t.first->is_training());
}

TEST_CASE("Module: zero_grad clears every parameter's gradient", "[cpu][layers]") {
  Tree t;
  Tensor x = random_tensor({4, 3}, DType::f32, 5);
  sum(t.forward(x)).backward();
  for (auto& p : t.parameters()) REQUIRE(p.grad().defined());
  t.zero_grad();
  for (auto& p : t.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Module: state_dict round trip into a differently initialised module", "[cpu][layers]") {
  Tree src, dst;
  // Make dst differ everywhere.
  {
    NoGradGuard no_grad;
    for (auto& p : dst.parameters()) p.fill_(7.0);
    for (auto& [n, b] : dst.named_buffers()) b.fill_(-3.0);
  }
  StateDict sd = src.state_dict();
  CHECK(sd.size() == 8);  // 6 parameters + 2 buffers
  for (auto& [k, v] : sd) {
    CHECK_FALSE(v.requires_grad());  // detached views...
    INFO(k);
  }
  // ...sharing storage with the parameters: saving copies nothing.
  CHECK(sd.at("first.a").data_ptr() == src.first->a_.data_ptr());
  dst.load_state_dict(sd);
  for (auto& [k, v] : src.state_dict()) {
    INFO(k);
    CHECK(to_f64(dst.state_dict().at(k)) == to_f64(v));
  }
  // Loading copies values into dst's own tensors (no aliasing with src) and keeps them leaves.
  CHECK(dst.first->a_.data_ptr() != src.first->a_.data_ptr());
  CHECK(dst.first->a_.requires_grad());
  CHECK(dst.first->a_.is_leaf());
  // Forward outputs agree.
  Tensor x = random_tensor({4, 3}, DType::f32, 9);
  CHECK(to_f64(src.forward(x)) == to_f64(dst.forward(x)));
  // Any dtype is converted on load.
  StateDict sd64;
  for (auto& [k, v] : sd) sd64.emplace(k, v.to(DType::f64) * 2.0);
  dst.load_state_dict(sd64);
  CHECK(dst.w_.dtype() == DType::f32);
  auto want = to_f64(src.w_);
  for (auto& v : want) v = static_cast<double>(static_cast<float>(v * 2.0));
  CHECK(to_f64(dst.w_) == want);
}

TEST_CASE("Module: load_state_dict names missing, unexpected and mis-shaped keys and loads nothing", "[cpu][layers]") {
  Tree src, dst;
  {
    NoGradGuard no_grad;
    dst.w_.fill_(0.5);
  }
  const std::vector<double> before = to_f64(dst.w_);
  {
    StateDict sd = src.state_dict();
    sd.erase("inner.deep.b");
    CHECK_THROWS_WITH(dst.load_state_dict(sd), Catch::Contains("missing key 'inner.deep.b'") && Catch::Contains("[3]"));
  }
  {
    StateDict sd = src.state_dict();
    sd.emplace("first.extra", zeros({5}));
    CHECK_THROWS_WITH(dst.load_state_dict(sd), Catch::Contains("unexpected key 'first.extra'"));
  }
  {
    StateDict sd = src.state_dict();
    sd["first.a"] = zeros({3, 2});
    CHECK_THROWS_WITH(dst.load_state_dict(sd),
                      Catch::Contains("'first.a'") && Catch::Contains("[3, 2]") && Catch::Contains("[2, 3]"));
  }
  // Every error above left dst untouched, including the entries that did match.
  CHECK(to_f64(dst.w_) == before);
  CHECK(to_f64(dst.w_) != to_f64(src.w_));
}

TEST_CASE("Module: to(Device) and to(DType) keep parameters leaves requiring grad and keep handles", "[cpu][layers]") {
  Tree t;
  Tensor handle = t.first->a_;  // a layer's copy of the handle
  const std::vector<double> vals = to_f64(handle);
  t.to(Device::cpu());
  CHECK(handle.is_same(t.parameters()[2]));
  t.to(DType::f64);
  for (auto& [n, p] : t.named_parameters()) {
    INFO(n);
    CHECK(p.dtype() == DType::f64);
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
  // The earlier handle names the converted tensor (in-place rebinding), values preserved.
  CHECK(handle.dtype() == DType::f64);
  CHECK(to_f64(handle) == vals);
  // Gradients flow to the converted parameters.
  Tensor x = random_tensor({2, 3}, DType::f64, 3);
  sum(t.forward(x)).backward();
  CHECK(t.first->b_.grad().defined());
  CHECK(t.first->b_.grad().dtype() == DType::f64);
  // An existing gradient follows the conversion.
  t.to(DType::f32);
  REQUIRE(t.first->b_.grad().defined());
  CHECK(t.first->b_.grad().dtype() == DType::f32);
  if (cuda_device_count() > 0) {
    t.to(Device::cuda(0));
    for (auto& p : t.parameters()) {
      CHECK(p.device() == Device::cuda(0));
      CHECK(p.is_leaf());
      CHECK(p.requires_grad());
    }
    CHECK(handle.device() == Device::cuda(0));
  }
}

TEST_CASE("Module: str prints the tree", "[cpu][layers]") {
  Tree t;
  const std::string s = t.str();
  CHECK(s == "Tree(\n  (first): Leaf(3)\n  (inner): Inner(\n    (deep): Leaf(3)\n  )\n)");
}
