#pragma once
// Device helpers shared by the CUDA kernels (most files of kernels/cuda/ include it):
//  - load_as / store_as: storage type <-> accumulation type, through the hardware conversion
//    instructions for f16/bf16 (round to nearest even, as core/half.h does on the host);
//  - warp_reduce / block_reduce: butterfly shuffles, then one shared-memory hop across warps,
//    for any trivially copyable value type and any associative combine functor (reduce.cu,
//    softmax.cu, norm.cu, optim.cu);
//  - sm_count: multiprocessor count, used to size grids (when one reduction is split across
//    blocks, how many chunks per channel norm.cu's eval backward uses);
//  - ceil_div, and is_dense: contiguous or empty.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <ember/core/cuda_check.h>
#include <ember/kernels/cuda/common.cuh>

namespace ember::kernels::cuda {

/// v (a storage element) converted to the accumulation type A.
template <typename A, typename T> __device__ __forceinline__ A load_as(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return static_cast<A>(__half2float(__ushort_as_half(v.bits)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<A>(__bfloat162float(__ushort_as_bfloat16(v.bits)));
  } else {
    return static_cast<A>(v);
  }
}

/// v (an accumulator) rounded to the storage type T.
template <typename T, typename A> __device__ __forceinline__ T store_as(A v) {
  if constexpr (std::is_same_v<T, Half>) {
    Half h;
    h.bits = __half_as_ushort(__float2half_rn(static_cast<float>(v)));
    return h;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 b;
    b.bits = __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)));
    return b;
  } else {
    return static_cast<T>(v);
  }
}

/// __shfl_xor_sync for any trivially copyable value whose size is a multiple of 4 bytes (pairs,
/// triples of accumulators): the value is moved as 32-bit words.
template <typename V> __device__ __forceinline__ V shfl_xor_any(V v, int mask) {
  static_assert(sizeof(V) % 4 == 0, "shfl_xor_any: value size must be a multiple of 4 bytes");
  static_assert(std::is_trivially_copyable_v<V>, "shfl_xor_any: value must be trivially copyable");
  constexpr int kWords = static_cast<int>(sizeof(V) / 4);
  uint32_t w[kWords];
  memcpy(w, &v, sizeof(V));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], mask);
  memcpy(&v, w, sizeof(V));
  return v;
}

/// Reduces v across the 32 lanes of a warp; every lane gets the result. All lanes must call it.
template <typename V, typename Combine> __device__ __forceinline__ V warp_reduce(V v, Combine combine) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v = combine(v, shfl_xor_any(v, mask));
  return v;
}

/// Reduces v across a 1-D block whose size is a multiple of 32; every thread gets the result.
/// `smem` holds at least 32 values. All threads must call it; the leading barrier lets callers
/// use it repeatedly (e.g. once per row in a grid-stride loop) with the same buffer.
template <typename V, typename Combine>
__device__ __forceinline__ V block_reduce(V v, Combine combine, V identity, V* smem) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int nwarps = static_cast<int>((blockDim.x + 31u) >> 5);
  v = warp_reduce(v, combine);
  __syncthreads();  // the previous call's readers are done with smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  // Every warp folds the per-warp results itself, so the result reaches all threads without a
  // third barrier.
  v = lane < nwarps ? smem[lane] : identity;
  return warp_reduce(v, combine);
}

/// Number of multiprocessors of CUDA device `index` (queried once, then cached).
inline int sm_count(int index) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  if (index >= 0 && index < kMaxDevices) {
    int c = cache[index].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, index));
  if (n <= 0) n = 1;
  if (index >= 0 && index < kMaxDevices) cache[index].store(n, std::memory_order_relaxed);
  return n;
}

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Contiguous for the kernels' purposes: row-major, or empty (Tensor::is_contiguous() says false
/// for some empty geometries, e.g. [2, 5, 0] with strides [5, 1, 1], yet nothing is read).
inline bool is_dense(const Tensor& t) { return t.numel() == 0 || t.is_contiguous(); }

}  // namespace ember::kernels::cuda
