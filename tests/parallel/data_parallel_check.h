#pragma once
// Shared by the DataParallel tests (tests/parallel/test_data_parallel.cpp and its [cuda] twin
// tests/cuda/test_data_parallel_cuda.cpp): a small CNN, batches and targets, and comparisons of
// tensors and gradients within a tolerance relative to the reference's largest magnitude.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/activation.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>
#include <ember/layers/pool.h>
#include <ember/layers/sequential.h>
#include "support/reference.h"

namespace ember::testing {

/// x (N, 1, 8, 8) -> logits (N, 5): Conv2d(1, 4, 3, pad 1) [BatchNorm2d(4)] ReLU MaxPool2d(2)
/// Flatten Linear(64, 5) [Dropout on the default generator]. Same seed, same weights.
inline layers::ModulePtr small_cnn(bool batchnorm, uint64_t seed = 7, double dropout = 0.0) {
  using namespace layers;
  Generator gen(seed);
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(1, 4, 3, Conv2dOptions{.padding = 1}, gen));
  if (batchnorm) net->push_back(std::make_shared<BatchNorm2d>(4));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(2));
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(64, 5, true, gen));
  if (dropout > 0) net->push_back(std::make_shared<Dropout>(dropout));  // gen dies here: not for Dropout
  return net;
}

/// (n, 1, 8, 8) f32 inputs U[-1, 1) and (n) i64 class targets.
inline Tensor dp_batch(int64_t n, uint64_t seed, Device device = Device::cpu()) {
  return random_tensor({n, 1, 8, 8}, DType::f32, seed, -1.0, 1.0, Layout::Contiguous, device);
}
inline Tensor dp_targets(int64_t n, Device device = Device::cpu()) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * 3 + 1) % 5);
  return from_vector(t, {n}, {.device = device});
}

/// Every element of got within rel * max|ref| of ref (any devices).
inline void check_near(const Tensor& got, const Tensor& ref, double rel) {
  REQUIRE(got.defined());
  REQUIRE(ref.defined());
  REQUIRE(got.sizes() == ref.sizes());
  const std::vector<double> r = to_f64(ref);
  double scale = 0;
  for (double v : r) scale = std::max(scale, std::fabs(v));
  check_close(got, r, 0.0, rel * std::max(scale, 1e-30));
}

/// Every parameter's .grad() of `got` near that of `ref` (same structure).
inline void check_grads_near(const layers::Module& got, const layers::Module& ref, double rel) {
  const auto g = got.named_parameters(), r = ref.named_parameters();
  REQUIRE(g.size() == r.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("gradient of " << r[i].first);
    check_near(g[i].second.grad(), r[i].second.grad(), rel);
  }
}

/// Compares a DataParallel run with its reference: outputs y and y_ref, their cross-entropy
/// losses against t; then runs both backward passes and compares every gradient.
inline void check_step_near(const Tensor& y, const Tensor& y_ref, const Tensor& t, const layers::Module& model,
                            const layers::Module& ref, double rel) {
  check_near(y, y_ref, rel);
  const Tensor loss = layers::cross_entropy(y, t), loss_ref = layers::cross_entropy(y_ref, t);
  check_near(loss, loss_ref, rel);
  loss.backward();
  loss_ref.backward();
  check_grads_near(model, ref, rel);
}

}  // namespace ember::testing
