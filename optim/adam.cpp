// Adam / AdamW: per-parameter step counts and moments, handed to the fused kernel.
#include <ember/optim/adam.h>

#include <ember/autograd/grad_mode.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/record.h>
#include <ember/kernels/optim.h>

namespace ember::optim {

namespace {
void check_options(const char* who, double lr, double b1, double b2, double eps, double wd) {
  EMBER_CHECK(lr >= 0.0, who, ": invalid learning rate ", lr, " (expected >= 0)");
  EMBER_CHECK(eps >= 0.0, who, ": invalid eps ", eps, " (expected >= 0)");
  EMBER_CHECK(b1 >= 0.0 && b1 < 1.0, who, ": invalid beta1 ", b1, " (expected 0 <= beta1 < 1)");
  EMBER_CHECK(b2 >= 0.0 && b2 < 1.0, who, ": invalid beta2 ", b2, " (expected 0 <= beta2 < 1)");
  EMBER_CHECK(wd >= 0.0, who, ": invalid weight_decay ", wd, " (expected >= 0)");
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o) : Adam(std::move(params), o, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr), decoupled_(decoupled) {
  check_options(decoupled ? "AdamW" : "Adam", o.lr, o.betas.first, o.betas.second, o.eps, o.weight_decay);
  add_hyperparameter("beta1", o.betas.first);
  add_hyperparameter("beta2", o.betas.second);
  add_hyperparameter("eps", o.eps);
  add_hyperparameter("weight_decay", o.weight_decay);
}

AdamOptions Adam::options() const {
  return {
      lr(), {hyperparameter("beta1"), hyperparameter("beta2")}, hyperparameter("eps"), hyperparameter("weight_decay")};
}

void Adam::step() {
  profiler::RecordScope profile_scope("optimizer step", profiler::Category::optimizer);
  if (!params_.empty()) profile_scope.inputs(params_[0]);  // its device: GPU time when profiling on one
  NoGradGuard guard;
  const AdamOptions o = options();
  check_options(name().c_str(), o.lr, o.betas.first, o.betas.second, o.eps, o.weight_decay);
  const kernels::AdamHyper h{o.lr, o.betas.first, o.betas.second, o.eps, o.weight_decay, decoupled_};
  std::vector<kernels::AdamSlot> slots;
  std::vector<size_t> updated;  // parameters whose step count this call advances
  std::vector<size_t> fresh;  // parameters whose state this call created
  slots.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    bool c_step = false, c_m = false, c_v = false;
    const Tensor step = state_tensor(i, "step", c_step);
    const Tensor m = state_tensor(i, "exp_avg", c_m);
    const Tensor v = state_tensor(i, "exp_avg_sq", c_v);
    kernels::AdamSlot s{params_[i], g, m, v, *step.data<int64_t>() + 1};
    if (c_step || c_m || c_v) fresh.push_back(i);
    updated.push_back(i);
    slots.push_back(std::move(s));
  }
  try {
    kernels::adam_step(slots, h);
  } catch (...) {
    for (size_t i : fresh) state_[i].clear();  // a failed first step leaves no half-made state
    throw;
  }
  for (size_t i : updated) ++*state_[i].at("step").data<int64_t>();
  // Inside a CUDA graph capture the kernel adds the replay number to the captured step count
  // (kernels/cuda/optim.cu); the host counts follow each replay after the first.
  if (ember::detail::capturing())
    ember::detail::on_replay([this, updated] {
      for (size_t i : updated) ++*state_[i].at("step").data<int64_t>();
    });
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : Adam(std::move(params), AdamOptions{o.lr, o.betas, o.eps, o.weight_decay}, true) {}

AdamWOptions AdamW::options() const {
  const AdamOptions a = Adam::options();
  return {a.lr, a.betas, a.eps, a.weight_decay};
}

}  // namespace ember::optim
