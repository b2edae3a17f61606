// LR schedules: learning-rate sequences against closed forms and hand-worked values, the lr they
// set on the optimizer, state dict round trips (a restored schedule continues identically), and
// errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/optim/schedule.h>
#include <ember/optim/sgd.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Learning rates the optimizer sees at t = 0..n-1 (t = 0 right after construction).
std::vector<double> run(optim::LRScheduler& s, int n) {
  std::vector<double> lrs;
  for (int t = 0; t < n; ++t) {
    if (t > 0) s.step();
    CHECK(s.step_count() == t);
    CHECK(s.get_lr() == s.optimizer().lr());
    lrs.push_back(s.optimizer().lr());
  }
  return lrs;
}

void check_seq(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("t = " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-15));
  }
}

struct Fixture {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt{{p}, {.lr = 0.8, .momentum = 0.9}};
};

}  // namespace

TEST_CASE("StepLR: base * gamma^floor(t / step_size)", "[cpu][optim]") {
  Fixture f;
  optim::StepLR s(f.opt, {.step_size = 3, .gamma = 0.5});
  check_seq(run(s, 8), {0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2});
  CHECK(s.base_lr() == 0.8);
}

TEST_CASE("MultiStepLR: one factor per milestone passed, repeated milestones count twice", "[cpu][optim]") {
  Fixture f;
  optim::MultiStepLR s(f.opt, {5, 2, 5}, 0.1);  // unsorted on purpose
  check_seq(run(s, 7), {0.8, 0.8, 0.08, 0.08, 0.08, 0.0008, 0.0008});
}

TEST_CASE("CosineAnnealingLR: the closed form, and past T_max", "[cpu][optim]") {
  Fixture f;
  optim::CosineAnnealingLR s(f.opt, {.T_max = 6, .eta_min = 0.05});
  std::vector<double> want;
  for (int t = 0; t < 10; ++t) want.push_back(0.05 + (0.8 - 0.05) * (1 + std::cos(kPi * t / 6.0)) / 2);
  const std::vector<double> got = run(s, 10);
  check_seq(got, want);
  CHECK(got[3] == Approx(0.425));  // half way: the mean of base and eta_min
  CHECK(got[6] == Approx(0.05));  // T_max: eta_min
  CHECK(got[9] == Approx(got[3]));  // then back up the same cosine
}

TEST_CASE("LinearWarmup: linear ramp, then the wrapped schedule shifted by the warm-up", "[cpu][optim]") {
  SECTION("alone: ramps to the base lr and stays") {
    Fixture f;
    optim::LinearWarmup s(f.opt, 4, nullptr, 0.2);
    // factor 0.2 + 0.8 t / 4 = 0.2, 0.4, 0.6, 0.8, then 1.
    check_seq(run(s, 7), {0.16, 0.32, 0.48, 0.64, 0.8, 0.8, 0.8});
  }
  SECTION("in front of StepLR") {
    Fixture f;
    auto inner = std::make_unique<optim::StepLR>(f.opt, optim::StepLROptions{.step_size = 2, .gamma = 0.5});
    optim::LinearWarmup s(f.opt, 3, std::move(inner), 0.0);
    CHECK(s.base_lr() == 0.8);
    // Warm-up 0, 1/3, 2/3 of 0.8; then StepLR from its own t = 0: 0.8, 0.8, 0.4, 0.4, 0.2.
    check_seq(run(s, 8), {0.0, 0.8 / 3, 1.6 / 3, 0.8, 0.8, 0.4, 0.4, 0.2});
  }
  SECTION("in front of cosine annealing") {
    Fixture f;
    auto inner = std::make_unique<optim::CosineAnnealingLR>(f.opt, optim::CosineAnnealingOptions{.T_max = 4});
    optim::LinearWarmup s(f.opt, 2, std::move(inner));  // start_factor 0.1
    std::vector<double> want = {0.08, 0.08 + 0.9 * 0.8 / 2};
    for (int t = 0; t < 5; ++t) want.push_back(0.8 * (1 + std::cos(kPi * t / 4.0)) / 2);
    check_seq(run(s, 7), want);
  }
  SECTION("errors") {
    Fixture f;
    Fixture other;
    CHECK_THAT(error_of([&] { optim::LinearWarmup(f.opt, -1); }), Catch::Contains("warmup_steps must be >= 0"));
    CHECK_THAT(error_of([&] { optim::LinearWarmup(f.opt, 2, nullptr, 1.5); }), Catch::Contains("start_factor"));
    CHECK_THAT(error_of([&] {
                 optim::LinearWarmup(f.opt, 2, std::make_unique<optim::StepLR>(other.opt, optim::StepLROptions{}));
               }),
               Catch::Contains("drives a different optimizer"));
  }
}

