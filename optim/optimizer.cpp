// Optimizer base: parameter bookkeeping, zero_grad, hyperparameters, and the checked state dict.
#include <ember/optim/optimizer.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <string>

#include <ember/autograd/grad_mode.h>
#include <ember/core/cuda_graph.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    EMBER_CHECK(p.defined(), "optimizer: parameter ", i, " is undefined");
    EMBER_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, "optimizer: parameter ", i, " (shape ",
                p.shape_str(), ") has dtype ", dtype_name(p.dtype()), "; expected f32 or f64");
    EMBER_CHECK(p.is_leaf(), "optimizer: parameter ", i, " (shape ", p.shape_str(),
                ") is not a leaf tensor (it was computed by an op); optimize the leaf it came from");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!params_[j].is_same(p), "optimizer: parameters ", j, " and ", i, " are the same tensor (shape ",
                  p.shape_str(), "); each parameter may appear once");
  }
  state_.resize(params_.size());
  add_hyperparameter("lr", lr);
}

void Optimizer::add_hyperparameter(const std::string& name, double value) {
  EMBER_CHECK(name != "lr" || value >= 0.0, "optimizer: invalid learning rate ", value, " (expected >= 0)");
  hyper_[name] = value;
}

void Optimizer::set_lr(double lr) {
  EMBER_CHECK(lr >= 0.0, name(), ": invalid learning rate ", lr, " (expected >= 0)");
  hyper_["lr"] = lr;
}

double Optimizer::hyperparameter(const std::string& key) const {
  auto it = hyper_.find(key);
  if (it == hyper_.end()) {
    std::ostringstream known;
    for (const auto& [k, v] : hyper_) known << (known.tellp() > 0 ? ", " : "") << k;
    EMBER_FAIL(name(), ": no hyperparameter '", key, "' (known: ", known.str(), ")");
  }
  return it->second;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard guard;
  for (const Tensor& p : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else kernels::fill(g, 0.0);
  }
}

const std::map<std::string, Tensor>& Optimizer::state(size_t i) const {
  EMBER_CHECK(i < state_.size(), name(), ": parameter index ", i, " out of range (", state_.size(), " parameters)");
  return state_[i];
}

Tensor Optimizer::new_step_counter() { return zeros({}, {.dtype = DType::i64}); }

Tensor& Optimizer::state_tensor(size_t i, const std::string& key, bool& created) {
  auto& st = state_[i];
  auto it = st.find(key);
  created = it == st.end();
  const Tensor& p = params_[i];
  if (created) {
    // Captured, its zero fill (or first-step initialisation) would run again on every replay.
    if (ember::detail::capturing()) {
      const std::string why = "parameter " + std::to_string(i) + "'s state '" + key +
                              "' would be created inside the capture and reset by every replay; take an "
                              "eager step first, as train.cuda_graphs' warm-up does";
      ember::detail::check_capturable(name().c_str(), why.c_str());
    }
    return st[key] = key == "step" ? new_step_counter() : zeros_like(p);
  }
  Tensor& t = it->second;
  if (key != "step" && (t.device() != p.device() || t.dtype() != p.dtype())) {
    // The parameter moved (Module::to after the optimizer was built): its state follows.
    Tensor moved = empty_like(p);
    kernels::copy(moved, t);
    t = moved;
  }
  return t;
}

// ---- state dict ----

