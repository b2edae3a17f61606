#pragma once
// Copy (with dtype cast and arbitrary strides), fill, and cross-device transfer.
#include <cstddef>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// dst[...] = src[...] (cast to dst's dtype). src is broadcast to dst's shape; the devices may
/// differ (the transfer goes through a contiguous staging copy). Synchronous for cross-device.
void copy(const Tensor& dst, const Tensor& src);
/// Every element of dst (any strides) set to value, cast to dst's dtype.
void fill(const Tensor& dst, double value);
/// A contiguous copy of src with the given dtype on src's device (kernels rely on the row-major
/// result; Tensor::to(DType) keeps a channels-last layout instead).
Tensor cast(const Tensor& src, DType dtype);
/// A copy of src with the given dtype on src's device, laid out as `format` (no autograd).
Tensor cast(const Tensor& src, DType dtype, MemoryFormat format);
/// True when two elements of `t` share one memory location (a dim of stride 0 and size > 1, as
/// expand() makes). Writing into such a view has no single answer (CPU and GPU would differ), so
/// copy and index_add refuse it.
bool has_internal_overlap(const Tensor& t);
/// A new copy of x on x's device laid out as `format`, with its strides exactly (no autograd).
Tensor copy_in_layout(const Tensor& x, MemoryFormat format);
/// x itself when contiguous, else a contiguous copy on x's device (no autograd).
Tensor contiguous_raw(const Tensor& x);
/// x itself when laid out as `format` (for channels_last: as suggest_memory_format() reads it),
/// else a copy that is (no autograd).
Tensor dense_raw(const Tensor& x, MemoryFormat format);
/// A row-major view of contiguous x's elements with new sizes (same numel; no autograd).
Tensor raw_view(const Tensor& x, const Shape& sizes);

// ---- implementation signatures ----
/// Same device, same shape; any dtypes (cast on the fly), any strides on both sides.
using CopyFn = void(const Tensor& src, const Tensor& dst);
using FillFn = void(const Tensor& dst, double value);
/// Raw bytes between devices; one side is the CPU or both are CUDA. Registered under CUDA.
using TransferFn = void(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

extern DispatchTable<CopyFn> copy_table;
extern DispatchTable<FillFn> fill_table;
extern DispatchTable<TransferFn> transfer_table;

}  // namespace ember::kernels
