#pragma once
// The autograd record a TensorImpl carries (TensorImpl::autograd; null for plain tensors).
//
// A tensor takes part in autograd when requires_grad is set. A non-leaf (the output of a
// differentiable op) has grad_fn set and names which output of that node it is; a leaf that
// requires grad gets its gradient accumulated into `grad` by an AccumulateGrad node that is
// created on first use in a graph and cached here weakly (so every use of the leaf in one graph
// shares one node, which is what makes its gradient "final" exactly once per backward pass).
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::autograd {

class Node;

/// Called with the leaf tensor once its .grad() is final for the current backward pass.
using GradAccumulatedHook = std::function<void(const Tensor& leaf)>;

struct AutogradMeta {
  bool requires_grad = false;
  /// Accumulated gradient of a leaf (same shape, dtype and device as the leaf).
  Tensor grad;
  /// The node that produced this tensor; null for leaves.
  std::shared_ptr<Node> grad_fn;
  /// Which output of grad_fn this tensor is.
  uint32_t output_nr = 0;
  /// The leaf's AccumulateGrad node while some graph holds it.
  std::weak_ptr<Node> grad_accumulator;
  /// Post-accumulate hooks of a leaf, with the handles register_grad_accumulated_hook returned.
  std::vector<std::pair<int64_t, GradAccumulatedHook>> grad_accumulated_hooks;
  int64_t next_hook_handle = 1;
};

/// The meta of t, or null (t may be undefined).
inline AutogradMeta* meta_of(const Tensor& t) { return t.defined() ? t.impl_ptr()->autograd.get() : nullptr; }
/// True when t is defined and requires grad (leaf or not); does not look at grad mode.
inline bool tensor_requires_grad(const Tensor& t) {
  const AutogradMeta* m = meta_of(t);
  return m != nullptr && m->requires_grad;
}
/// The meta of t, created (requires_grad false) when absent.
AutogradMeta& ensure_meta(const Tensor& t);

}  // namespace ember::autograd
