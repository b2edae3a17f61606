#pragma once
// The skip scenario of amp::GradScaler on one device (tests/optim/test_grad_scaler.cpp on the
// CPU, tests/cuda/test_grad_scaler_cuda.cpp on a GPU): a clean step, then an inf or NaN injected
// into one gradient must leave parameters and optimizer state as they were and halve the scale.
#include <catch2/catch.hpp>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/optim/adam.h>
#include <ember/optim/grad_scaler.h>
#include <ember/optim/sgd.h>

namespace ember::testing {

/// Everything a step may change: parameters, then every optimizer state tensor, as doubles.
inline std::vector<std::vector<double>> snapshot(const optim::Optimizer& opt) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : opt.params()) out.push_back(p.to_vector<double>());
  for (const auto& [key, t] : opt.state_dict()) out.push_back(t.to_vector<double>());
  return out;
}

/// Parameters (3, 5) and (7) on `device` with grad dtype `grad_dt`; loss sum(w * x) + sum(b * b).
struct TinyModel {
  Tensor w, b;
  TinyModel(Device device, uint64_t seed) {
    Generator gen(seed);
    w = randn({3, 5}, {.device = device}, gen).requires_grad_();
    b = randn({7}, {.device = device}, gen).requires_grad_();
  }
  std::vector<Tensor> params() const { return {w, b}; }
  Tensor loss() const {
    Tensor x = full({3, 5}, 0.25, {.device = w.device()});
    return sum(w * x) + sum(b * b);
  }
};

/// Sets the first element of `p`'s gradient (any device) to `bad`.
inline void poison_grad(const Tensor& p, double bad) {
  Tensor g = p.grad().flatten();  // a view of the contiguous gradient
  g.narrow(0, 0, 1).fill_(bad);
}

/// One clean step (state created), then a step with `bad` in b's gradient: skipped, nothing
/// changed, scale halved, growth tracker reset. For SGD with momentum and for Adam.
inline void check_skip_on(Device device, double bad) {
  for (const std::string kind : {"SGD", "Adam"}) {
    INFO(kind << " on " << device.str() << " with " << bad);
    TinyModel m(device, 5);
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == "SGD") opt = std::make_unique<optim::SGD>(m.params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    else opt = std::make_unique<optim::Adam>(m.params(), optim::AdamOptions{.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 100});
    scaler.scale(m.loss()).backward();
    CHECK(scaler.step(*opt));
    scaler.update();
    CHECK(scaler.growth_tracker() == 1);
    const auto before = snapshot(*opt);
    opt->zero_grad();
    scaler.scale(m.loss()).backward();
    poison_grad(m.b, bad);
    CHECK_FALSE(scaler.step(*opt));
    CHECK(snapshot(*opt) == before);
    CHECK(scaler.skipped_steps() == 1);
    scaler.update();
    CHECK(scaler.scale() == 512);
    CHECK(scaler.growth_tracker() == 0);
    // The next clean step steps again.
    opt->zero_grad();
    scaler.scale(m.loss()).backward();
    CHECK(scaler.step(*opt));
    scaler.update();
    CHECK(snapshot(*opt) != before);
    CHECK(scaler.scale() == 512);
  }
}

}  // namespace ember::testing
