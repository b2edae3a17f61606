#pragma once
// Deterministic scatter-add, for ember::set_deterministic(true) (core/determinism.h): out[key[i]] +=
// src[i] for every source position i, where duplicate keys add in ascending i, rounding to T after
// every addition as the CPU twins do, instead of atomics that land in any order. The caller's kernel
// writes one key per source position (kSkip for a position that adds nothing); the keys are
// sorted stably with their positions (cub's radix sort, det_scatter.cu), and one thread per run of
// equal keys adds that run's sources in position order into its output element. No two threads
// write one element, so the result is the same on every run. Cost: the sort (keys and positions
// of 4 or 8 bytes each, in two buffers each, plus cub's small scratch) and a serial walk per run, so an index with one
// value repeated K times adds K values in one thread: slower than atomics, as torch's deterministic
// paths are. Index math is 32-bit (keys, positions) when the output and the source have fewer than
// 2^32 - 1 - 2^25 elements (det_scatter_narrow), 64-bit otherwise.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/core/tensor.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {

/// Whether 32-bit keys and positions cover an output of out_numel elements and n source positions.
/// The grid-stride loops add up to a whole grid (grid_for caps it at 2^24 threads) to a position
/// below n: the slack keeps that sum from wrapping past 2^32 back under n.
inline bool det_scatter_narrow(int64_t out_numel, int64_t n) {
  constexpr int64_t kLimit = (int64_t{1} << 32) - 1;  // one value (out_numel) stays free for kSkip
  constexpr int64_t kSlack = int64_t{1} << 25;
  return out_numel + kSlack < kLimit && n + kSlack < kLimit;
}

/// Sorts `keys` (n values of K = uint32_t or uint64_t, each <= out_numel, on the current stream's
/// device) stably, with their positions 0..n-1: on return keys_sorted and pos_sorted (K each, n
/// values) hold them; `keys` is overwritten (keys_sorted may be it). The buffers come from the
/// caching allocator on `stream`; the caller keeps the returned tensors alive until its kernel is
/// queued. Defined in det_scatter.cu for both key types.
template <typename K>
void det_scatter_sort(const Tensor& keys, int64_t n, int64_t out_numel, cudaStream_t stream, Tensor& keys_sorted,
                      Tensor& pos_sorted);

/// a + b rounded to T once, as the CPU's index_add and pooling backward add (f16/bf16 through f32).
template <typename T> __device__ __forceinline__ T det_add(T a, T b) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return store_as<T>(load_as<float>(a) + load_as<float>(b));
  else return a + b;
}

/// One thread per run of equal keys (found at its first position p): out[key] = ((out[key] +
/// src[pos[p]]) + src[pos[p + 1]]) + ..., in position order. Keys equal to `skip` add nothing.
template <typename T, typename K>
__global__ void __launch_bounds__(kBlock)
    det_scatter_add_kernel(T* __restrict__ out, const K* __restrict__ keys, const K* __restrict__ pos,
                           const T* __restrict__ src, K n, K skip) {
  const K stride = static_cast<K>(gridDim.x) * blockDim.x;
  for (K p = static_cast<K>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    const K key = keys[p];
    if (key == skip || (p > 0 && keys[p - 1] == key)) continue;
    T acc = out[key];
    for (K q = p; q < n && keys[q] == key; ++q) acc = det_add(acc, src[pos[q]]);
    out[key] = acc;
  }
}

/// The whole deterministic scatter-add: `fill_keys.template operator()<K>(K* keys, K skip)`
/// queues a kernel on `stream` writing the key of every source position 0..n-1 (an offset into
/// out, or skip); then the keys are sorted and out (out_numel elements of T) gets the sums.
template <typename T, typename FillKeys>
void det_scatter_add(T* out, int64_t out_numel, const T* src, int64_t n, Device dev, cudaStream_t stream,
                     FillKeys&& fill_keys) {
  if (n == 0) return;
  auto run = [&]<typename K>() {
    const DType kt = sizeof(K) == 4 ? DType::i32 : DType::i64;  // storage only, read as unsigned
    const Tensor keys = empty({n}, {.dtype = kt, .device = dev});
    const K skip = static_cast<K>(out_numel);
    fill_keys.template operator()<K>(static_cast<K*>(keys.data_ptr()), skip);
    EMBER_LAUNCH_CHECK();
    Tensor keys_sorted, pos_sorted;
    det_scatter_sort<K>(keys, n, out_numel, stream, keys_sorted, pos_sorted);
    det_scatter_add_kernel<T, K><<<grid_for(n), kBlock, 0, stream>>>(out, static_cast<const K*>(keys_sorted.data_ptr()),
                                                                     static_cast<const K*>(pos_sorted.data_ptr()), src,
                                                                     static_cast<K>(n), skip);
    EMBER_LAUNCH_CHECK();
  };
  if (det_scatter_narrow(out_numel, n)) run.template operator()<uint32_t>();
  else run.template operator()<uint64_t>();
}

}  // namespace ember::kernels::cuda
