// CUDA index_select (gather of slices along a dim) and index_add (its adjoint, a scatter-add).
//
// Shapes (see kernels/index.h): x / out of index_add are contiguous (outer, D, inner); the gathered
// side is contiguous (outer, K, inner); index is contiguous (K), i64 or i32.
//
// Shape of the kernels:
//  * index_select only moves bytes, so it works on chunks: the widest of 16/8/4/2/1 bytes that
//    divides a row's byte length (inner * element size) and to which both base pointers are
//    aligned. An embedding row of 64 f32 becomes 16 uint4 moves. One grid-stride loop over every
//    chunk of the output: chunk i -> (b, k, j) = (i / (K * inner_c), (i / inner_c) % K,
//    i % inner_c), read from x[b, index[k], j]. Consecutive threads read consecutive chunks of one
//    row, so loads and stores coalesce whatever outer, K and inner are. Index math is 32-bit with
//    precomputed-magic division when every index fits (FastDiv32), 64-bit otherwise.
//  * index_add: one thread per src element, atomicAdd into out (duplicates in index accumulate,
//    in whatever order the atomics land). f16/bf16 use the native atomics (f16 from sm_70, bf16
//    from sm_80) with a 32-bit compare-and-swap fallback for older architectures; u8/bool (no byte
//    atomics) go through a compare-and-swap on the enclosing 32-bit word. Rounding happens after every addition in the
//    tensor's dtype, as on the CPU, so with duplicates the floating results depend on the order of the additions.
//    Under ember::set_deterministic(true) the floating dtypes take det_scatter.cuh's sorted
//    scatter-add instead: duplicates add in ascending k, the CPU's order and rounding, so the result
//    is the same on every run (and for f32/f64 bitwise the CPU's). Integers and bool keep the atomics:
//    their adds are exact, so the order does not matter.
//  * Index bounds: the GPU cannot throw, and checking on the host first would copy the index
//    back and stall the stream (the resident DataLoader gathers every batch with index_select).
//    The kernels validate each index; an out-of-range one is skipped (index_select writes zeros
//    there) and raises a device check (core/device_check.h) with the bad value and its position.
//    Nothing waits: the ember::Error naming them and the valid range is thrown at the next
//    synchronization (when a result is read), not a device-side assert that would kill the CUDA
//    context. index_add modifies `out` in place, so a tiny kernel validates the K indices first
//    and the add kernel, queued behind it on the same stream, returns at once when the check was
//    raised (it reads the claim word in device memory): on an error `out` is left untouched, as
//    on the CPU, whose front checks bounds before anything is written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include <ember/core/determinism.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/index.h>
#include <ember/core/cuda/device_check.cuh>
#include <ember/kernels/cuda/atomics.cuh>
#include <ember/kernels/cuda/det_scatter.cuh>
#include <ember/kernels/cuda/loops.cuh>

