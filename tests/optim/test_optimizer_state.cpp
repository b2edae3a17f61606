// Optimizer state dicts: layout, detached copies, a round trip that continues bit for bit like an
// uninterrupted run (SGD with momentum, Adam, AdamW), and load errors that name the entry and
// leave the optimizer unchanged.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/optim/adam.h>
#include <ember/optim/sgd.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const std::vector<Shape> kShapes = {{4, 5}, {5}, {3, 1, 2}};

std::vector<Tensor> make_params(uint64_t seed) {
  std::vector<Tensor> ps;
  for (const Shape& s : kShapes) ps.push_back(random_tensor(s, DType::f32, seed++).requires_grad_());
  return ps;
}

/// Sets gradients for step `s` (parameter 2 gets none on even steps, so state is partial).
void set_grads(const std::vector<Tensor>& ps, int s) {
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i == 2 && s % 2 == 0) ps[i].set_grad(Tensor());
    else ps[i].set_grad(random_tensor(kShapes[i], DType::f32, 1000 + 10 * static_cast<uint64_t>(s) + i));
  }
}

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

}  // namespace

TEST_CASE("Optimizer state_dict: save, continue, restore into a fresh optimizer: identical steps", "[cpu][optim]") {
  const std::vector<std::pair<const char*, Factory>> factories = {
      {"SGD",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
       }},
      {"SGD nesterov",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
       }},
      {"Adam",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 1e-2});
       }},
      {"AdamW",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.01, .betas = {0.8, 0.95}});
       }},
  };
  for (const auto& [what, make] : factories) {
    INFO(what);
    // Uninterrupted run: 3 steps, snapshot, 3 more.
    std::vector<Tensor> pa = make_params(1);
    auto a = make(pa);
    for (int s = 0; s < 3; ++s) {
      set_grads(pa, s);
      a->step();
    }
    a->set_lr(a->lr() * 0.5);  // a schedule changed it: the state dict carries it
    const StateDict sd = a->state_dict();
    std::vector<std::vector<double>> snapshot;
    for (const Tensor& p : pa) snapshot.push_back(to_f64(p));
    for (int s = 3; s < 6; ++s) {
      set_grads(pa, s);
      a->step();
    }
    // The saved dict is a copy: the later steps did not change it.
    const StateDict sd_again = a->state_dict();
    bool any_differs = false;
    for (const auto& [k, t] : sd)
      if (k.rfind("state.", 0) == 0) any_differs = any_differs || to_f64(t) != to_f64(sd_again.at(k));
    CHECK(any_differs);

    // Restored run: fresh parameters holding the snapshot, a fresh optimizer with other settings.
    std::vector<Tensor> pb;
    for (size_t i = 0; i < kShapes.size(); ++i)
      pb.push_back(from_vector(snapshot[i], kShapes[i], {.dtype = DType::f32}).requires_grad_());
    auto b = make(pb);
    b->set_lr(42.0);
    b->load_state_dict(sd);
    CHECK(b->lr() == a->lr());
    for (int s = 3; s < 6; ++s) {
      set_grads(pb, s);
      b->step();
    }
    for (size_t i = 0; i < kShapes.size(); ++i) CHECK(to_f64(pb[i]) == to_f64(pa[i]));  // bit for bit
    // And the states agree too.
    const StateDict sb = b->state_dict();
    REQUIRE(sb.size() == sd_again.size());
    for (const auto& [k, t] : sd_again) {
      INFO(k);
      REQUIRE(sb.count(k) == 1);
      CHECK(to_f64(sb.at(k)) == to_f64(t));
    }
  }
}

TEST_CASE("Optimizer state_dict: layout", "[cpu][optim]") {
  std::vector<Tensor> ps = make_params(5);
  optim::Adam opt(ps, {.lr = 0.02, .betas = {0.8, 0.9}});
  set_grads(ps, 0);  // parameter 2 has no gradient: no state
  opt.step();
  const StateDict sd = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"hyper.beta1", "hyper.beta2", "hyper.eps", "hyper.lr", "hyper.weight_decay",
                                         "param_count", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step",
                                         "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step"});
  CHECK(sd.at("hyper.lr").dtype() == DType::f64);
  CHECK(sd.at("hyper.lr").dim() == 0);
  CHECK(sd.at("hyper.lr").item<double>() == 0.02);
  CHECK(sd.at("hyper.beta1").item<double>() == 0.8);
  CHECK(sd.at("param_count").item<int64_t>() == 3);
  CHECK(sd.at("state.1.step").dtype() == DType::i64);
  CHECK(sd.at("state.1.step").item<int64_t>() == 1);
  CHECK(sd.at("state.0.exp_avg").sizes() == kShapes[0]);
  CHECK(sd.at("state.0.exp_avg").dtype() == DType::f32);
  CHECK_FALSE(sd.at("state.0.exp_avg").is_same(opt.state(0).at("exp_avg")));

  optim::SGD sgd(ps, {.lr = 0.1, .momentum = 0.5, .nesterov = true});
  set_grads(ps, 1);
  sgd.step();
  const StateDict ss = sgd.state_dict();
  CHECK(ss.at("hyper.nesterov").item<double>() == 1.0);
  CHECK(ss.at("hyper.momentum").item<double>() == 0.5);
  CHECK(ss.count("state.2.momentum_buffer") == 1);
}

