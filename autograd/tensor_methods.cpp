// Definitions of the computing members of ember::Tensor (declared in core/tensor.h): views, copies
// and conversions (all differentiable), in-place fills, and the autograd accessors.
//
// Views share storage through as_strided_raw; their backward closures map the gradient of the
// view (shape of the view) back to the shape of the base.
#include <algorithm>
#include <numeric>
#include <optional>

#include <ember/autograd/engine.h>
#include <ember/autograd/function.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/meta.h>
#include <ember/core/tensor.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::TensorList;

namespace {

// Strides that let a tensor of (sizes, strides) be viewed as new_sizes without a copy, or nullopt
// (the algorithm PyTorch uses: walk contiguous chunks of the old geometry from the innermost dim).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape out(new_sizes.size(), 1);
  if (numel_of(sizes) == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Resolves one -1 in `sizes` against numel; checks the element count.
Shape infer_size(const char* op, const Shape& sizes, int64_t numel, const Shape& from) {
  Shape out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dimension can be -1, got ", ember::shape_str(sizes));
      infer = static_cast<int64_t>(i);
    } else {
      EMBER_CHECK(out[i] >= 0, op, ": invalid size in ", ember::shape_str(sizes));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", ember::shape_str(sizes),
                " is invalid for a tensor of shape ", ember::shape_str(from), " (", numel, " elements)");
    out[infer] = numel / known;
  }
  EMBER_CHECK(numel_of(out) == numel, op, ": shape ", ember::shape_str(sizes), " is invalid for a tensor of shape ",
              ember::shape_str(from), " (", numel, " elements)");
  return out;
}

// Records a view/reshape-like op whose backward reshapes the gradient back to `in`'s shape.
void record_reshape(Tensor& out, const Tensor& in, const char* name) {
  if (!needs_grad(in)) return;
  record(
      out, name, [in_sizes = in.sizes()](const Tensor& g) { return TensorList{g.reshape(in_sizes)}; }, in);
}

void check_inplace(const Tensor& t, const char* op) {
  EMBER_CHECK(!(GradMode::is_enabled() && autograd::tensor_requires_grad(t)), op, ": in-place operation on a ",
              t.is_leaf() ? "leaf tensor" : "tensor", " of shape ", t.shape_str(),
              " that requires grad (in-place ops are not differentiable; wrap it in NoGradGuard, e.g. for optimizer "
              "updates, or use detach())");
}

}  // namespace

// ---- views ----

Tensor Tensor::view(const Shape& new_sizes_in) const {
  Shape new_sizes = infer_size("view", new_sizes_in, numel(), sizes());
  std::optional<Shape> st = view_strides(sizes(), strides(), new_sizes);
  EMBER_CHECK(st.has_value(), "view: size ", ember::shape_str(new_sizes), " is not compatible with the strides ",
              ember::shape_str(strides()), " of a tensor of shape ", ember::shape_str(sizes()),
              "; use reshape() instead");
  Tensor out = as_strided_raw(*this, new_sizes, *st, offset());
  record_reshape(out, *this, "ViewBackward");
  return out;
}

Tensor Tensor::reshape(const Shape& new_sizes_in) const {
  Shape new_sizes = infer_size("reshape", new_sizes_in, numel(), sizes());
  if (view_strides(sizes(), strides(), new_sizes).has_value()) return view(new_sizes);
  return contiguous().view(new_sizes);
}

Tensor Tensor::permute(const Shape& dims) const {
  const int64_t n = dim();
  EMBER_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims ", ember::shape_str(dims),
              " for a tensor of shape ", ember::shape_str(sizes()));
  Shape new_sizes(n), new_strides(n), inverse(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute: dim");
    EMBER_CHECK(inverse[d] < 0, "permute: dim ", dims[i], " repeated in ", ember::shape_str(dims));
    inverse[d] = i;
    new_sizes[i] = sizes()[d];
    new_strides[i] = strides()[d];
  }
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  if (needs_grad(*this))
    record(
        out, "PermuteBackward", [inverse](const Tensor& g) { return TensorList{g.permute(inverse)}; }, *this);
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const int64_t n = dim();
  d0 = wrap_dim(d0, n, "transpose: dim");
  d1 = wrap_dim(d1, n, "transpose: dim");
  Shape new_sizes = sizes(), new_strides = strides();
  std::swap(new_sizes[d0], new_sizes[d1]);
  std::swap(new_strides[d0], new_strides[d1]);
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  if (needs_grad(*this))
    record(
        out, "TransposeBackward", [d0, d1](const Tensor& g) { return TensorList{g.transpose(d0, d1)}; }, *this);
  return out;
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t(): expected a tensor with at most 2 dims, got shape ", ember::shape_str(sizes()));
  if (dim() < 2) return *this;
  return transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice: dim");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = sizes()[d];
  // Python semantics: negative indices count from the end, out-of-range bounds are clamped.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes[d] = (end - start + step - 1) / step;
  new_strides[d] = strides()[d] * step;
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset() + start * strides()[d]);
  if (needs_grad(*this)) {
    record(
        out, "SliceBackward",
        [in_sizes = sizes(), d, start, end, step](const Tensor& g) {
          Tensor gx = zeros(in_sizes, g.options());
          kernels::copy(gx.slice(d, start, end, step), g);
          return TensorList{gx};
        },
        *this);
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow: dim");
  const int64_t n = sizes()[d];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
              ") out of bounds for dim ", d, " of size ", n, " (shape ", ember::shape_str(sizes()), ")");
  return slice(d, start, start + length, 1);
}

