// The sort of the deterministic scatter-add (det_scatter.cuh): cub's stable radix sort of the keys
// with their positions, on the caller's stream, over the bits the largest key needs.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstdint>

#include <ember/core/cuda_check.h>
#include <ember/core/error.h>
#include <ember/kernels/cuda/det_scatter.cuh>

namespace ember::kernels::cuda {
namespace {

/// pos[i] = i.
template <typename K> __global__ void __launch_bounds__(kBlock) iota_kernel(K* __restrict__ pos, K n) {
  const K stride = static_cast<K>(gridDim.x) * blockDim.x;
  for (K i = static_cast<K>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) pos[i] = i;
}

}  // namespace

template <typename K>
void det_scatter_sort(const Tensor& keys, int64_t n, int64_t out_numel, cudaStream_t stream, Tensor& keys_sorted,
                      Tensor& pos_sorted) {
  const Device dev = keys.device();
  const TensorOptions opts{.dtype = keys.dtype(), .device = dev};
  const Tensor keys_alt = empty({n}, opts), pos = empty({n}, opts), pos_alt = empty({n}, opts);
  iota_kernel<K><<<grid_for(n), kBlock, 0, stream>>>(static_cast<K*>(pos.data_ptr()), static_cast<K>(n));
  EMBER_LAUNCH_CHECK();
  // Keys are at most out_numel (the skip value): only its bits need sorting.
  const int end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(out_numel))));
  // Double buffers: cub sorts back and forth between each pair and says which one holds the result,
  // so its scratch holds no copies of the inputs. The item count has the key's width (32-bit
  // offsets on the narrow path).
  cub::DoubleBuffer<K> kb(static_cast<K*>(keys.data_ptr()), static_cast<K*>(keys_alt.data_ptr()));
  cub::DoubleBuffer<K> pb(static_cast<K*>(pos.data_ptr()), static_cast<K*>(pos_alt.data_ptr()));
  const K count = static_cast<K>(n);
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kb, pb, count, 0, end_bit, stream));
  const Tensor temp =
      empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, {.dtype = DType::u8, .device = dev});
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, kb, pb, count, 0, end_bit, stream));
  keys_sorted = kb.Current() == keys.data_ptr() ? keys : keys_alt;
  pos_sorted = pb.Current() == pos.data_ptr() ? pos : pos_alt;
  // The other buffers and `temp` go back to the caching allocator here, reused only in `stream`'s order.
}

template void det_scatter_sort<uint32_t>(const Tensor&, int64_t, int64_t, cudaStream_t, Tensor&, Tensor&);
template void det_scatter_sort<uint64_t>(const Tensor&, int64_t, int64_t, cudaStream_t, Tensor&, Tensor&);

}  // namespace ember::kernels::cuda
