// Learning-rate schedules: closed forms of the step count, and their (tiny) state dicts.
#include <ember/optim/schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <ember/kernels/factory.h>

namespace ember::optim {

// ---- base ----

LRScheduler::LRScheduler(Optimizer& opt) : opt_(&opt), base_lr_(opt.lr()) {}

void LRScheduler::step() {
  ++step_count_;
  try {
    apply();
  } catch (...) {  // e.g. a wrapped OneCycleLR past its total_steps: the count stays valid
    --step_count_;
    throw;
  }
}

namespace {
constexpr const char* kStepCount = "step_count";
constexpr const char* kBaseLr = "base_lr";

double one_value(const std::string& who, const std::string& key, const Tensor& t) {
  EMBER_CHECK(t.defined() && t.numel() == 1, who, ": entry '", key, "' must hold one value, got ",
              t.defined() ? "shape " + t.shape_str() : std::string("an undefined tensor"));
  return t.to(Device::cpu()).item<double>();
}

/// Reads step_count and base_lr under `prefix`; a missing one is an error naming it.
void read_base(const std::string& who, const StateDict& sd, const std::string& prefix, int64_t& step, double& base) {
  auto get = [&](const char* k) -> const Tensor& {
    auto it = sd.find(prefix + k);
    EMBER_CHECK(it != sd.end(), who, ": missing entry '", prefix, k, "'");
    return it->second;
  };
  const double s = one_value(who, prefix + kStepCount, get(kStepCount));
  EMBER_CHECK(s >= 0 && s == std::floor(s), who, ": entry '", prefix, kStepCount, "' holds ", s,
              "; expected a non-negative integer");
  step = static_cast<int64_t>(s);
  base = one_value(who, prefix + kBaseLr, get(kBaseLr));
}

void check_no_extra(const std::string& who, const StateDict& sd, const std::vector<std::string>& expected) {
  for (const auto& [k, v] : sd)
    EMBER_CHECK(std::find(expected.begin(), expected.end(), k) != expected.end(), who, ": unexpected entry '", k, "'");
}
}  // namespace

StateDict LRScheduler::state_dict() const {
  return {{kStepCount, scalar_tensor(static_cast<double>(step_count_), {.dtype = DType::i64})},
          {kBaseLr, scalar_tensor(base_lr_, {.dtype = DType::f64})}};
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  const std::string who = name() + "::load_state_dict";
  check_no_extra(who, sd, {kStepCount, kBaseLr});
  int64_t step = 0;
  double base = 0;
  read_base(who, sd, "", step, base);
  const int64_t old_step = step_count_;
  const double old_base = base_lr_;
  step_count_ = step, base_lr_ = base;
  try {
    apply();
  } catch (...) {  // e.g. OneCycleLR: a step count past total_steps
    step_count_ = old_step, base_lr_ = old_base;
    throw;
  }
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& opt, const StepLROptions& o) : LRScheduler(opt), o_(o) {
  EMBER_CHECK(o.step_size >= 1, "StepLR: step_size must be >= 1, got ", o.step_size);
  apply();
}

double StepLR::lr_at(int64_t t) const { return base_lr_ * std::pow(o_.gamma, static_cast<double>(t / o_.step_size)); }

// ---- MultiStepLR ----

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  apply();
}

double MultiStepLR::lr_at(int64_t t) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
  return base_lr_ * std::pow(gamma_, static_cast<double>(passed));
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, const CosineAnnealingOptions& o) : LRScheduler(opt), o_(o) {
  EMBER_CHECK(o.T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", o.T_max);
  apply();
}

double CosineAnnealingLR::lr_at(int64_t t) const {
  const double c = std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(o_.T_max));
  return o_.eta_min + (base_lr_ - o_.eta_min) * (1.0 + c) / 2.0;
}

// ---- LinearWarmup ----

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup_steps, std::unique_ptr<LRScheduler> after,
                           double start_factor)
    : LRScheduler(opt), warmup_(warmup_steps), after_(std::move(after)), start_factor_(start_factor) {
  EMBER_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  EMBER_CHECK(start_factor >= 0.0 && start_factor <= 1.0, "LinearWarmup: start_factor must be in [0, 1], got ",
              start_factor);
  EMBER_CHECK(!after_ || &after_->optimizer() == &opt, "LinearWarmup: the wrapped ", after_ ? after_->name() : "",
              " drives a different optimizer");
  // The wrapped schedule set the lr to its own lr_at(0) when it was built; our base is the
  // optimizer's lr before that, which is the wrapped schedule's base.
  if (after_) base_lr_ = after_->base_lr();
  apply();
}

