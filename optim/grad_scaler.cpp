// GradScaler: the scale lives on the host (update() runs there, after step() has read the
// finding); gradients are unscaled by kernels/amp.h's fused pass, one per device.
#include <ember/optim/grad_scaler.h>

#include <cmath>
#include <set>
#include <string>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/cuda_graph.h>
#include <ember/kernels/amp.h>
#include <ember/kernels/factory.h>

namespace ember::amp {

namespace {

void check_options(const GradScalerOptions& o) {
  EMBER_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "GradScaler: init_scale must be finite and > 0, got ",
              o.init_scale);
  EMBER_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ",
              o.growth_factor);
  EMBER_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
              o.backoff_factor);
  EMBER_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
}

const char* const kScale = "scale";
const char* const kTracker = "growth_tracker";
const char* const kSkipped = "skipped_steps";
const char* const kGrowth = "growth_factor";
const char* const kBackoff = "backoff_factor";
const char* const kInterval = "growth_interval";
const char* const kEnabled = "enabled";

/// The value of a one-element state entry; an error names the key.
double value_of(const StateDict& sd, const char* key) {
  const auto it = sd.find(key);
  EMBER_CHECK(it != sd.end(), "GradScaler::load_state_dict: entry '", key, "' is missing");
  const Tensor& t = it->second;
  EMBER_CHECK(t.defined() && t.numel() == 1, "GradScaler::load_state_dict: entry '", key, "' must hold one value, got ",
              t.defined() ? "shape " + t.shape_str() : std::string("an undefined tensor"));
  return t.to(Device::cpu()).item<double>();
}

/// A whole number >= lo stored in a state entry; an error names the key and the value.
int64_t count_of(const StateDict& sd, const char* key, int64_t lo) {
  const double v = value_of(sd, key);
  EMBER_CHECK(v == std::floor(v) && v >= static_cast<double>(lo), "GradScaler::load_state_dict: entry '", key,
              "' must be a whole number >= ", lo, ", got ", v);
  return static_cast<int64_t>(v);
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), scale_(options.init_scale) {
  check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  EMBER_CHECK(loss.defined(), "GradScaler::scale: the loss is an undefined tensor");
  if (!options_.enabled) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  ember::detail::check_capturable("GradScaler (fp16)",
                                  "it reads found_inf on the host to decide whether the step runs; use precision bf16");
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(!st.stepped, "GradScaler::unscale_: step() already ran for this ", optimizer.name(),
              " optimizer since the last update()");
  EMBER_CHECK(!st.unscaled, "GradScaler::unscale_: already called for this ", optimizer.name(),
              " optimizer since the last update() (call unscale_ at most once per step, before step())");
  NoGradGuard no_grad;
  // Gradients grouped by device, in the order the devices first appear.
  std::vector<std::pair<Device, std::vector<Tensor>>> groups;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    size_t k = 0;
    while (k < groups.size() && !(groups[k].first == g.device())) ++k;
    if (k == groups.size()) groups.push_back({g.device(), {}});
    groups[k].second.push_back(g);
  }
  const double inv_scale = 1.0 / scale_;  // exact for a power of two
  for (auto& [dev, grads] : groups) {
    Tensor flag = zeros({1}, {.dtype = DType::f32, .device = dev});
    kernels::non_finite_check_and_unscale_(grads, flag, inv_scale);
    st.found_inf.emplace_back(dev, flag);
  }
  st.unscaled = true;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(!st.stepped, "GradScaler::step: already called for this ", optimizer.name(),
              " optimizer since the last update() (call update() after each step())");
  if (!st.unscaled) unscale_(optimizer);
  bool found = false;
  for (const auto& [dev, flag] : st.found_inf) found = found || flag.to(Device::cpu()).item<float>() != 0.0f;
  if (sync_) found = sync_(found);
  st.found = found;
  st.stepped = true;
  if (found) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool any_step = false, found = false;
  for (const auto& [opt, st] : per_optimizer_) {
    any_step = any_step || st.stepped;
    found = found || (st.stepped && st.found);
  }
  EMBER_CHECK(any_step, "GradScaler::update: no step() since the last update() (call scaler.step(optimizer) first)");
  per_optimizer_.clear();
  if (found) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
}

StateDict GradScaler::state_dict() const {
  auto f64 = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  auto i64 = [](int64_t v) { return scalar_tensor(static_cast<double>(v), {.dtype = DType::i64}); };
  return {{kScale, f64(scale_)},
          {kTracker, i64(growth_tracker_)},
          {kSkipped, i64(skipped_steps_)},
          {kGrowth, f64(options_.growth_factor)},
          {kBackoff, f64(options_.backoff_factor)},
          {kInterval, i64(options_.growth_interval)},
          {kEnabled, i64(options_.enabled ? 1 : 0)}};
}

void GradScaler::load_state_dict(const StateDict& sd) {
  const std::set<std::string> known = {kScale, kTracker, kSkipped, kGrowth, kBackoff, kInterval, kEnabled};
  for (const auto& [key, t] : sd)
    EMBER_CHECK(known.count(key) == 1, "GradScaler::load_state_dict: unexpected entry '", key,
                "' (expected scale, growth_tracker, skipped_steps, growth_factor, backoff_factor, growth_interval, "
                "enabled)");
  GradScalerOptions o;
  o.init_scale = value_of(sd, kScale);
  o.growth_factor = value_of(sd, kGrowth);
  o.backoff_factor = value_of(sd, kBackoff);
  o.growth_interval = count_of(sd, kInterval, 1);
  o.enabled = count_of(sd, kEnabled, 0) != 0;
  const int64_t tracker = count_of(sd, kTracker, 0);
  const int64_t skipped = count_of(sd, kSkipped, 0);
  check_options(o);
  o.init_scale = options_.init_scale;  // the constructor's; the scale itself is scale_
  scale_ = value_of(sd, kScale);
  options_ = o;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
  per_optimizer_.clear();
}

}  // namespace ember::amp
