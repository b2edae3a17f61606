#pragma once
// Internal (CUDA builds): the reduction of the ring all-reduce over NCCL, on the GPU. Declared
// without CUDA types so plain C++ sources can call it; defined in parallel/cuda/ring_reduce.cu.
#include <cstdint>

#include <ember/core/dtype.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel::cuda_ring {

/// dst[i] = op(dst[i], src[i]) for `n` elements of `dtype`, queued on `stream` (a cudaStream_t).
/// avg reduces like sum (the division happens once, at the end).
void reduce(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op, void* stream);
/// data[i] /= divisor for `n` elements, queued on `stream` (integers truncate).
void divide(void* data, int64_t n, int64_t divisor, DType dtype, void* stream);

}  // namespace ember::parallel::cuda_ring
