#pragma once
// The backward engine: dependency-counted topological execution of the graph from the roots.
//
// Order: a node runs once every edge into it has delivered (gradients for one output are summed);
// among ready nodes, AccumulateGrad nodes run first (so a leaf's grad-accumulated hooks fire the
// moment its gradient is final: DDP launches bucket all-reduces from them), then the most recently
// created node. Backward closures run with grad mode off. Without retain_graph, each node's saved
// state is dropped right after it runs.
#include <functional>
#include <vector>

#include <ember/autograd/node.h>
#include <ember/core/tensor.h>

namespace ember::autograd {

/// Runs backward from roots[i] (an edge, see gradient_edge) seeded with grads[i].
void run_backward(const std::vector<Edge>& roots, std::vector<Tensor> grads, bool retain_graph);

/// Queues `fn` to run on this thread once the backward pass now running has executed every node,
/// before backward() returns (PyTorch's queue_callback). Callbacks run in the order queued; one may
/// queue another. Only valid from inside a backward pass (a hook or a node); anywhere else it is an
/// error. If a node throws, the pass ends and its callbacks are dropped, not run. DDP's reducer
/// finishes its last bucket and finds unused parameters in one.
void queue_callback(std::function<void()> fn);
/// True while a backward pass runs on this thread.
bool in_backward();

}  // namespace ember::autograd
