#pragma once
// Graph nodes. A Node is one recorded differentiable op: the edges to the nodes that produced its
// inputs, plus a backward closure (written next to the op's forward, see autograd/function.h)
// mapping the gradients of its outputs to the gradients of its inputs.
//
// Saved tensors live in the closure's captures; the engine drops the closure after running the
// node unless retain_graph is set, so memory is released as backward proceeds. Running a node
// whose closure was dropped is the "freed graph" error.
//
// Ownership: an output tensor's AutogradMeta holds its grad_fn; a node holds its input nodes
// through next_edges. Saved *outputs* must be stored detached (see autograd/function.h), or
// node -> output -> meta -> node would be a cycle.
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <ember/autograd/meta.h>
#include <ember/core/tensor.h>

namespace ember::autograd {

using TensorList = std::vector<Tensor>;

class Node;

/// Where an input's gradient goes: output `input_nr` of `node` (null node: no gradient needed).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

/// Message of the error raised when backward reaches a node whose saved state was freed.
extern const char* const kFreedGraphMessage;

class Node {
 public:
  Node();
  /// Iterative teardown: long chains of nodes are freed without deep recursion.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// "MulBackward", ... (for errors and debugging).
  virtual const char* name() const = 0;
  /// grads: one entry per output of this node (undefined where no gradient reached that output;
  /// the engine never calls apply with all entries undefined). Returns one gradient per entry of
  /// next_edges (undefined where there is none), each of that input's shape.
  virtual TensorList apply(TensorList&& grads) = 0;
  /// Drops saved tensors; a later apply() must fail with kFreedGraphMessage.
  virtual void release_saved() {}
  /// True for the AccumulateGrad node of a leaf (the engine runs those as soon as they are ready).
  virtual bool is_accumulator() const { return false; }

  /// One edge per differentiable input of the op, in the op's argument order.
  std::vector<Edge> next_edges;
  /// How many outputs the op has (one gradient slot per output).
  uint32_t num_outputs = 1;
  /// Creation order (process-wide); backward runs later nodes first.
  uint64_t sequence_nr;
};

/// A node whose backward is a closure. F is called as
///   F(const Tensor& grad) -> TensorList          (single-output ops; grad is always defined), or
///   F(const TensorList& grads) -> TensorList     (multi-output ops; entries may be undefined).
template <typename F> class ClosureNode final : public Node {
 public:
  ClosureNode(const char* name, F&& fn) : name_(name), fn_(std::move(fn)) {}
  ClosureNode(const char* name, const F& fn) : name_(name), fn_(fn) {}
  const char* name() const override { return name_; }
  TensorList apply(TensorList&& grads) override {
    EMBER_CHECK(fn_.has_value(), kFreedGraphMessage, " (node ", name_, ")");
    if constexpr (std::is_invocable_v<F&, const Tensor&>) {
      return (*fn_)(grads[0]);
    } else {
      return (*fn_)(grads);
    }
  }
  void release_saved() override { fn_.reset(); }

 private:
  const char* name_;
  std::optional<F> fn_;
};

/// Accumulates the gradient reaching a leaf into leaf.grad() (+=, in place once it exists; a new
/// tensor on first accumulation, never aliasing the incoming buffer), then fires the leaf's
/// grad-accumulated hooks. Runs once per backward pass per leaf.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  const char* name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  bool is_accumulator() const override { return true; }
  /// Fires the hooks without accumulating (the engine calls this when no gradient arrived).
  void fire_hooks() const;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

/// The edge an op's input contributes: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

}  // namespace ember::autograd
