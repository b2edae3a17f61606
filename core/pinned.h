#pragma once
// Internal (not part of the public API): page-locked host memory, for copies between the host and
// a GPU that run truly asynchronously. The data loader stages batches in it (data/transfer.h) and
// the TCP process group stages CUDA tensors in it (parallel/process_group_tcp.cpp).
// core/cuda/pinned.cpp defines these in CUDA builds; core/no_cuda.cpp otherwise.
#include <ember/core/tensor.h>

namespace ember::detail {

/// An uninitialized contiguous CPU tensor for data bound to `device`: page-locked memory
/// (cudaHostAlloc) from a process-wide cache in CUDA builds, so copies from it are truly
/// asynchronous; ordinary CPU memory in builds without CUDA. A first allocation runs with
/// `device` current, so a loader thread of a process that trains on cuda:3 does not create a
/// CUDA context on cuda:0 (the runtime's default), which would cost every rank memory there.
Tensor pinned_empty(const Shape& sizes, DType dtype, Device device);
/// True when `t`'s data lies in memory from pinned_empty (page-locked); false in builds without CUDA.
bool is_pinned(const Tensor& t);

}  // namespace ember::detail
