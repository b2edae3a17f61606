#pragma once
// Tensor: a strided view (sizes, strides, offset, all in elements) into a shared Storage, plus an
// optional autograd record. Copying a Tensor copies a handle; both handles name the same tensor.
//
// Layering: this header lives in core/, but the member functions that compute (views, copies,
// autograd) are *defined* in autograd/tensor_methods.cpp and kernels/print.cpp, which sit above
// core. Includes only ever point downward; the one library links all definitions together.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/dtype.h>
#include <ember/core/shape.h>
#include <ember/core/storage.h>
#include <ember/core/tensor_options.h>

namespace ember {

namespace autograd {
struct AutogradMeta;  // defined in autograd/meta.h
class Node;
}  // namespace autograd

/// The state behind a Tensor handle.
struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null for plain tensors
};

class Tensor {
 public:
  /// An undefined tensor (defined() is false); used for "no gradient" and optional arguments.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (core) ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl()->sizes; }
  const Shape& shape() const { return impl()->sizes; }
  const Shape& strides() const { return impl()->strides; }
  /// Size of `dim` (negative dims count from the end).
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl()->offset; }
  int64_t dim() const { return static_cast<int64_t>(impl()->sizes.size()); }
  int64_t numel() const { return numel_of(impl()->sizes); }
  DType dtype() const { return impl()->dtype; }
  Device device() const { return impl()->storage.device(); }
  size_t element_size() const { return dtype_size(dtype()); }
  /// This tensor's dtype and device, for making another like it: empty(sizes, t.options()).
  TensorOptions options() const { return {.dtype = dtype(), .device = device()}; }
  /// True when the elements are laid out row-major with no gaps (size-1 dims are ignored).
  bool is_contiguous() const;
  /// True when the elements are laid out as `format` says with no gaps (core/shape.h).
  bool is_contiguous(MemoryFormat format) const;
  /// channels_last when this is a 4-D tensor laid out channels-last, else contiguous: the layout a
  /// result computed from it should take. A tensor in both layouts at once (C == 1 or H == W == 1)
  /// is channels_last only when its strides are exactly channels-last's (it was made so).
  MemoryFormat suggest_memory_format() const;
  std::string shape_str() const { return ember::shape_str(sizes()); }
  const Storage& storage() const { return impl()->storage; }
  /// Address of element 0 (storage base + offset).
  void* data_ptr() const;
  /// Typed address of element 0; throws if T does not match dtype().
  template <typename T> T* data() const {
    EMBER_CHECK(dtype_of<T>() == dtype(), "data<", dtype_name(dtype_of<T>()), ">() on a tensor of dtype ",
                dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  TensorImpl* impl() const {
    EMBER_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return impl_.get();
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// Same TensorImpl (not merely equal values).
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- views (differentiable; share storage) ----
  Tensor view(const Shape& sizes) const;  // one size may be -1; needs compatible strides
  Tensor reshape(const Shape& sizes) const;  // a view when possible, else a copy
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& sizes) const;  // -1 keeps a size; new dims are prepended
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies and conversion (differentiable) ----
  Tensor contiguous() const;  // self when already contiguous
  /// Self when already laid out as `format` (and suggest_memory_format() says so), else a copy that
  /// is (differentiable).
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;  // keeps a channels-last layout (suggest_memory_format), else row-major
  Tensor to(Device device) const;  // self when already there
  Tensor to(DType dtype) const;  // self when already that dtype

  /// The single element as T (copies to host; throws unless numel() == 1).
  template <typename T> T item() const;
  /// All elements in row-major order as T (copies to host, casts).
  template <typename T> std::vector<T> to_vector() const;

  // ---- in-place (not differentiable; refuse leaves that require grad while grad mode is on) ----
  Tensor& zero_();
  Tensor& fill_(double value);
  /// Copies src (broadcast to this shape, any device/dtype) into this tensor's elements.
  Tensor& copy_(const Tensor& src);

  // ---- autograd ----
  Tensor& requires_grad_(bool on = true);
  bool requires_grad() const;
  /// True for tensors not produced by a differentiable op (user-created or detached).
  bool is_leaf() const;
  /// Accumulated gradient of a leaf (undefined until a backward pass reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  /// The node that produced this tensor (null for leaves).
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// Runs backpropagation from this tensor. `gradient` is required unless numel() == 1.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// A tensor sharing storage with this one but cut off from the graph.
  Tensor detach() const;
  /// Registers fn to run when this leaf's .grad() is final for the current backward pass
  /// (after accumulation). Returns a handle for remove_grad_accumulated_hook.
  int64_t register_grad_accumulated_hook(std::function<void(const Tensor& leaf)> fn) const;
  void remove_grad_accumulated_hook(int64_t handle) const;

  /// PyTorch-like text: tensor([[1., 2.], [3., 4.]], device='cuda:0', requires_grad=True)
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Uninitialized contiguous tensor (default f32 on the CPU).
Tensor empty(const Shape& sizes, const TensorOptions& options = {});
/// Uninitialized tensor laid out as `format` (channels_last needs 4 dims).
Tensor empty(const Shape& sizes, const TensorOptions& options, MemoryFormat format);
/// Uninitialized tensor of `like`'s shape and layout (like.suggest_memory_format()), with its dtype
/// and device unless options say otherwise.
Tensor empty_like(const Tensor& like, const TensorOptions& options = {});
/// `options` with its unset dtype and device taken from `like` (what the *_like factories use).
TensorOptions options_like(const Tensor& like, const TensorOptions& options);
/// A view of `base`'s storage with the given geometry (no autograd; bounds checked).
Tensor as_strided_raw(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);

// ---- template definitions ----
template <typename T> std::vector<T> Tensor::to_vector() const {
  Tensor c = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template <typename T> T Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape ", shape_str());
  return to_vector<T>()[0];
}

}  // namespace ember
