#pragma once
// Recording a differentiable op: the forward computes with kernels, then, only when some input
// requires grad and grad mode is on, hands the backward closure to record():
//
//   Tensor out = kernels::binary(kernels::BinaryOp::Mul, a, b);
//   if (autograd::needs_grad(a, b))
//     autograd::record(out, "MulBackward", [a, b](const Tensor& g) {
//       return autograd::TensorList{g * b, g * a};      // one gradient per input, in order
//     }, a, b);
//
// Closures run with grad mode off. They may capture inputs as they are, but an *output* must be
// captured through save_output(out) (a detached alias) to avoid a reference cycle.
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/meta.h>
#include <ember/autograd/node.h>
#include <ember/core/tensor.h>

namespace ember::autograd {

/// True when grad mode is on and some argument requires grad.
template <typename... Ts> inline bool needs_grad(const Ts&... inputs) {
  return GradMode::is_enabled() && (tensor_requires_grad(inputs) || ...);
}
inline bool needs_grad_list(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (tensor_requires_grad(t)) return true;
  return false;
}

/// A detached alias of an op's output, for closures that need it (see the header comment).
Tensor save_output(const Tensor& out);

/// Makes `out` output number `output_nr` of `node` (out must be freshly produced by the op; if it
/// already carries autograd state, e.g. an op returned its input, it is replaced by an alias).
void set_history(Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

/// Records a single-output op: out = op(inputs...); fn(const Tensor& grad) -> TensorList gives
/// one gradient per input (undefined where none). Returns the node.
template <typename F, typename... Ts>
std::shared_ptr<Node> record(Tensor& out, const char* name, F&& fn, const Ts&... inputs) {
  auto node = std::make_shared<ClosureNode<std::decay_t<F>>>(name, std::forward<F>(fn));
  node->next_edges.reserve(sizeof...(Ts));
  (node->next_edges.push_back(gradient_edge(inputs)), ...);
  set_history(out, node, 0);
  return node;
}

/// Records an op with any number of inputs and outputs; fn(const TensorList& grads) -> TensorList
/// receives one gradient per output (undefined where none reached it) and returns one per input.
template <typename F>
std::shared_ptr<Node> record_multi(std::vector<Tensor>& outs, const char* name, F&& fn,
                                   const std::vector<Tensor>& inputs) {
  static_assert(std::is_invocable_v<std::decay_t<F>&, const TensorList&>,
                "record_multi: the closure must take const TensorList& (one gradient per output)");
  auto node = std::make_shared<ClosureNode<std::decay_t<F>>>(name, std::forward<F>(fn));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->num_outputs = static_cast<uint32_t>(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) set_history(outs[i], node, static_cast<uint32_t>(i));
  return node;
}

/// Sums g (broadcast from `shape`) back down to `shape`: over leading extra dims and over dims
/// where `shape` has 1 and g does not. Returns g itself when the shapes already match.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace ember::autograd