Tensor Tensor::squeeze() const {
  Shape new_sizes, new_strides;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[i] == 1) continue;
    new_sizes.push_back(sizes()[i]);
    new_strides.push_back(strides()[i]);
  }
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  record_reshape(out, *this, "SqueezeBackward");
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze: dim");
  if (sizes()[d] != 1) return *this;
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes.erase(new_sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  record_reshape(out, *this, "SqueezeBackward");
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze: dim");
  Shape new_sizes = sizes(), new_strides = strides();
  const int64_t st = d < dim() ? sizes()[d] * strides()[d] : 1;
  new_sizes.insert(new_sizes.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, st);
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  record_reshape(out, *this, "UnsqueezeBackward");
  return out;
}

Tensor Tensor::expand(const Shape& target) const {
  const int64_t n = static_cast<int64_t>(target.size());
  EMBER_CHECK(n >= dim(), "expand: the target shape ", ember::shape_str(target), " has fewer dims than the tensor's ",
              ember::shape_str(sizes()));
  Shape new_sizes(n), new_strides(n);
  const int64_t lead = n - dim();
  for (int64_t i = 0; i < n; ++i) {
    if (i < lead) {
      EMBER_CHECK(target[i] >= 0, "expand: size -1 not allowed for a new leading dim in ", ember::shape_str(target));
      new_sizes[i] = target[i];
      new_strides[i] = 0;
      continue;
    }
    const int64_t s = sizes()[i - lead];
    const int64_t want = target[i] == -1 ? s : target[i];
    EMBER_CHECK(want == s || s == 1, "expand: cannot expand shape ", ember::shape_str(sizes()), " to ",
                ember::shape_str(target), " (dim ", i, ": ", s, " vs ", want, ")");
    new_sizes[i] = want;
    new_strides[i] = want == s ? strides()[i - lead] : 0;
  }
  if (new_sizes == sizes()) return *this;
  Tensor out = as_strided_raw(*this, new_sizes, new_strides, offset());
  if (needs_grad(*this)) {
    record(
        out, "ExpandBackward",
        [in_sizes = sizes()](const Tensor& g) { return TensorList{autograd::sum_to(g, in_sizes)}; }, *this);
  }
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten: start_dim");
  end_dim = wrap_dim(end_dim, dim(), "flatten: end_dim");
  EMBER_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " after end_dim ", end_dim);
  if (start_dim == end_dim) return *this;
  Shape new_sizes(sizes().begin(), sizes().begin() + start_dim);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m *= sizes()[i];
  new_sizes.push_back(m);
  new_sizes.insert(new_sizes.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(new_sizes);
}

// ---- copies and conversion ----

namespace {
/// A copy of t laid out as `format`; its gradient passes through unchanged.
Tensor copy_as(const Tensor& t, MemoryFormat format) {
  Tensor out = kernels::copy_in_layout(t, format);
  if (needs_grad(t))
    record(
        out, "CloneBackward", [](const Tensor& g) { return TensorList{g}; }, t);
  return out;
}
}  // namespace

Tensor Tensor::contiguous() const { return contiguous(MemoryFormat::contiguous); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous ? is_contiguous() : suggest_memory_format() == format) return *this;
  return copy_as(*this, format);
}

Tensor Tensor::clone() const { return copy_as(*this, suggest_memory_format()); }

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = empty(sizes(), {.dtype = dtype(), .device = dev}, suggest_memory_format());
  kernels::copy(out, *this);
  if (needs_grad(*this)) {
    record(
        out, "ToDeviceBackward", [src = device()](const Tensor& g) { return TensorList{g.to(src)}; }, *this);
  }
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(sizes(), {.dtype = dt, .device = device()}, suggest_memory_format());
  kernels::copy(out, *this);
  // Only floating results carry gradients (an integer or boolean cast cuts the graph).
  if (is_floating(dt) && needs_grad(*this)) {
    record(
        out, "ToDTypeBackward", [src = dtype()](const Tensor& g) { return TensorList{g.to(src)}; }, *this);
  }
  return out;
}

