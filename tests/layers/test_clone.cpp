// Module::clone (and clone_structure on every built-in layer and model): same names, shapes and
// values in storage of its own, same outputs, the default generator untouched, changes to the
// clone not reaching the original; training modes copied per module; Dropout clones with
// generators of their own; the error for a module without clone_structure; and
// bind_parameters_for_replica routing gradients through the values it binds.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/activation.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/pool.h>
#include <ember/layers/sequential.h>
#include <ember/models/mnist_cnn.h>
#include <ember/models/resnet.h>
#include <ember/models/wide_resnet.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::Module;
using ember::layers::ModulePtr;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// Same names, shapes, dtypes and values; storage of its own.
void check_copied(const Named& orig, const Named& copy) {
  REQUIRE(orig.size() == copy.size());
  for (size_t i = 0; i < orig.size(); ++i) {
    INFO(orig[i].first);
    CHECK(copy[i].first == orig[i].first);
    const Tensor& a = orig[i].second;
    const Tensor& b = copy[i].second;
    REQUIRE(b.sizes() == a.sizes());
    CHECK(b.dtype() == a.dtype());
    CHECK(b.device() == a.device());
    CHECK(to_f64(b) == to_f64(a));
    CHECK(b.data_ptr() != a.data_ptr());
    CHECK_FALSE(b.is_same(a));
  }
}

// Clones m and checks the copy; then runs both in eval mode on x and compares the outputs.
ModulePtr check_clone(const ModulePtr& m, const Tensor& x) {
  const RngState before = default_generator().state();
  ModulePtr c = m->clone();
  CHECK(default_generator().state() == before);
  CHECK(c->name() == m->name());
  CHECK(c->str() == m->str());
  check_copied(m->named_parameters(), c->named_parameters());
  check_copied(m->named_buffers(), c->named_buffers());
  for (const Tensor& p : c->parameters()) {
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    CHECK_FALSE(p.grad().defined());
  }
  m->eval();
  c->eval();
  NoGradGuard no_grad;
  CHECK(to_f64(c->forward(x)) == to_f64(m->forward(x)));
  CHECK(default_generator().state() == before);
  return c;
}

// A user module that does not implement clone_structure().
class Custom : public Module {
 public:
  Custom() { w_ = register_parameter("w", ones({2})); }
  Tensor forward(const Tensor& x) override { return x * w_; }
  std::string name() const override { return "MyCustomNet"; }

 private:
  Tensor w_;
};

}  // namespace

TEST_CASE("clone: mnist_cnn copies parameters and computes the same", "[cpu][layers][clone]") {
  manual_seed(11);
  ModulePtr m = models::mnist_cnn();
  check_clone(m, random_tensor({2, 1, 28, 28}, DType::f32, 3));
}

TEST_CASE("clone: resnet18 copies parameters, buffers and child names", "[cpu][layers][clone]") {
  manual_seed(12);
  ModulePtr m = models::resnet18(10);
  // Non-default running statistics: one training-mode forward.
  m->forward(random_tensor({2, 3, 8, 8}, DType::f32, 4));
  ModulePtr c = check_clone(m, random_tensor({2, 3, 8, 8}, DType::f32, 5));
  CHECK(c->named_parameters().front().first == "conv1.weight");
  CHECK(c->named_buffers().back().first == "layer4.1.bn2.num_batches_tracked");
  CHECK(c->named_buffers().back().second.item<int64_t>() == 1);
}

TEST_CASE("clone: a small wide_resnet with dropout", "[cpu][layers][clone]") {
  manual_seed(13);
  ModulePtr m = models::wide_resnet(10, 1, 10, 0.3);
  m->forward(random_tensor({2, 3, 8, 8}, DType::f32, 6));
  check_clone(m, random_tensor({3, 3, 8, 8}, DType::f32, 7));
}