double LinearWarmup::lr_at(int64_t t) const {
  if (t >= warmup_) return after_ ? after_->lr_at(t - warmup_) : base_lr_;
  const double target = after_ ? after_->lr_at(0) : base_lr_;
  return target * (start_factor_ + (1.0 - start_factor_) * static_cast<double>(t) / static_cast<double>(warmup_));
}

StateDict LinearWarmup::state_dict() const {
  StateDict sd = LRScheduler::state_dict();
  if (after_)
    for (auto& [k, v] : after_->state_dict()) sd["after." + k] = v;
  return sd;
}

void LinearWarmup::load_state_dict(const StateDict& sd) {
  const std::string who = name() + "::load_state_dict";
  StateDict own, inner;
  for (const auto& [k, v] : sd) {
    if (after_ && k.rfind("after.", 0) == 0) inner[k.substr(6)] = v;
    else own[k] = v;
  }
  check_no_extra(who, own, {kStepCount, kBaseLr});
  int64_t step = 0;
  double base = 0;
  read_base(who, own, "", step, base);
  if (after_) {
    // Validate the wrapped schedule's entries before changing anything (its own load applies).
    int64_t s2 = 0;
    double b2 = 0;
    check_no_extra(who + " (after.)", inner, {kStepCount, kBaseLr});
    read_base(who, sd, "after.", s2, b2);
    after_->load_state_dict(inner);
  }
  step_count_ = step, base_lr_ = base;
  apply();
}

// ---- OneCycleLR ----

OneCycleLR::OneCycleLR(Optimizer& opt, const OneCycleOptions& o) : LRScheduler(opt), o_(o) {
  EMBER_CHECK(o.total_steps >= 2, "OneCycleLR: total_steps must be >= 2, got ", o.total_steps);
  EMBER_CHECK(o.pct_start > 0.0 && o.pct_start < 1.0, "OneCycleLR: pct_start must be in (0, 1), got ", o.pct_start);
  EMBER_CHECK(o.max_lr >= 0.0 && o.div_factor > 0.0 && o.final_div_factor > 0.0,
              "OneCycleLR: expected max_lr >= 0 and positive div factors, got max_lr ", o.max_lr, ", div_factor ",
              o.div_factor, ", final_div_factor ", o.final_div_factor);
  const double initial = o.max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  const double T = static_cast<double>(o.total_steps), up_end = o.pct_start * T - 1.0;
  if (o.three_phase) {
    phases_ = {
        {up_end, initial, o.max_lr}, {2.0 * o.pct_start * T - 2.0, o.max_lr, initial}, {T - 1.0, initial, min_lr}};
  } else {
    phases_ = {{up_end, initial, o.max_lr}, {T - 1.0, o.max_lr, min_lr}};
  }
  // Every phase must span at least part of a step, or its slope is 0/0.
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    EMBER_CHECK(phases_[i].end_step > start, "OneCycleLR: phase ", i + 1, " of ", phases_.size(),
                " is empty (ends at step ", phases_[i].end_step, ", starts at ", start, "); increase total_steps (",
                o.total_steps, ") or move pct_start (", o.pct_start, ")");
    start = phases_[i].end_step;
  }
  base_lr_ = initial;
  apply();
}

void OneCycleLR::step() {
  EMBER_CHECK(step_count_ + 1 <= o_.total_steps, "OneCycleLR: stepped ", step_count_ + 1, " times but total_steps is ",
              o_.total_steps);
  LRScheduler::step();
}

double OneCycleLR::lr_at(int64_t t) const {
  EMBER_CHECK(t >= 0 && t <= o_.total_steps, "OneCycleLR: step ", t, " is outside [0, total_steps = ", o_.total_steps,
              "]");
  const double x = static_cast<double>(t);
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (x <= p.end_step || i + 1 == phases_.size()) {
      const double pct = (x - start) / (p.end_step - start);
      if (o_.cos_anneal) return p.end_lr + (p.start_lr - p.end_lr) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
      return (p.end_lr - p.start_lr) * pct + p.start_lr;
    }
    start = p.end_step;
  }
  return phases_.back().end_lr;  // unreachable: the last phase always matches
}

}  // namespace ember::optim
