// The ring all-reduce's GPU reduction (see ring_reduce.h). One elementwise pass over a received
// slice: memory-bound, so a plain grid-stride loop over a capped grid with 64-bit indices; the
// half types are combined in float and rounded once per step, like the host reducer.
#include <ember/parallel/cuda/ring_reduce.h>

#include <ember/core/cuda_check.h>
#include <ember/kernels/cuda/common.cuh>

namespace ember::parallel::cuda_ring {

namespace {

using kernels::cuda::acc_t;
using kernels::cuda::grid_for;
using kernels::cuda::kBlock;

template <typename T, ReduceOp Op>
__global__ void reduce_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const acc_t<T> a = static_cast<acc_t<T>>(dst[i]), b = static_cast<acc_t<T>>(src[i]);
    if constexpr (Op == ReduceOp::max) {
      dst[i] = T(a > b ? a : b);
    } else if constexpr (Op == ReduceOp::min) {
      dst[i] = T(a < b ? a : b);
    } else {
      dst[i] = T(a + b);
    }
  }
}

template <typename T> __global__ void divide_kernel(T* data, int64_t n, int64_t divisor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    data[i] = T(static_cast<acc_t<T>>(data[i]) / static_cast<acc_t<T>>(divisor));
  }
}

template <typename T> void launch_reduce(void* dst, const void* src, int64_t n, ReduceOp op, cudaStream_t s) {
  T* d = static_cast<T*>(dst);
  const T* p = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::max:
      reduce_kernel<T, ReduceOp::max><<<grid_for(n), kBlock, 0, s>>>(d, p, n);
      break;
    case ReduceOp::min:
      reduce_kernel<T, ReduceOp::min><<<grid_for(n), kBlock, 0, s>>>(d, p, n);
      break;
    default:  // sum, avg
      reduce_kernel<T, ReduceOp::sum><<<grid_for(n), kBlock, 0, s>>>(d, p, n);
      break;
  }
  EMBER_LAUNCH_CHECK();
}

}  // namespace

void reduce(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::f32:
      return launch_reduce<float>(dst, src, n, op, s);
    case DType::f64:
      return launch_reduce<double>(dst, src, n, op, s);
    case DType::f16:
      return launch_reduce<Half>(dst, src, n, op, s);
    case DType::bf16:
      return launch_reduce<BFloat16>(dst, src, n, op, s);
    case DType::i32:
      return launch_reduce<int32_t>(dst, src, n, op, s);
    case DType::i64:
      return launch_reduce<int64_t>(dst, src, n, op, s);
    default:
      break;
  }
  EMBER_FAIL("ring reduction on the GPU: dtype ", dtype_name(dtype),
             " is not supported (f32, f64, f16, bf16, i32, i64 are)");
}

void divide(void* data, int64_t n, int64_t divisor, DType dtype, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  EMBER_DISPATCH_ALL(dtype, "ring divide", [&]<typename T>() {
    if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>) {
      EMBER_FAIL("ring divide on the GPU: dtype ", dtype_name(dtype), " cannot be averaged");
    } else {
      divide_kernel<T><<<grid_for(n), kBlock, 0, s>>>(static_cast<T*>(data), n, divisor);
      EMBER_LAUNCH_CHECK();
    }
  });
}

}  // namespace ember::parallel::cuda_ring
