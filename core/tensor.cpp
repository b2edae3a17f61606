// The core (metadata-only) part of Tensor. Computing members live in autograd/tensor_methods.cpp.
#include <ember/core/tensor.h>

#include <ostream>

namespace ember {

int64_t Tensor::size(int64_t dim) const { return sizes()[wrap_dim(dim, this->dim())]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[wrap_dim(dim, this->dim())]; }

bool Tensor::is_contiguous() const {
  const TensorImpl* t = impl();
  if (numel_of(t->sizes) == 0) return true;  // no element to be out of place
  int64_t expected = 1;
  for (size_t i = t->sizes.size(); i-- > 0;) {
    if (t->sizes[i] == 1) continue;
    if (t->strides[i] != expected) return false;
    expected *= t->sizes[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  return format == MemoryFormat::contiguous ? is_contiguous() : has_layout(sizes(), strides(), format);
}

MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() != 4 || !is_contiguous(MemoryFormat::channels_last)) return MemoryFormat::contiguous;
  if (!is_contiguous()) return MemoryFormat::channels_last;
  // Both layouts at once (C == 1, or H == W == 1): the strides of the size-1 dims, which address
  // nothing, tell which layout made the tensor.
  const Shape& st = strides();
  return st == strides_for(sizes(), MemoryFormat::channels_last) && st != contiguous_strides(sizes())
             ? MemoryFormat::channels_last
             : MemoryFormat::contiguous;
}

void* Tensor::data_ptr() const {
  const TensorImpl* t = impl();
  return static_cast<char*>(t->storage.data()) + t->offset * static_cast<int64_t>(dtype_size(t->dtype));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

Tensor empty(const Shape& sizes, const TensorOptions& options, MemoryFormat format) {
  for (int64_t s : sizes) EMBER_CHECK(s >= 0, "empty: negative size in shape ", shape_str(sizes));
  const DType dtype = options.dtype_or(DType::f32);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(static_cast<size_t>(numel_of(sizes)) * dtype_size(dtype), options.device_or(Device::cpu()));
  impl->sizes = sizes;
  impl->strides = strides_for(sizes, format);
  impl->dtype = dtype;
  Tensor t(std::move(impl));
  if (options.requires_grad) t.requires_grad_();
  return t;
}

Tensor empty(const Shape& sizes, const TensorOptions& options) {
  return empty(sizes, options, MemoryFormat::contiguous);
}

TensorOptions options_like(const Tensor& like, const TensorOptions& options) {
  return {.dtype = options.dtype_or(like.dtype()),
          .device = options.device_or(like.device()),
          .requires_grad = options.requires_grad};
}

Tensor empty_like(const Tensor& like, const TensorOptions& options) {
  return empty(like.sizes(), options_like(like, options), like.suggest_memory_format());
}

Tensor as_strided_raw(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  EMBER_CHECK(sizes.size() == strides.size(), "as_strided: ", sizes.size(), " sizes but ", strides.size(), " strides");
  int64_t max_off = offset;
  bool empty_view = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EMBER_CHECK(sizes[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride in ", shape_str(sizes), " / ",
                shape_str(strides));
    if (sizes[i] == 0) empty_view = true;
    else max_off += (sizes[i] - 1) * strides[i];
  }
  const int64_t capacity = static_cast<int64_t>(base.storage().nbytes() / base.element_size());
  EMBER_CHECK(offset >= 0 && (empty_view || max_off < capacity), "as_strided: view of size ", shape_str(sizes),
              " strides ", shape_str(strides), " offset ", offset, " exceeds storage of ", capacity, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

}  // namespace ember
