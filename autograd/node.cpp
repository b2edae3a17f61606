// Nodes, leaf accumulation, and the small helpers ops use to record themselves.
#include <ember/autograd/node.h>

#include <atomic>

#include <ember/autograd/function.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/reduce.h>

namespace ember::autograd {

const char* const kFreedGraphMessage =
    "backward through a graph whose saved tensors were freed; pass retain_graph=true to the first backward";

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// Nodes whose last owner is a node being destroyed are parked here and freed by the outermost
// destructor in a loop, so tearing down a graph of depth N costs O(1) stack instead of O(N).
thread_local std::vector<std::shared_ptr<Node>> t_pending_delete;
thread_local bool t_draining = false;

/// True when `g` is the only handle on a storage it fills exactly, laid out as the leaf's .grad
/// should be (`format`), in the leaf's dtype, and carries no graph of its own: then it can become
/// the leaf's .grad without a copy.
bool owns_whole_storage(const Tensor& g, const Tensor& leaf, MemoryFormat format) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.impl()->autograd &&
         g.dtype() == leaf.dtype() && g.offset() == 0 && g.is_contiguous(format) &&
         static_cast<size_t>(g.numel()) * g.element_size() == g.storage().nbytes();
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  for (Edge& e : next_edges)
    if (e.node && e.node.use_count() == 1) t_pending_delete.push_back(std::move(e.node));
  if (t_draining) return;
  t_draining = true;
  while (!t_pending_delete.empty()) {
    std::shared_ptr<Node> n = std::move(t_pending_delete.back());
    t_pending_delete.pop_back();
    n.reset();  // may push more nodes; the loop picks them up
  }
  t_draining = false;
}

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl()->autograd;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *slot;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  // Leaves run as soon as they are ready regardless of sequence_nr; keep it for debugging only.
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor leaf(leaf_);
  Tensor g = std::move(grads[0]);
  if (g.defined()) {
    EMBER_CHECK(g.sizes() == leaf.sizes(), "backward: gradient of shape ", g.shape_str(), " reached a leaf of shape ",
                leaf.shape_str());
    EMBER_CHECK(g.device() == leaf.device(), "backward: gradient on ", g.device().str(), " reached a leaf on ",
                leaf.device().str());
    AutogradMeta& m = ensure_meta(leaf);
    // .grad is laid out as its leaf (a channels-last weight gets a channels-last gradient, as the
    // fused optimizer steps walk both as one flat array).
    const MemoryFormat format = leaf.suggest_memory_format();
    if (!m.grad.defined() && owns_whole_storage(g, leaf, format)) {
      m.grad = std::move(g);  // a temporary nobody else holds: keep it rather than copy it
    } else if (!m.grad.defined()) {
      // A fresh buffer: the incoming gradient may be shared with other nodes or be a broadcast view.
      Tensor fresh = empty(leaf.sizes(), leaf.options(), format);
      kernels::copy(fresh, g);
      m.grad = std::move(fresh);
    } else {
      // += in place, so views of .grad() (e.g. DDP bucket views) see the sum.
      kernels::copy(m.grad, kernels::binary(kernels::BinaryOp::Add, m.grad, g));
    }
  }
  fire_hooks();
  return {};
}

void AccumulateGrad::fire_hooks() const {
  const AutogradMeta* m = leaf_->autograd.get();
  if (m == nullptr || m->grad_accumulated_hooks.empty()) return;
  // A copy, so a hook may register or remove hooks without invalidating the iteration.
  auto hooks = m->grad_accumulated_hooks;
  Tensor leaf(leaf_);
  for (auto& h : hooks) h.second(leaf);
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta_of(t);
  if (m == nullptr || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m->grad_accumulator = acc;
  }
  return {std::move(acc), 0};
}

Tensor save_output(const Tensor& out) { return out.detach(); }

void set_history(Tensor& out, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  if (out.impl()->autograd) out = out.detach();  // never overwrite another tensor's history
  auto m = std::make_shared<AutogradMeta>();
  m->requires_grad = true;
  m->grad_fn = node;
  m->output_nr = output_nr;
  out.impl()->autograd = std::move(m);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  EMBER_ASSERT(lead >= 0, "sum_to: gradient of shape ", g.shape_str(), " has fewer dims than ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < g.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else {
      const int64_t s = shape[i - lead];
      EMBER_ASSERT(s == g.size(i) || s == 1, "sum_to: gradient of shape ", g.shape_str(), " does not broadcast from ",
                   shape_str(shape));
      if (s == 1 && g.size(i) != 1) dims.push_back(i);
    }
  }
  Tensor r = dims.empty() ? g.contiguous() : kernels::reduce(kernels::ReduceOp::Sum, g, dims, false);
  return as_strided_raw(r, shape, contiguous_strides(shape), r.offset());
}

}  // namespace ember::autograd
