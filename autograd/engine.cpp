// The backward engine (see engine.h for the execution order and why).
#include <ember/autograd/engine.h>

#include <queue>
#include <unordered_map>

#include <ember/autograd/grad_mode.h>
#include <ember/core/record.h>
#include <ember/kernels/elementwise.h>

namespace ember::autograd {

namespace {

struct NodeTask {
  int64_t pending = 0;  // edges into this node not yet delivered
  TensorList grads;  // one summed gradient per output of the node
};

// Callbacks of the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// Installs a pass's callback list for its duration (a nested backward, e.g. one run from a hook,
// gets its own list and restores the outer one).
class CallbackScope {
 public:
  explicit CallbackScope(std::vector<std::function<void()>>* list) : saved_(t_callbacks) { t_callbacks = list; }
  ~CallbackScope() { t_callbacks = saved_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  std::vector<std::function<void()>>* saved_;
};

// Ready-queue order: accumulators first, then the most recently created node.
struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const {
    if (a->is_accumulator() != b->is_accumulator()) return b->is_accumulator();
    return a->sequence_nr < b->sequence_nr;
  }
};

void add_into(Tensor& slot, Tensor g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = std::move(g);
  } else {
    // Out of place: either operand may be shared (e.g. AddBackward hands the same tensor to both
    // inputs), so neither may be written.
    slot = kernels::binary(kernels::BinaryOp::Add, slot, g);
  }
}

}  // namespace

void run_backward(const std::vector<Edge>& roots, std::vector<Tensor> grads, bool retain_graph) {
  EMBER_ASSERT(roots.size() == grads.size(), "run_backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;
  std::vector<std::function<void()>> callbacks;
  CallbackScope callback_scope(&callbacks);

  // 1. Discover the graph reachable from the roots and count the edges into each node.
  std::unordered_map<Node*, NodeTask> tasks;
  std::vector<Node*> stack;
  for (const Edge& r : roots) {
    if (!r.valid()) continue;
    auto [it, fresh] = tasks.try_emplace(r.node.get());
    if (fresh) stack.push_back(r.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [it, fresh] = tasks.try_emplace(e.node.get());
      ++it->second.pending;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  // 2. Seed the roots' gradient slots.
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].valid()) continue;
    NodeTask& t = tasks[roots[i].node.get()];
    t.grads.resize(roots[i].node->num_outputs);
    add_into(t.grads[roots[i].input_nr], std::move(grads[i]));
  }

  // 3. Run nodes in dependency order. Nodes stay alive through the roots' edges for the whole pass.
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (const Edge& r : roots) {
    if (!r.valid()) continue;
    NodeTask& t = tasks[r.node.get()];
    if (t.pending == 0) {
      t.pending = -1;  // queued
      ready.push(r.node.get());
    }
  }
  std::vector<std::shared_ptr<Node>> keep_alive;  // roots, in case a hook drops the last handle
  for (const Edge& r : roots)
    if (r.valid()) keep_alive.push_back(r.node);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    NodeTask& task = tasks[node];
    TensorList in = std::move(task.grads);
    in.resize(node->num_outputs);
    const Tensor* first = nullptr;  // the first gradient that reached the node
    for (const Tensor& g : in)
      if (g.defined()) {
        first = &g;
        break;
      }

    TensorList out;
    if (first != nullptr) {
      profiler::RecordScope profile_scope(node->name(), profiler::Category::backward);
      profile_scope.inputs(*first);  // its device and stream: the node's GPU time while profiling
      out = node->apply(std::move(in));
      EMBER_CHECK(node->is_accumulator() || out.size() == node->next_edges.size(), "backward: node ", node->name(),
                  " returned ", out.size(), " gradients for ", node->next_edges.size(), " inputs");
    } else if (node->is_accumulator()) {
      // The leaf is in the graph but no gradient reached it; its hooks still fire (DDP counts them).
      static_cast<AccumulateGrad*>(node)->fire_hooks();
    }
    if (!retain_graph) node->release_saved();

    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      NodeTask& next = tasks[e.node.get()];
      if (i < out.size() && out[i].defined()) {
        if (next.grads.empty()) next.grads.resize(e.node->num_outputs);
        add_into(next.grads[e.input_nr], std::move(out[i]));
      }
      if (--next.pending == 0) {
        next.pending = -1;
        ready.push(e.node.get());
      }
    }
  }

  // 4. End-of-pass callbacks (by index: a callback may queue more).
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> fn = std::move(callbacks[i]);
    fn();
  }
}

void queue_callback(std::function<void()> fn) {
  EMBER_CHECK(t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread");
  EMBER_CHECK(fn != nullptr, "queue_callback: empty function");
  t_callbacks->push_back(std::move(fn));
}

bool in_backward() { return t_callbacks != nullptr; }

}  // namespace ember::autograd