TEST_CASE("Optimizer load_state_dict: errors name the entry, nothing changes on error", "[cpu][optim]") {
  std::vector<Tensor> ps = make_params(9);
  optim::SGD opt(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 1);
  opt.step();
  const StateDict good = opt.state_dict();
  const std::vector<double> buf0 = to_f64(opt.state(0).at("momentum_buffer"));

  auto expect_error = [&](StateDict sd, const std::string& text) {
    INFO(text);
    CHECK_THAT(error_of([&] { opt.load_state_dict(sd); }), Catch::Contains(text));
    CHECK(opt.lr() == 0.1);
    CHECK(to_f64(opt.state(0).at("momentum_buffer")) == buf0);
  };
  {
    StateDict sd = good;
    sd.erase("hyper.momentum");
    sd["hyper.lr"] = scalar_tensor(0.5, {.dtype = DType::f64});
    expect_error(sd, "missing entry 'hyper.momentum'");
  }
  {
    StateDict sd = good;
    sd["hyper.lr"] = scalar_tensor(0.5, {.dtype = DType::f64});
    sd["hyper.beta1"] = scalar_tensor(0.9, {.dtype = DType::f64});
    expect_error(sd, "unexpected entry 'hyper.beta1'");
  }
  {
    StateDict sd = good;
    sd["hyper.lr"] = scalar_tensor(0.5, {.dtype = DType::f64});
    sd["state.1.momentum_buffer"] = zeros({7});
    expect_error(sd, "entry 'state.1.momentum_buffer' has shape [7] but parameter 1 has shape [5]");
  }
  {
    StateDict sd = good;
    sd["state.3.momentum_buffer"] = zeros({5});
    expect_error(sd, "entry 'state.3.momentum_buffer' names parameter 3 but this optimizer has 3 parameters");
  }
  {
    StateDict sd = good;
    sd["state.x.momentum_buffer"] = zeros({5});
    expect_error(sd, "malformed entry 'state.x.momentum_buffer'");
  }
  {
    StateDict sd = good;
    sd["param_count"] = scalar_tensor(4, {.dtype = DType::i64});
    expect_error(sd, "entry 'param_count' says the saved optimizer had 4 parameters, this one has 3");
  }
  {
    StateDict sd = good;
    sd.erase("param_count");
    expect_error(sd, "missing entry 'param_count'");
  }
  {
    StateDict sd = good;
    sd["weights"] = zeros({1});
    expect_error(sd, "unexpected entry 'weights'");
  }
  {
    // An Adam state dict into SGD: the first foreign entry is named.
    optim::Adam adam(ps, {.lr = 0.1});
    set_grads(ps, 1);
    adam.step();
    StateDict sd = adam.state_dict();
    sd.erase("hyper.beta1");
    sd.erase("hyper.beta2");
    sd.erase("hyper.eps");
    sd["hyper.momentum"] = scalar_tensor(0.9, {.dtype = DType::f64});
    sd["hyper.dampening"] = scalar_tensor(0, {.dtype = DType::f64});
    sd["hyper.nesterov"] = scalar_tensor(0, {.dtype = DType::f64});
    expect_error(sd, "SGD keeps no state named 'exp_avg'");
  }
  {
    // Adam's per-parameter state must be complete.
    optim::Adam adam(ps, {.lr = 0.1});
    set_grads(ps, 1);
    adam.step();
    StateDict sd = adam.state_dict();
    sd.erase("state.1.exp_avg_sq");
    CHECK_THAT(error_of([&] { adam.load_state_dict(sd); }), Catch::Contains("missing entry 'state.1.exp_avg_sq'"));
    StateDict sd2 = adam.state_dict();
    sd2["state.0.step"] = scalar_tensor(1.5, {.dtype = DType::f64});
    CHECK_THAT(error_of([&] { adam.load_state_dict(sd2); }), Catch::Contains("'state.0.step' holds step count 1.5"));
  }
}

TEST_CASE("Optimizer load_state_dict: converts dtype and keeps step counts on the CPU", "[cpu][optim]") {
  // A checkpoint read back as f64 (or on another device) still loads into f32 parameters.
  std::vector<Tensor> pa = make_params(20);
  optim::Adam a(pa, {.lr = 0.01});
  set_grads(pa, 1);
  a.step();
  StateDict sd = a.state_dict();
  for (auto& [k, t] : sd) t = t.to(DType::f64);
  std::vector<Tensor> pb = make_params(20);
  optim::Adam b(pb, {.lr = 0.01});
  b.load_state_dict(sd);
  CHECK(b.state(0).at("exp_avg").dtype() == DType::f32);
  CHECK(b.state(0).at("step").dtype() == DType::i64);
  CHECK(b.state(0).at("step").device() == Device::cpu());
  CHECK(to_f64(b.state(0).at("exp_avg")) == to_f64(a.state(0).at("exp_avg")));
}
