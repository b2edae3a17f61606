// SGD: collects each parameter's gradient and momentum buffer and hands them to the fused kernel.
#include <ember/optim/sgd.h>

#include <ember/autograd/grad_mode.h>
#include <ember/core/record.h>
#include <ember/kernels/optim.h>

namespace ember::optim {

namespace {
void check_options(const SGDOptions& o) {
  EMBER_CHECK(o.lr >= 0.0, "SGD: invalid learning rate ", o.lr, " (expected >= 0)");
  EMBER_CHECK(o.momentum >= 0.0, "SGD: invalid momentum ", o.momentum, " (expected >= 0)");
  EMBER_CHECK(o.weight_decay >= 0.0, "SGD: invalid weight_decay ", o.weight_decay, " (expected >= 0)");
  EMBER_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
              "SGD: Nesterov momentum requires momentum > 0 and dampening == 0, got momentum ", o.momentum,
              " and dampening ", o.dampening);
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params), o.lr) {
  check_options(o);
  add_hyperparameter("momentum", o.momentum);
  add_hyperparameter("dampening", o.dampening);
  add_hyperparameter("weight_decay", o.weight_decay);
  add_hyperparameter("nesterov", o.nesterov ? 1.0 : 0.0);
}

SGDOptions SGD::options() const {
  return {lr(), hyperparameter("momentum"), hyperparameter("dampening"), hyperparameter("weight_decay"),
          hyperparameter("nesterov") != 0.0};
}

void SGD::step() {
  profiler::RecordScope profile_scope("optimizer step", profiler::Category::optimizer);
  if (!params_.empty()) profile_scope.inputs(params_[0]);  // its device: GPU time when profiling on one
  NoGradGuard guard;
  const SGDOptions o = options();
  check_options(o);  // a loaded state dict may have changed them
  const kernels::SgdHyper h{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov};
  std::vector<kernels::SgdSlot> slots;
  std::vector<size_t> fresh;  // parameters whose momentum buffer this call creates
  slots.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    kernels::SgdSlot s{params_[i], g, Tensor(), false};
    if (o.momentum != 0.0) {
      bool created = false;
      s.momentum_buffer = state_tensor(i, "momentum_buffer", created);
      s.init_buffer = created;
      if (created) fresh.push_back(i);
    }
    slots.push_back(std::move(s));
  }
  try {
    kernels::sgd_step(slots, h);
  } catch (...) {
    for (size_t i : fresh) state_[i].erase("momentum_buffer");  // the next step initialises it again
    throw;
  }
}

}  // namespace ember::optim
