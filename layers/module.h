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
  /// Lays out every 4-D parameter and buffer (a convolution's weight) as `format`, in place as
  /// above; the others keep theirs. With channels_last, feed the model channels-last inputs
  /// (x.contiguous(MemoryFormat::channels_last)) too.
  Module& to(MemoryFormat format);
  /// Clears the .grad() of every parameter.
  void zero_grad();

  /// Parameters and buffers by dotted name (detached views; saving them copies nothing).
  StateDict state_dict() const;
  /// Copies values into the existing parameters/buffers (any device/dtype is converted). A
  /// missing, unexpected or mis-shaped entry is an error naming it (and both shapes) — nothing
  /// is modified unless every entry matches.
  void load_state_dict(const StateDict& state);

  // ---- replication (DataParallel builds its replicas with these) ----

  /// A new module of the same type and configuration, freshly constructed: the values of its
  /// parameters and buffers are irrelevant (clone() overwrites them) and constructing it must not
  /// advance the default generator (built-in layers initialise from a local scratch Generator).
  /// Containers clone their children's structure. The default throws an error naming name(): a
  /// user module overrides it to be usable with DataParallel.
  virtual std::shared_ptr<Module> clone_structure() const;
  /// A deep copy sharing nothing with this module: clone_structure(), then every parameter and
  /// buffer copied into storage of its own (same values, dtype and device per tensor; parameters
  /// stay leaves with this module's requires_grad), and every module's training mode copied.
  /// Gradients are not copied. Weight tying is not preserved: a structure whose parameter names
  /// differ from this module's is an error naming both lists' sizes.
  std::shared_ptr<Module> clone() const;
  /// Replication hook, for DataParallel only: points parameter i (in parameters() order) at
  /// values[i] for the next forward. Each parameter's TensorImpl takes the value's storage and
  /// geometry and, when the value is the output of an op (not a leaf), its autograd record, so
  /// the handles layers keep (Linear's weight_) act as that value in the graph and the gradient
  /// flows back through the op that made it (DataParallel's Broadcast). A leaf value is bound as a
  /// plain tensor (no autograd). Shapes must match (checked for all before any is bound). The
  /// TensorImpls are rewritten in place, so a graph recorded through the previous binding would
  /// see the new values: DataParallel rebinds only replicas that no live graph holds.
  void bind_parameters_for_replica(const std::vector<Tensor>& values);

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

/// Sets the training mode of every module of `to` to that of its counterpart in `from`, which
/// must have the same structure (a clone): DataParallel passes per-module modes (a BatchNorm put
/// in eval mode inside a training model) on to its replicas.
void copy_training_modes(const Module& from, Module& to);

}  // namespace ember::layers
