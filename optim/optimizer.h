#pragma once
// Optimizer: the base of SGD, Adam and AdamW. It holds the parameter tensors (handles sharing
// the model's TensorImpls, so Module::to() moving them in place is followed), the
// hyperparameters by name, and per-parameter state tensors by name.
//
// State dict layout (every value a tensor, so checkpoints store it like model weights):
//   "hyper.<name>"        0-d f64: each hyperparameter ("hyper.lr", "hyper.momentum", ...;
//                         booleans such as nesterov as 0 or 1)
//   "param_count"         0-d i64: number of parameters, checked on load
//   "state.<i>.<name>"    state of parameter i (position in the list given to the constructor):
//                         buffers of the parameter's shape and dtype, step counts as 0-d i64
// A parameter that has not been updated yet has no state entries. load_state_dict() checks
// every key (missing, unexpected, wrong shape or parameter index out of range: an error naming
// the key) before changing anything, then restores hyperparameters and state exactly, so steps
// continue bit for bit as in an uninterrupted run.
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/state_dict.h>
#include <ember/core/tensor.h>

namespace ember::optim {

class Optimizer {
 public:
  /// params: leaf tensors of dtype f32 or f64 (any device), each at most once. Parameters without
  /// a gradient at step() time are skipped (their state is untouched), as in PyTorch.
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Short type name ("SGD", "Adam", "AdamW") for messages.
  virtual std::string name() const = 0;
  /// Updates every parameter that has a gradient (one fused pass per device), under NoGradGuard.
  virtual void step() = 0;

  /// Clears the gradients. set_to_none (the default, as in PyTorch): each .grad() becomes
  /// undefined, freeing it, and the next backward writes a fresh one; otherwise existing
  /// gradients are zeroed in place.
  void zero_grad(bool set_to_none = true);

  /// Learning rate used by the next step (schedules set it).
  double lr() const { return hyper_.at("lr"); }
  void set_lr(double lr);
  /// A hyperparameter by name ("lr", "momentum", "beta1", ...); an unknown name is an error
  /// listing the known ones.
  double hyperparameter(const std::string& name) const;

  const std::vector<Tensor>& params() const { return params_; }
  /// State tensors of parameter i by name (empty until its first update).
  const std::map<std::string, Tensor>& state(size_t i) const;

  /// See the top of this file. Tensors are detached copies: later steps do not change them.
  /// Virtual so that an optimizer whose state lives elsewhere (parallel::ZeroRedundancyOptimizer,
  /// whose state is sharded over ranks) cannot be checkpointed wrongly through an Optimizer&.
  virtual StateDict state_dict() const;
  /// Restores a state_dict() of an optimizer of the same type over the same parameter shapes.
  /// State is copied to each parameter's device and dtype (step counts stay on the CPU).
  virtual void load_state_dict(const StateDict& state);

 protected:
  /// Declares a hyperparameter (subclass constructors; "lr" is declared by the base).
  void add_hyperparameter(const std::string& name, double value);
  /// Names of the state tensors each updated parameter carries; a parameter's state holds all
  /// of them or none. "step" is a 0-d i64 CPU tensor, every other one has the parameter's shape.
  virtual std::vector<std::string> state_names() const = 0;
  /// State tensor `name` of parameter i, created by make() on first use and moved to the
  /// parameter's device/dtype if the parameter moved since (Module::to after construction).
  Tensor& state_tensor(size_t i, const std::string& name, bool& created);
  /// A new step counter (0-d i64 on the CPU, value 0).
  static Tensor new_step_counter();

  std::vector<Tensor> params_;
  std::vector<std::map<std::string, Tensor>> state_;

 private:
  std::map<std::string, double> hyper_;
};

}  // namespace ember::optim
