#pragma once
// Module: the base of every layer and model. A module owns named parameters (tensors that require
// grad and that optimizers update), named buffers (state that is saved but not trained, e.g.
// BatchNorm's running statistics) and named child modules, all in registration order.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/state_dict.h>
#include <ember/core/tensor.h>

namespace ember::layers {

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The layer's computation. Shapes are documented per layer.
  virtual Tensor forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input) { return forward(input); }
  /// Short type name, e.g. "Conv2d" (used in printing and error messages).
  virtual std::string name() const = 0;

  /// All parameters of this module and its children, depth first, in registration order.
  std::vector<Tensor> parameters() const;
  /// Same order, with dotted names ("features.0.weight").
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;

  /// Training mode (affects Dropout and BatchNorm); applies to all children.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer (and children's) to `device`, keeping parameter identity
  /// semantics: a parameter stays a leaf that requires grad. Returns *this.
  /// Each tensor's TensorImpl is updated in place, so handles copied earlier (a layer's weight_
  /// member, an optimizer's parameter list) follow the move.
  Module& to(Device device);
  /// Casts floating parameters and buffers to `dtype`.
  Module& to(DType dtype);
  /// Clears the .grad() of every parameter.
  void zero_grad();

  /// Parameters and buffers by dotted name (detached views; saving them copies nothing).
  StateDict state_dict() const;
  /// Copies values into the existing parameters/buffers (any device/dtype is converted). A
  /// missing, unexpected or mis-shaped entry is an error naming it (and both shapes) — nothing
  /// is modified unless every entry matches.
  void load_state_dict(const StateDict& state);

  /// One line per module, indented by depth, like PyTorch's repr.
  std::string str() const;
  /// Extra text inside the parentheses of str(), e.g. "1, 32, kernel_size=3".
  virtual std::string extra_repr() const { return ""; }

 protected:
  /// Registers a parameter (sets requires_grad) and returns it. Names must be unique per module.
  /// The returned reference is invalidated by the next registration: keep a copy of the handle.
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // Registration order is kept; lookups are linear (modules hold few entries).
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace ember::layers