// ---- in place ----

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  kernels::fill(*this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  kernels::copy(*this, src);
  return *this;
}

// ---- autograd ----

Tensor& Tensor::requires_grad_(bool on) {
  autograd::AutogradMeta* m = autograd::meta_of(*this);
  EMBER_CHECK(m == nullptr || !m->grad_fn || on,
              "requires_grad_(false): only leaf tensors can stop requiring grad (use detach() on a tensor of shape ",
              ember::shape_str(sizes()), " produced by ", m ? (m->grad_fn ? m->grad_fn->name() : "") : "", ")");
  if (!on && m == nullptr) return *this;
  EMBER_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got dtype ",
              dtype_name(dtype()), " (shape ", ember::shape_str(sizes()), ")");
  autograd::ensure_meta(*this).requires_grad = on;
  return *this;
}

bool Tensor::requires_grad() const { return autograd::tensor_requires_grad(*this); }

bool Tensor::is_leaf() const {
  const autograd::AutogradMeta* m = autograd::meta_of(*this);
  return m == nullptr || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const autograd::AutogradMeta* m = autograd::meta_of(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    EMBER_CHECK(g.sizes() == sizes(), "set_grad: gradient of shape ", g.shape_str(), " for a tensor of shape ",
                ember::shape_str(sizes()));
    EMBER_CHECK(g.device() == device(), "set_grad: gradient on ", g.device().str(), " for a tensor on ",
                device().str());
    EMBER_CHECK(g.dtype() == dtype(), "set_grad: gradient of dtype ", dtype_name(g.dtype()), " for a tensor of dtype ",
                dtype_name(dtype()));
  } else if (autograd::meta_of(*this) == nullptr) {
    return;
  }
  autograd::ensure_meta(*this).grad = g;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const autograd::AutogradMeta* m = autograd::meta_of(*this);
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  EMBER_CHECK(requires_grad(), "backward: the tensor of shape ", ember::shape_str(sizes()),
              " does not require grad and has no grad_fn (did a leaf miss requires_grad_(), or was it computed "
              "under NoGradGuard?)");
  Tensor g;
  if (!gradient.defined()) {
    EMBER_CHECK(numel() == 1, "backward: a gradient is required for a non-scalar tensor of shape ",
                ember::shape_str(sizes()), " (only tensors with one element get an implicit gradient of 1)");
    g = ones(sizes(), options());
  } else {
    EMBER_CHECK(gradient.sizes() == sizes(), "backward: gradient of shape ", gradient.shape_str(),
                " does not match the tensor's shape ", ember::shape_str(sizes()));
    EMBER_CHECK(gradient.device() == device(), "backward: gradient on ", gradient.device().str(),
                " but the tensor is on ", device().str());
    NoGradGuard no_grad;
    g = gradient.detach().to(dtype());
  }
  autograd::run_backward({autograd::gradient_edge(*this)}, {std::move(g)}, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl* src = impl();
  auto out = std::make_shared<TensorImpl>();
  out->storage = src->storage;
  out->sizes = src->sizes;
  out->strides = src->strides;
  out->offset = src->offset;
  out->dtype = src->dtype;
  return Tensor(std::move(out));
}

int64_t Tensor::register_grad_accumulated_hook(std::function<void(const Tensor& leaf)> fn) const {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_grad_accumulated_hook: expected a leaf tensor that requires "
              "grad, got a ",
              is_leaf() ? "leaf that does not require grad" : "non-leaf", " of shape ", ember::shape_str(sizes()));
  EMBER_CHECK(fn != nullptr, "register_grad_accumulated_hook: empty function");
  autograd::AutogradMeta& m = autograd::ensure_meta(*this);
  const int64_t h = m.next_hook_handle++;
  m.grad_accumulated_hooks.emplace_back(h, std::move(fn));
  return h;
}

void Tensor::remove_grad_accumulated_hook(int64_t handle) const {
  autograd::AutogradMeta* m = autograd::meta_of(*this);
  EMBER_CHECK(m != nullptr, "remove_grad_accumulated_hook: no hooks on this tensor of shape ",
              ember::shape_str(sizes()));
  auto& hooks = m->grad_accumulated_hooks;
  auto it = std::find_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.first == handle; });
  EMBER_CHECK(it != hooks.end(), "remove_grad_accumulated_hook: unknown handle ", handle);
  hooks.erase(it);
}

}  // namespace ember