TEST_CASE("OneCycleLR: phases, annealing and the step limit", "[cpu][optim]") {
  SECTION("two phases, cosine") {
    Fixture f;
    // total 10, pct 0.3: up over t in [0, 2] from 0.4 to 10, down over [2, 9] to 0.4 / 100.
    optim::OneCycleLR s(f.opt,
                        {.max_lr = 10, .total_steps = 10, .pct_start = 0.3, .div_factor = 25, .final_div_factor = 100});
    auto cos_anneal = [](double a, double b, double pct) { return b + (a - b) / 2 * (1 + std::cos(kPi * pct)); };
    std::vector<double> want;
    for (int t = 0; t <= 10; ++t) {
      if (t <= 2) want.push_back(cos_anneal(0.4, 10, t / 2.0));
      else want.push_back(cos_anneal(10, 0.004, (t - 2) / 7.0));
    }
    const std::vector<double> got = run(s, 11);
    check_seq(got, want);
    CHECK(got[0] == Approx(0.4));
    CHECK(got[1] == Approx(5.2));  // half way up: the mean
    CHECK(got[2] == Approx(10));
    CHECK(got[9] == Approx(0.004));
    CHECK_THAT(error_of([&] { s.step(); }), Catch::Contains("stepped 11 times but total_steps is 10"));
    CHECK(s.step_count() == 10);
  }
  SECTION("three phases, linear") {
    Fixture f;
    // total 20, pct 0.25: up [0, 4] 1 -> 4, down [4, 8] 4 -> 1, then [8, 19] 1 -> 0.1.
    optim::OneCycleLR s(f.opt, {.max_lr = 4,
                                .total_steps = 20,
                                .pct_start = 0.25,
                                .div_factor = 4,
                                .final_div_factor = 10,
                                .three_phase = true,
                                .cos_anneal = false});
    std::vector<double> want;
    for (int t = 0; t < 20; ++t) {
      if (t <= 4) want.push_back(1 + 3 * t / 4.0);
      else if (t <= 8) want.push_back(4 - 3 * (t - 4) / 4.0);
      else want.push_back(1 - 0.9 * (t - 8) / 11.0);
    }
    check_seq(run(s, 20), want);
  }
  SECTION("argument errors") {
    Fixture f;
    CHECK_THAT(error_of([&] { optim::OneCycleLR(f.opt, {.total_steps = 1}); }),
               Catch::Contains("total_steps must be >= 2"));
    CHECK_THAT(error_of([&] { optim::OneCycleLR(f.opt, {.total_steps = 3, .pct_start = 0.2}); }),
               Catch::Contains("phase 1 of 2 is empty"));
    CHECK_THAT(error_of([&] { optim::OneCycleLR(f.opt, {.pct_start = 1.0}); }), Catch::Contains("pct_start"));
  }
}