TEST_CASE("clone: a Sequential with BatchNorm, modes and independence", "[cpu][layers][clone]") {
  using namespace layers;
  Generator gen(5);
  auto bn = std::make_shared<BatchNorm2d>(4);
  auto seq = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(2, 4, 3, Conv2dOptions{.padding = 1}, gen), bn, std::make_shared<ReLU>(),
      std::make_shared<AvgPool2d>(2), std::make_shared<AdaptiveAvgPool2d>(1), std::make_shared<Flatten>(),
      std::make_shared<Linear>(4, 3, true, gen)});
  seq->forward(random_tensor({3, 2, 6, 6}, DType::f32, 8));  // moves the running statistics
  seq->train();
  bn->eval();  // a frozen BatchNorm inside a training model
  const RngState before = default_generator().state();
  ModulePtr c = seq->clone();
  CHECK(default_generator().state() == before);
  check_copied(seq->named_parameters(), c->named_parameters());
  check_copied(seq->named_buffers(), c->named_buffers());

  SECTION("training modes are copied module by module") {
    CHECK(c->is_training());
    const auto children = c->named_children();
    CHECK_FALSE(children[1].second->is_training());
    CHECK(children[0].second->is_training());
  }
  SECTION("changing the clone leaves the original alone") {
    const std::vector<double> w = to_f64(seq->parameters()[0]);
    const std::vector<double> rm = to_f64(bn->running_mean());
    NoGradGuard no_grad;
    for (Tensor p : c->parameters()) p.fill_(7.0);
    for (auto& [n, b] : c->named_buffers()) b.fill_(3.0);
    CHECK(to_f64(seq->parameters()[0]) == w);
    CHECK(to_f64(bn->running_mean()) == rm);
  }
  SECTION("gradients of the clone stay on the clone") {
    sum(c->forward(random_tensor({2, 2, 6, 6}, DType::f32, 9))).backward();
    for (const Tensor& p : c->parameters()) CHECK(p.grad().defined());
    for (const Tensor& p : seq->parameters()) CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE("clone: requires_grad is kept per parameter", "[cpu][layers][clone]") {
  Generator gen(3);
  auto lin = std::make_shared<layers::Linear>(3, 2, true, gen);
  lin->bias().requires_grad_(false);
  ModulePtr c = lin->clone();
  CHECK(c->parameters()[0].requires_grad());
  CHECK_FALSE(c->parameters()[1].requires_grad());
}

TEST_CASE("clone: a cloned Dropout owns a generator of its own", "[cpu][layers][clone]") {
  manual_seed(21);
  auto d = std::make_shared<layers::Dropout>(0.5);
  const RngState before = default_generator().state();
  ModulePtr c1 = d->clone();
  ModulePtr c2 = d->clone();
  const Tensor x = ones({64});
  const std::vector<double> m1 = to_f64(c1->forward(x));
  const std::vector<double> m2 = to_f64(c2->forward(x));
  CHECK(m1 != m2);  // distinct seeds
  CHECK(default_generator().state() == before);  // neither cloning nor the clones' masks drew from it
  // A clone's masks are reproducible: the same original state and clone count give the same seed.
  manual_seed(21);
  auto e = std::make_shared<layers::Dropout>(0.5);
  CHECK(to_f64(e->clone()->forward(x)) == m1);
}

TEST_CASE("clone: a module without clone_structure is an error naming it", "[cpu][layers][clone]") {
  auto m = std::make_shared<Custom>();
  const std::string msg = ember::testing::error_of([&] { m->clone(); });
  CHECK_THAT(msg,
             Catch::Contains("MyCustomNet: clone_structure() is not implemented") && Catch::Contains("DataParallel"));
  auto seq = std::make_shared<layers::Sequential>(std::initializer_list<ModulePtr>{m});
  CHECK_THAT(ember::testing::error_of([&] { seq->clone(); }), Catch::Contains("MyCustomNet"));
}

TEST_CASE("bind_parameters_for_replica: the bound values take part in the graph", "[cpu][layers][clone]") {
  Generator gen(4);
  auto lin = std::make_shared<layers::Linear>(3, 2, true, gen);
  ModulePtr replica = lin->clone();
  // Bind the replica to 2 * (the original's parameters): gradients reach the original, times 2.
  std::vector<Tensor> values;
  for (const Tensor& p : lin->parameters()) values.push_back(p * 2.0);
  replica->bind_parameters_for_replica(values);
  const Tensor x = random_tensor({4, 3}, DType::f32, 2);
  sum(replica->forward(x)).backward();
  const Tensor gw = lin->weight().grad(), gb = lin->bias().grad();
  REQUIRE(gw.defined());
  REQUIRE(gb.defined());
  // d sum(x W'^T + b') / dW = 2 * column sums of x per output row; / db = 2 * N.
  const std::vector<double> xs = to_f64(x);
  for (int64_t o = 0; o < 2; ++o) {
    for (int64_t i = 0; i < 3; ++i) {
      double s = 0;
      for (int64_t n = 0; n < 4; ++n) s += xs[static_cast<size_t>(n * 3 + i)];
      CHECK(to_f64(gw)[static_cast<size_t>(o * 3 + i)] == Approx(2 * s).epsilon(1e-6));
    }
    CHECK(to_f64(gb)[static_cast<size_t>(o)] == Approx(8.0));
  }
  for (const Tensor& p : replica->parameters()) CHECK_FALSE(p.grad().defined());
  // A shape mismatch names the parameter and both shapes.
  const std::string msg = ember::testing::error_of([&] {
    replica->bind_parameters_for_replica({ones({2, 2}), ones({2})});
  });
  CHECK_THAT(msg, Catch::Contains("weight") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 2]"));
}
