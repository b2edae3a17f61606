// Front functions of copy, fill and cast: shape and device checks, broadcasting, aliasing and the
// cross-device staging path. The per-device work is in kernels/cpu/copy.cpp and kernels/cuda/copy.cu.
#include <ember/kernels/copy.h>

#include <ember/kernels/expand.h>

namespace ember::kernels {

DispatchTable<CopyFn> copy_table("copy");
DispatchTable<FillFn> fill_table("fill");
DispatchTable<TransferFn> transfer_table("transfer");

namespace {

bool overlaps(const Tensor& a, const Tensor& b) {
  // Conservative: any two views of one storage may overlap. Only used to decide whether to stage.
  return a.storage().is_same(b.storage()) && a.storage().defined();
}

// Moves a tensor's elements to `device` without casting or broadcasting: a dense copy of src on its
// own device (row-major, or channels-last when src is), then raw bytes across. Result: that layout,
// src's shape and dtype, on `device`.
Tensor transfer_dense(const Tensor& src, Device device) {
  const MemoryFormat format = src.suggest_memory_format();
  Tensor s = src;
  if (!s.is_contiguous(format)) {
    s = empty(src.sizes(), src.options(), format);
    copy_table(src.device(), src, s);
  }
  Tensor out = empty(src.sizes(), {.dtype = src.dtype(), .device = device}, format);
  const size_t nbytes = static_cast<size_t>(s.numel()) * s.element_size();
  if (nbytes > 0) {
    // The transfer implementation is registered under CUDA; either side being CUDA selects it.
    const Device key = device.is_cuda() ? device : src.device();
    transfer_table(key, out.data_ptr(), device, s.data_ptr(), src.device(), nbytes);
  }
  return out;
}

}  // namespace

bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  return false;
}

void copy(const Tensor& dst, const Tensor& src) {
  EMBER_CHECK(dst.defined() && src.defined(), "copy: ", dst.defined() ? "src" : "dst", " is undefined");
  EMBER_CHECK(broadcasts_to(src.sizes(), dst.sizes()), "copy: source of shape ", src.shape_str(),
              " cannot be broadcast to the destination shape ", dst.shape_str());
  EMBER_CHECK(!has_internal_overlap(dst), "copy: the destination (shape ", dst.shape_str(), ", strides ",
              shape_str(dst.strides()), ") has several elements in one memory location (an expanded view); ",
              "copy into a contiguous tensor instead");
  if (dst.numel() == 0) return;
  if (src.device() != dst.device()) {
    // Cross-device: move src's own elements (not the broadcast ones) over, then cast, broadcast and
    // scatter into dst's strides with a same-device copy on the destination side.
    copy(dst, transfer_dense(src, dst.device()));
    return;
  }
  Tensor s = expand_to(src, dst.sizes());
  if (overlaps(dst, src)) {
    // dst may be read after being written (x.copy_(x.t())): read everything first.
    if (dst.is_same(src)) return;
    Tensor tmp = empty(src.sizes(), src.options());
    copy_table(src.device(), src, tmp);
    s = expand_to(tmp, dst.sizes());
  }
  copy_table(dst.device(), s, dst);
}

void fill(const Tensor& dst, double value) {
  EMBER_CHECK(dst.defined(), "fill: destination is undefined");
  if (dst.numel() == 0) return;
  fill_table(dst.device(), dst, value);
}

Tensor cast(const Tensor& src, DType dtype) { return cast(src, dtype, MemoryFormat::contiguous); }

Tensor cast(const Tensor& src, DType dtype, MemoryFormat format) {
  EMBER_CHECK(src.defined(), "cast: source is undefined");
  Tensor out = empty(src.sizes(), {.dtype = dtype, .device = src.device()}, format);
  if (out.numel() > 0) copy_table(src.device(), src, out);
  return out;
}

Tensor copy_in_layout(const Tensor& x, MemoryFormat format) { return cast(x, x.dtype(), format); }

Tensor contiguous_raw(const Tensor& x) { return x.is_contiguous() ? x : copy_in_layout(x, MemoryFormat::contiguous); }

Tensor dense_raw(const Tensor& x, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return contiguous_raw(x);
  return x.suggest_memory_format() == format ? x : copy_in_layout(x, format);
}

Tensor raw_view(const Tensor& x, const Shape& sizes) {
  EMBER_ASSERT(x.is_contiguous() && numel_of(sizes) == x.numel(), "raw_view of ", x.shape_str(), " as ",
               shape_str(sizes));
  return as_strided_raw(x, sizes, contiguous_strides(sizes), x.offset());
}

}  // namespace ember::kernels