namespace {

constexpr const char* kHyperPrefix = "hyper.";
constexpr const char* kStatePrefix = "state.";
constexpr const char* kParamCount = "param_count";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// A detached copy of t on its own device.
Tensor copy_of(const Tensor& t) {
  Tensor c = empty(t.sizes(), t.options());
  kernels::copy(c, t);
  return c;
}

double scalar_of(const std::string& owner, const std::string& key, const Tensor& t) {
  EMBER_CHECK(t.defined() && t.numel() == 1, owner, ": state entry '", key, "' must hold one value, got ",
              t.defined() ? "shape " + t.shape_str() : std::string("an undefined tensor"));
  return t.to(Device::cpu()).item<double>();
}

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict sd;
  for (const auto& [k, v] : hyper_) sd[kHyperPrefix + k] = scalar_tensor(v, {.dtype = DType::f64});
  sd[kParamCount] = scalar_tensor(static_cast<double>(params_.size()), {.dtype = DType::i64});
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [k, t] : state_[i]) sd[kStatePrefix + std::to_string(i) + "." + k] = copy_of(t);
  return sd;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const std::string who = name() + "::load_state_dict";
  const std::vector<std::string> names = state_names();
  // Pass 1: check everything, collecting what to apply.
  std::map<std::string, double> hyper;
  std::vector<std::map<std::string, Tensor>> state(params_.size());
  bool have_count = false;
  for (const auto& [key, t] : sd) {
    EMBER_CHECK(t.defined(), who, ": entry '", key, "' is an undefined tensor");
    if (key == kParamCount) {
      const double n = scalar_of(who, key, t);
      EMBER_CHECK(n == static_cast<double>(params_.size()), who, ": entry '", key, "' says the saved optimizer had ", n,
                  " parameters, this one has ", params_.size());
      have_count = true;
    } else if (starts_with(key, kHyperPrefix)) {
      const std::string h = key.substr(std::char_traits<char>::length(kHyperPrefix));
      EMBER_CHECK(hyper_.count(h) != 0, who, ": unexpected entry '", key, "' (", name(), " has no hyperparameter '", h,
                  "')");
      hyper[h] = scalar_of(who, key, t);
    } else if (starts_with(key, kStatePrefix)) {
      // "state.<i>.<name>"
      const std::string rest = key.substr(std::char_traits<char>::length(kStatePrefix));
      const size_t dot = rest.find('.');
      size_t idx = 0;
      const auto [ptr, ec] =
          std::from_chars(rest.data(), rest.data() + (dot == std::string::npos ? rest.size() : dot), idx);
      EMBER_CHECK(dot != std::string::npos && dot > 0 && ec == std::errc() && ptr == rest.data() + dot, who,
                  ": malformed entry '", key, "' (expected state.<parameter index>.<name>)");
      EMBER_CHECK(idx < params_.size(), who, ": entry '", key, "' names parameter ", idx, " but this optimizer has ",
                  params_.size(), " parameters");
      const std::string sname = rest.substr(dot + 1);
      EMBER_CHECK(std::find(names.begin(), names.end(), sname) != names.end(), who, ": unexpected entry '", key, "' (",
                  name(), " keeps no state named '", sname, "')");
      const Tensor& p = params_[idx];
      if (sname == "step") {
        const double v = scalar_of(who, key, t);
        EMBER_CHECK(v >= 0 && v == static_cast<double>(static_cast<int64_t>(v)), who, ": entry '", key,
                    "' holds step count ", v, "; expected a non-negative integer");
        state[idx][sname] = scalar_tensor(v, {.dtype = DType::i64});
      } else {
        EMBER_CHECK(t.sizes() == p.sizes(), who, ": entry '", key, "' has shape ", t.shape_str(), " but parameter ",
                    idx, " has shape ", p.shape_str());
        EMBER_CHECK(is_floating(t.dtype()), who, ": entry '", key, "' has dtype ", dtype_name(t.dtype()),
                    "; expected a floating dtype");
        state[idx][sname] = t;
      }
    } else {
      EMBER_FAIL(who, ": unexpected entry '", key, "' (expected hyper.<name>, param_count or state.<i>.<name>)");
    }
  }
  EMBER_CHECK(have_count, who, ": missing entry '", kParamCount, "'");
  for (const auto& [h, v] : hyper_) EMBER_CHECK(hyper.count(h) != 0, who, ": missing entry '", kHyperPrefix, h, "'");
  EMBER_CHECK(hyper.at("lr") >= 0.0, who, ": entry 'hyper.lr' holds an invalid learning rate ", hyper.at("lr"));
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].empty()) continue;
    for (const std::string& n : names)
      EMBER_CHECK(state[i].count(n) != 0, who, ": missing entry 'state.", i, ".", n, "' (parameter ", i,
                  " has other state entries; each updated parameter carries ", names.size(), ")");
  }
  // Pass 2: apply. Copies land on each parameter's device and dtype.
  hyper_ = std::move(hyper);
  for (size_t i = 0; i < state.size(); ++i) {
    std::map<std::string, Tensor> st;
    const Tensor& p = params_[i];
    for (auto& [k, t] : state[i]) {
      if (k == "step") {
        st[k] = t;  // already a fresh CPU i64 tensor
      } else {
        Tensor c = empty(p.sizes(), p.options());
        kernels::copy(c, t);
        st[k] = c;
      }
    }
    state_[i] = std::move(st);
  }
}

}  // namespace ember::optim
