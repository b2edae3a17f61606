// Optimizers driving a real layer through autograd: a Linear model fits a noiseless linear map
// (SGD with momentum, Adam, AdamW with clipping and a schedule), and an optimizer keeps working
// after Module::to() moved its parameters (the momentum buffer follows the parameter's dtype).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/layers/linear.h>
#include <ember/optim/adam.h>
#include <ember/optim/clip.h>
#include <ember/optim/schedule.h>
#include <ember/optim/sgd.h>
#include "optim/optim_reference.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

/// Inputs x (64, 5) and targets y = x W* + b* (64, 3) of a fixed random linear map.
struct Problem {
  Tensor x, y;
};
Problem make_problem() {
  Tensor x = random_tensor({64, 5}, DType::f32, 1);
  Tensor w = random_tensor({5, 3}, DType::f32, 2, -2, 2);
  Tensor b = random_tensor({3}, DType::f32, 3);
  NoGradGuard guard;
  return {x, matmul(x, w) + b};
}

double mse(layers::Linear& model, const Problem& pr) {
  Tensor d = model.forward(pr.x) - pr.y;
  return mean(d * d).item<double>();
}

/// Runs `steps` full-batch steps; returns the final loss.
double fit(layers::Linear& model, optim::Optimizer& opt, const Problem& pr, int steps,
           optim::LRScheduler* sched = nullptr, double clip = 0) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor d = model.forward(pr.x) - pr.y;
    mean(d * d).backward();
    if (clip > 0) optim::clip_grad_norm_(model.parameters(), clip);
    opt.step();
    if (sched) sched->step();
  }
  return mse(model, pr);
}

}  // namespace

TEST_CASE("Optimizers fit a linear map through autograd", "[cpu][optim]") {
  const Problem pr = make_problem();
  Generator gen(7);
  SECTION("SGD with Nesterov momentum") {
    layers::Linear model(5, 3, true, gen);
    const double start = mse(model, pr);
    optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true});
    const double end = fit(model, opt, pr, 300);
    INFO("loss " << start << " -> " << end);
    CHECK(end < 1e-6 * start);
  }
  SECTION("Adam with a cosine schedule") {
    layers::Linear model(5, 3, true, gen);
    const double start = mse(model, pr);
    optim::Adam opt(model.parameters(), {.lr = 0.1});
    optim::CosineAnnealingLR sched(opt, {.T_max = 400});
    const double end = fit(model, opt, pr, 400, &sched);
    INFO("loss " << start << " -> " << end);
    CHECK(end < 1e-6 * start);
  }
  SECTION("AdamW with gradient clipping and warm-up (decay keeps a small bias)") {
    layers::Linear model(5, 3, true, gen);
    const double start = mse(model, pr);
    optim::AdamW opt(model.parameters(), {.lr = 0.05, .weight_decay = 1e-4});
    optim::LinearWarmup sched(opt, 20);
    const double end = fit(model, opt, pr, 400, &sched, /*clip=*/1.0);
    INFO("loss " << start << " -> " << end);
    CHECK(end < 1e-3 * start);
  }
}

TEST_CASE("Optimizer state follows parameters moved by Module::to", "[cpu][optim]") {
  Generator gen(3);
  layers::Linear model(4, 2, true, gen);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = random_tensor({8, 4}, DType::f32, 11);
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    sum(model.forward(x)).backward();
    opt.step();
  }
  REQUIRE(opt.state(0).at("momentum_buffer").dtype() == DType::f32);
  const std::vector<double> buf = to_f64(opt.state(0).at("momentum_buffer"));
  model.to(DType::f64);
  Tensor w = model.weight();
  REQUIRE(w.dtype() == DType::f64);
  REQUIRE(opt.params()[0].is_same(w));
  std::vector<double> ref = to_f64(w);
  opt.zero_grad();
  sum(model.forward(x.to(DType::f64))).backward();
  const std::vector<double> g = to_f64(w.grad());
  SgdRef st{0.1, 0.9, 0, 0, false};
  st.buf = buf;
  st.has_buf = true;
  st.step(ref, g);
  opt.step();
  CHECK(opt.state(0).at("momentum_buffer").dtype() == DType::f64);
  check_param(w, ref, DType::f64);
  check_param(opt.state(0).at("momentum_buffer"), st.buf, DType::f64);
}
