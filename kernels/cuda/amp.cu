// CUDA fused unscale pass (kernels/amp.h): g *= inv_scale for every gradient of a step, noting
// on the device whether any element was inf or NaN.
//
// Why the kernel is shaped this way:
//  - A step touches dozens of gradients, most of them small; one launch per tensor would cost
//    more in launch latency than the work. The pointers and sizes of up to kMaxTensors tensors of
//    one dtype travel by value in the kernel arguments (GradList, under 2 KiB: no upload, no host
//    synchronisation), and a step with more tensors or several dtypes takes a few launches.
//  - Each tensor is cut into tiles of kTile elements; tile_start holds the running tile count,
//    and blocks walk the tiles with a grid-stride loop over a capped grid (64-bit indices),
//    finding a tile's tensor by binary search, so big and small tensors share the GPU evenly.
//  - The flag is never read here: each block ORs its threads' findings (__syncthreads_or) and
//    one thread stores 1.0f into found_inf. Several blocks storing the same value race benignly;
//    nobody ever stores 0, so the flag also collects several launches. The host reads it later
//    (GradScaler::step), once per step.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <ember/kernels/amp.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int kMaxTensors = 64;
constexpr int64_t kTile = 8192;  // elements per tile
constexpr int64_t kMaxGrid = 4096;

template <typename T> struct GradList {
  T* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t tile_start[kMaxTensors + 1];  // tile_start[count]: tiles in this launch
  int count;
};

template <typename T>
__global__ void __launch_bounds__(kBlock) unscale_kernel(GradList<T> list, float* found_inf, acc_t<T> inv) {
  using A = acc_t<T>;
  const int64_t tiles = list.tile_start[list.count];
  int bad = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int lo = 0, hi = list.count - 1;  // the last tensor whose first tile is <= tile
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (list.tile_start[mid] <= tile) lo = mid;
      else hi = mid - 1;
    }
    const int64_t begin = (tile - list.tile_start[lo]) * kTile;
    const int64_t end = list.numel[lo] - begin < kTile ? list.numel[lo] : begin + kTile;
    T* x = list.ptr[lo];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const A v = load_as<A>(x[i]);
      bad |= !::isfinite(v);
      x[i] = store_as<T>(v * inv);
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

template <typename T>
void launch_unscale(const std::vector<const Tensor*>& group, float* found_inf, double inv_scale, cudaStream_t stream) {
  GradList<T> list{};
  list.count = 0;
  auto flush = [&] {
    if (list.count == 0) return;
    const int64_t tiles = list.tile_start[list.count];
    const int grid = static_cast<int>(std::max<int64_t>(1, std::min(tiles, kMaxGrid)));
    unscale_kernel<T><<<grid, kBlock, 0, stream>>>(list, found_inf, static_cast<acc_t<T>>(inv_scale));
    EMBER_LAUNCH_CHECK();
    list.count = 0;
  };
  for (const Tensor* t : group) {
    const int k = list.count;
    list.ptr[k] = static_cast<T*>(t->data_ptr());
    list.numel[k] = t->numel();
    list.tile_start[k + 1] = list.tile_start[k] + (t->numel() + kTile - 1) / kTile;
    list.count = k + 1;
    if (list.count == kMaxTensors) flush();
  }
  flush();
}

void non_finite_unscale_cuda(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale) {
  launch_on(found_inf, [&](cudaStream_t stream) {
    for (const DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      std::vector<const Tensor*> group;
      for (const Tensor& t : tensors)
        if (t.dtype() == dt) group.push_back(&t);
      if (group.empty()) continue;
      EMBER_DISPATCH_FLOAT(dt, "non_finite_check_and_unscale_ (cuda)",
                           [&]<typename T>() { launch_unscale<T>(group, found_inf.data<float>(), inv_scale, stream); });
    }
  });
}

}  // namespace

void register_amp() { non_finite_unscale_table.set(DeviceType::CUDA, &non_finite_unscale_cuda); }

}  // namespace ember::kernels::cuda