TEST_CASE("Schedules: state_dict round trip continues the same sequence", "[cpu][optim]") {
  auto make = [](int which, optim::Optimizer& opt) -> std::unique_ptr<optim::LRScheduler> {
    switch (which) {
      case 0:
        return std::make_unique<optim::StepLR>(opt, optim::StepLROptions{.step_size = 2, .gamma = 0.3});
      case 1:
        return std::make_unique<optim::MultiStepLR>(opt, std::vector<int64_t>{1, 4}, 0.5);
      case 2:
        return std::make_unique<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingOptions{.T_max = 7});
      case 3:
        return std::make_unique<optim::LinearWarmup>(
            opt, 3, std::make_unique<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingOptions{.T_max = 5}));
      default:
        return std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleOptions{.max_lr = 1, .total_steps = 12});
    }
  };
  for (int which = 0; which < 5; ++which) {
    Fixture a;
    auto sa = make(which, a.opt);
    INFO(sa->name());
    for (int t = 0; t < 4; ++t) sa->step();
    const StateDict sd = sa->state_dict();
    CHECK(sd.at("step_count").dtype() == DType::i64);
    CHECK(sd.at("step_count").item<int64_t>() == 4);
    std::vector<double> cont;
    for (int t = 0; t < 5; ++t) {
      sa->step();
      cont.push_back(a.opt.lr());
    }
    // A fresh optimizer with a different lr: the loaded base lr wins.
    Tensor p = zeros({2}).requires_grad_();
    optim::SGD opt_b({p}, {.lr = 123.0});
    auto sb = make(which, opt_b);
    sb->load_state_dict(sd);
    CHECK(sb->step_count() == 4);
    CHECK(opt_b.lr() == sb->get_lr());
    for (int t = 0; t < 5; ++t) {
      sb->step();
      CHECK(opt_b.lr() == cont[static_cast<size_t>(t)]);  // bit for bit
    }
  }
}

TEST_CASE("Schedules: load_state_dict errors name the entry and change nothing", "[cpu][optim]") {
  Fixture f;
  optim::StepLR s(f.opt, {.step_size = 2});
  s.step();
  StateDict sd = s.state_dict();
  StateDict missing = sd;
  missing.erase("base_lr");
  CHECK_THAT(error_of([&] { s.load_state_dict(missing); }), Catch::Contains("missing entry 'base_lr'"));
  StateDict extra = sd;
  extra["gamma"] = scalar_tensor(0.5, {.dtype = DType::f64});
  CHECK_THAT(error_of([&] { s.load_state_dict(extra); }), Catch::Contains("unexpected entry 'gamma'"));
  StateDict bad = sd;
  bad["step_count"] = scalar_tensor(-3, {.dtype = DType::i64});
  CHECK_THAT(error_of([&] { s.load_state_dict(bad); }), Catch::Contains("'step_count' holds -3"));
  CHECK(s.step_count() == 1);
  // A warm-up without a wrapped schedule refuses the wrapped schedule's entries.
  Fixture g;
  optim::LinearWarmup w(g.opt, 2);
  Fixture h;
  optim::LinearWarmup w2(h.opt, 2, std::make_unique<optim::StepLR>(h.opt, optim::StepLROptions{}));
  CHECK_THAT(error_of([&] { w.load_state_dict(w2.state_dict()); }),
             Catch::Contains("unexpected entry 'after.base_lr'"));
  // OneCycleLR refuses a step count past total_steps, and keeps its own.
  Fixture k;
  optim::OneCycleLR oc(k.opt, {.total_steps = 10});
  StateDict far = oc.state_dict();
  far["step_count"] = scalar_tensor(11, {.dtype = DType::i64});
  CHECK_THAT(error_of([&] { oc.load_state_dict(far); }), Catch::Contains("outside [0, total_steps = 10]"));
  CHECK(oc.step_count() == 0);
  // A warm-up in front of OneCycleLR runs out with it; the failed step leaves the count alone.
  Fixture m;
  optim::LinearWarmup wo(m.opt, 2,
                         std::make_unique<optim::OneCycleLR>(m.opt, optim::OneCycleOptions{.total_steps = 4}));
  for (int t = 0; t < 6; ++t) wo.step();
  const double last = m.opt.lr();
  CHECK_THAT(error_of([&] { wo.step(); }), Catch::Contains("step 5 is outside [0, total_steps = 4]"));
  CHECK(wo.step_count() == 6);
  CHECK(m.opt.lr() == last);
}
