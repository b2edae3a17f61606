// models::mnist_cnn: structure (names, shapes, parameter count), output shape, reproducible
// initialisation, eval-mode determinism, gradients reaching every parameter, and a few SGD steps
// lowering the loss on a fixed batch.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include <ember/models/mnist_cnn.h>
#include "support/reference.h"

using namespace ember;
using ember::testing::random_tensor;
using ember::testing::to_f64;

TEST_CASE("mnist_cnn: parameter names, shapes and count", "[cpu][models]") {
  auto model = models::mnist_cnn();
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"0.weight", {32, 1, 3, 3}}, {"0.bias", {32}},  {"2.weight", {64, 32, 3, 3}}, {"2.bias", {64}},
      {"7.weight", {128, 9216}},   {"7.bias", {128}}, {"10.weight", {10, 128}},     {"10.bias", {10}}};
  auto named = model->named_parameters();
  REQUIRE(named.size() == expected.size());
  int64_t count = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    CHECK(named[i].first == expected[i].first);
    CHECK(named[i].second.sizes() == expected[i].second);
    count += named[i].second.numel();
  }
  CHECK(count == 1199882);
  CHECK(model->named_buffers().empty());
  CHECK(model->named_children().size() == 11);
  const std::string s = model->str();
  CHECK(s.find("(4): MaxPool2d") != std::string::npos);
  CHECK(s.find("(9): Dropout(p=0.5)") != std::string::npos);
}

TEST_CASE("mnist_cnn: output shape, reproducible init, eval determinism, gradients", "[cpu][models]") {
  Generator g1(17), g2(17);
  auto a = models::mnist_cnn(g1);
  auto b = models::mnist_cnn(g2);
  for (auto& [k, v] : a->state_dict()) CHECK(to_f64(v) == to_f64(b->state_dict().at(k)));

  Tensor x = random_tensor({3, 1, 28, 28}, DType::f32, 5, 0, 1);
  a->eval();
  Tensor y1 = a->forward(x), y2 = a->forward(x);
  REQUIRE(y1.sizes() == Shape{3, 10});
  CHECK(to_f64(y1) == to_f64(y2));  // dropout is the identity in eval mode
  a->train();
  Tensor y3 = a->forward(x);
  CHECK(to_f64(y3) != to_f64(y1));  // training mode drops activations
  Tensor target = from_vector(std::vector<int64_t>{1, 7, 3}, {3});
  layers::cross_entropy(y3, target).backward();
  for (auto& [k, p] : a->named_parameters()) {
    INFO(k);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
  }
}

TEST_CASE("mnist_cnn: plain SGD steps lower the loss on a fixed batch", "[cpu][models]") {
  Generator gen(3);
  auto model = models::mnist_cnn(gen);
  model->eval();  // no dropout noise: the loss must fall monotonically for a small step
  Tensor x = random_tensor({8, 1, 28, 28}, DType::f32, 6, 0, 1);
  Tensor t = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  double prev = 1e30;
  for (int step = 0; step < 4; ++step) {
    model->zero_grad();
    Tensor loss = layers::cross_entropy(model->forward(x), t);
    const double l = loss.item<double>();
    INFO("step " << step << " loss " << l);
    CHECK(l < prev);
    prev = l;
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters()) p.copy_(p - p.grad() * 0.05);
  }
}