namespace ember::kernels::cuda {
namespace {

/// Whether adds of T depend on their order (floating types): the ones the determinism switch reroutes.
template <typename T>
constexpr bool kFloatingAdd =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Index arithmetic comes in two widths (loops.cuh): (int64_t, Div64) in general, (uint32_t,
// FastDiv32) when every linear index and offset is below 2^31 (the usual case), where the two
// divisions per element become multiply-high + shift instead of 64-bit software division.

template <typename I> __device__ inline I grid_start() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <typename I> __device__ inline I grid_stride() {
  return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

/// Element i of a contiguous (outer, K, inner) tensor -> (b, k, j); `inner` and `K` divide as Dv.
template <typename I> struct RowPos { I b, k, j; };
template <typename I, typename Dv> __device__ inline RowPos<I> split_row(I i, const Dv& inner, const Dv& K) {
  const I r = inner.div(i);  // row: b * K + k
  const I b = K.div(r);
  return {b, r - b * K.divisor, i - r * inner.divisor};
}

// out chunk i of (outer, K, inner_c) -> (b, k, j), read from x chunk (b, index[k], j) of
// (outer, D, inner_c).
template <typename I, typename Dv, typename U, typename Ix>
__global__ void __launch_bounds__(kBlock)
    index_select_kernel(const U* __restrict__ x, const Ix* __restrict__ index, U* __restrict__ out, I n, Dv inner_c,
                        Dv K, I D, DeviceErrorSlot err) {
  for (I i = grid_start<I>(); i < n; i += grid_stride<I>()) {
    const auto [b, k, j] = split_row<I>(i, inner_c, K);
    const int64_t id = static_cast<int64_t>(index[k]);
    if (id < 0 || id >= static_cast<int64_t>(D)) {
      raise_device_error(err, id, static_cast<int64_t>(k));
      out[i] = U{};
      continue;
    }
    out[i] = x[(b * D + static_cast<I>(id)) * inner_c.divisor + j];
  }
}

// src element i of (outer, K, inner) -> (b, k, j), added into out element (b, index[k], j) of
// (outer, D, inner). Adds nothing when check_index_kernel, queued before it, raised `err`.
template <typename I, typename Dv, typename T, typename Ix>
__global__ void __launch_bounds__(kBlock)
    index_add_kernel(T* out, const Ix* __restrict__ index, const T* __restrict__ src, I n, Dv inner, Dv K, I D,
                     DeviceErrorSlot err) {
  if (device_error_raised(err)) return;
  for (I i = grid_start<I>(); i < n; i += grid_stride<I>()) {
    const auto [b, k, j] = split_row<I>(i, inner, K);
    const int64_t id = static_cast<int64_t>(index[k]);
    if (id < 0 || id >= static_cast<int64_t>(D)) continue;  // unreachable after the check; never write out of range
    atomic_add(out + (b * D + static_cast<I>(id)) * inner.divisor + j, src[i]);
  }
}

// Deterministic index_add (det_scatter.cuh): the key of src element i of (outer, K, inner) is the
// offset of out element (b, index[k], j) in (outer, D, inner); every key is `skip` when
// check_index_kernel raised `err`, so nothing is added.
template <typename I, typename Dv, typename Ix, typename Key>
__global__ void __launch_bounds__(kBlock)
    index_add_keys_kernel(Key* __restrict__ keys, const Ix* __restrict__ index, I n, Dv inner, Dv K, I D, Key skip,
                          DeviceErrorSlot err) {
  const bool raised = device_error_raised(err);
  for (I i = grid_start<I>(); i < n; i += grid_stride<I>()) {
    const auto [b, k, j] = split_row<I>(i, inner, K);
    const int64_t id = static_cast<int64_t>(index[k]);
    keys[i] = raised || id < 0 || id >= static_cast<int64_t>(D)
                  ? skip
                  : static_cast<Key>((b * D + static_cast<I>(id)) * inner.divisor + j);
  }
}

// Raises `err` for an index outside [0, D) (index_add's check before it touches `out`).
template <typename Ix>
__global__ void __launch_bounds__(kBlock)
    check_index_kernel(const Ix* __restrict__ index, int64_t K, int64_t D, DeviceErrorSlot err) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < K; k += stride) {
    const int64_t id = static_cast<int64_t>(index[k]);
    if (id < 0 || id >= D) raise_device_error(err, id, k);
  }
}

// ---- host side ----

// The error of a raised index check: info {D, 1 for index_add}, (bad value, its position k).
std::string describe_bad_index(const DeviceCheckInfo& info, int64_t value, int64_t k) {
  const std::string D = std::to_string(info.arg0);
  return std::string(info.op) + ": index " + std::to_string(value) + " (entry " + std::to_string(k) +
         " of the index) is out of range for a dim of size " + D + " (valid range [0, " + D + "))" +
         (info.arg1 != 0 ? "; nothing was added" : "");
}

// Calls fn<I>() with I the index element type.
// The fronts (kernels/index.cpp: index_i64) always pass an i64 index; i32 is kept for direct callers.
template <typename Fn> void dispatch_index(const Tensor& index, const char* what, Fn&& fn) {
  if (index.dtype() == DType::i64) return fn.template operator()<int64_t>();
  EMBER_DEBUG_ASSERT(index.dtype() == DType::i32, what, ": index must be i64 or i32, got ", dtype_name(index.dtype()));
  fn.template operator()<int32_t>();
}

// Ranks, shapes, contiguity, devices and dtypes: the fronts (kernels/index.cpp) build these views.
void check_common(const char* what, const Tensor& big, const char* big_name, const Tensor& index, const Tensor& small,
                  const char* small_name) {
  EMBER_DEBUG_ASSERT(big.dim() == 3 && small.dim() == 3, what,
                     ": expected 3-D (outer, D, inner) / (outer, K, inner) views, got ", big_name, " ", big.shape_str(),
                     " and ", small_name, " ", small.shape_str());
  EMBER_DEBUG_ASSERT(index.dim() == 1 && index.size(0) == small.size(1) && small.size(0) == big.size(0) &&
                         small.size(2) == big.size(2),
                     what, ": shapes do not match: ", big_name, " ", big.shape_str(), ", index ", index.shape_str(),
                     ", ", small_name, " ", small.shape_str());
  EMBER_DEBUG_ASSERT(big.is_contiguous() && small.is_contiguous() && index.is_contiguous(), what,
                     ": expected contiguous operands");
  EMBER_DEBUG_ASSERT(big.device() == small.device() && big.device() == index.device(), what, ": operands on ",
                     big.device().str(), ", ", small.device().str(), " and ", index.device().str(), " (index)");
  EMBER_DEBUG_ASSERT(big.dtype() == small.dtype(), what, ": ", big_name, " is ", dtype_name(big.dtype()), " but ",
                     small_name, " is ", dtype_name(small.dtype()));
}

// Widest chunk (16, 8, 4, 2 or 1 bytes) dividing row_bytes with both pointers aligned to it.
size_t chunk_bytes(size_t row_bytes, const void* a, const void* b) {
  for (size_t c = 16; c > 1; c /= 2)
    if (row_bytes % c == 0 && is_aligned(a, c) && is_aligned(b, c)) return c;
  return 1;
}

void index_select_impl(const Tensor& x, const Tensor& index, const Tensor& out) {
  const char* what = "index_select (cuda)";
  check_common(what, x, "x", index, out, "out");
  const int64_t outer = out.size(0), K = out.size(1), inner = out.size(2), D = x.size(1);
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device());
  const cudaStream_t stream = stream_of(out);
  const size_t row_bytes = static_cast<size_t>(inner) * out.element_size();
  const size_t c = chunk_bytes(row_bytes, x.data_ptr(), out.data_ptr());
  const int64_t inner_c = static_cast<int64_t>(row_bytes / c);
  const int64_t n = outer * K * inner_c;
  DeviceCheck err({what, D, 0, &describe_bad_index}, current_stream(out.device()));
  const int64_t x_chunks = x.size(0) * D * inner_c;
  dispatch_index(index, what, [&]<typename Ix>() {
    const Ix* ip = static_cast<const Ix*>(index.data_ptr());
    auto launch = [&]<typename U>() {
      with_index_width(n, x_chunks, [&]<typename I, typename Dv>() {
        index_select_kernel<I, Dv><<<grid_for(n), kBlock, 0, stream>>>(
            static_cast<const U*>(x.data_ptr()), ip, static_cast<U*>(out.data_ptr()), static_cast<I>(n),
            Dv(static_cast<I>(inner_c)), Dv(static_cast<I>(K)), static_cast<I>(D), err.slot());
        EMBER_LAUNCH_CHECK();
      });
    };
    switch (c) {
      case 16:
        launch.template operator()<uint4>();
        break;
      case 8:
        launch.template operator()<uint2>();
        break;
      case 4:
        launch.template operator()<uint32_t>();
        break;
      case 2:
        launch.template operator()<uint16_t>();
        break;
      default:
        launch.template operator()<uint8_t>();
        break;
    }
  });
  err.launched();
}

void index_add_impl(const Tensor& out, const Tensor& index, const Tensor& src) {
  const char* what = "index_add (cuda)";
  check_common(what, out, "out", index, src, "src");
  const int64_t K = src.size(1), inner = src.size(2), D = out.size(1);
  const int64_t n = src.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  const cudaStream_t stream = stream_of(out);
  const DType dt = out.dtype();
  DeviceCheck err({what, D, 1, &describe_bad_index}, current_stream(out.device()));
  // Validate first (see the top comment): an out-of-range index must not leave `out` half updated.
  dispatch_index(index, what, [&]<typename Ix>() {
    check_index_kernel<Ix>
        <<<grid_for(K), kBlock, 0, stream>>>(static_cast<const Ix*>(index.data_ptr()), K, D, err.slot());
    EMBER_LAUNCH_CHECK();
  });
  dispatch_index(index, what, [&]<typename Ix>() {
    EMBER_DISPATCH_ALL(dt, what, [&]<typename T>() {
      // Floating sums depend on the order of the additions: under the determinism switch they go
      // through the sorted scatter-add. Integer and bool adds are exact (u8 wraps, bool ors), so
      // atomics give the same result in any order.
      if constexpr (kFloatingAdd<T>) {
        if (ember::deterministic()) {
          const Ix* ip = static_cast<const Ix*>(index.data_ptr());
          det_scatter_add<T>(static_cast<T*>(out.data_ptr()), out.numel(), static_cast<const T*>(src.data_ptr()), n,
                             out.device(), stream, [&]<typename Key>(Key* keys, Key skip) {
                               with_index_width(n, out.numel(), [&]<typename I, typename Dv>() {
                                 index_add_keys_kernel<I, Dv><<<grid_for(n), kBlock, 0, stream>>>(
                                     keys, ip, static_cast<I>(n), Dv(static_cast<I>(inner)), Dv(static_cast<I>(K)),
                                     static_cast<I>(D), skip, err.slot());
                               });
                             });
          return;
        }
      }
      with_index_width(n, out.numel(), [&]<typename I, typename Dv>() {
        index_add_kernel<I, Dv><<<grid_for(n), kBlock, 0, stream>>>(
            static_cast<T*>(out.data_ptr()), static_cast<const Ix*>(index.data_ptr()),
            static_cast<const T*>(src.data_ptr()), static_cast<I>(n), Dv(static_cast<I>(inner)), Dv(static_cast<I>(K)),
            static_cast<I>(D), err.slot());
        EMBER_LAUNCH_CHECK();
      });
    });
  });
  err.launched();
}

}  // namespace

void register_index() {
  index_select_table.set(DeviceType::CUDA, &index_select_impl);
  index_add_table.set(DeviceType::CUDA, &index_add_impl);
}

}  // namespace ember::kernels::cuda
