// CUDA reductions: sum / mean / max / min and argmax over the middle dim of a contiguous
// (outer, R, inner) tensor, giving (outer, inner).
//
// Why the kernels are shaped this way:
//  - inner == 1 (row reductions, the common case: reducing the last dim or everything) reads each
//    row contiguously. Short rows (R <= kWarpRowMax) get one warp per row so that 8 rows share a
//    256-thread block and no lanes idle on a 100-element row; longer rows get one block per row,
//    with 16-byte vector loads after a scalar head that brings the address to 16-byte alignment.
//  - when there are too few rows to occupy the GPU (outer == 1 for a full sum, or a handful of
//    long rows), each row is cut into `splits` chunks reduced by separate blocks into a temporary
//    (outer, splits) of accumulators, and a second, warp-per-row pass folds the splits. A single
//    block summing 2^26 floats would use one SM out of 132.
//  - inner > 1 (reducing a middle or leading dim) keeps reads coalesced by giving consecutive
//    threads consecutive inner indices: a 2-D block (bx, by) with bx = min(32, pow2 >= inner)
//    columns and by = 256 / bx threads striding over R, folded through shared memory. When the
//    (outer, inner) output is too small to fill the GPU, R is split over gridDim.y into a
//    (splits, outer * inner) temporary that a second column pass folds.
// f16/bf16 accumulate in f32, f32 in f32, f64 in f64, integers and bool in i64. Max/min
// propagate NaN; argmax returns the first index of the maximum (NaN counts as the maximum), and
// its combine breaks ties by the smaller index, so any reduction order gives the same answer.
// Temporaries come from the caching allocator as u8 tensors on the current stream.
#include <cstdint>
#include <type_traits>

#include <ember/core/stream.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/reduce.h>
#include <ember/kernels/reduce_math.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int kWarpRowMax = 1024;  // rows up to this length: one warp per row
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr int64_t kMaxGrid = 65536;  // grid-stride loops cover the rest
constexpr int kBlocksPerSm = 8;  // blocks per SM a split reduction aims for (all 2048 threads)
constexpr int64_t kMinRowChunk = 8192;  // elements per block in a split row reduction, at least
constexpr int64_t kMaxSplits = 1024;  // the second pass folds at most this many partials

// ---- accumulation types and reducers ----

template <typename T> struct RedAcc {
  using type = int64_t;  // integers and bool
};
template <> struct RedAcc<float> { using type = float; };
template <> struct RedAcc<double> { using type = double; };
template <> struct RedAcc<Half> { using type = float; };
template <> struct RedAcc<BFloat16> { using type = float; };
template <typename T> using red_acc_t = typename RedAcc<T>::type;

/// Sum / Mean / Max / Min with the op chosen at run time: the switch is uniform across the grid,
/// and these kernels are bound by memory traffic, so one instantiation serves all four ops. The
/// rules are kernels/reduce_math.h, shared with the CPU twin.
template <typename A> struct ValueReducer {
  using value_type = A;
  ReduceOp op;
  int64_t count;  // the full R (not a split's share), for finalize
  bool finalize;  // false for the first pass of a split reduction: its partials stay accumulators

  __device__ __forceinline__ A identity() const { return math::reduce_identity<A>(op); }
  __device__ __forceinline__ A combine(A a, A b) const { return math::reduce_combine(op, a, b); }
  /// Element at reduction index r (r unused here) as an accumulator.
  template <typename In> __device__ __forceinline__ A lift(In v, int64_t /*r*/) const { return load_as<A>(v); }
  template <typename Out> __device__ __forceinline__ Out finish(A a) const {
    if (!finalize) return store_as<Out>(a);
    return math::reduce_finalize(op, a, count, [](auto r) { return store_as<Out>(r); });
  }
};

/// (value, index) of the first maximum, folded with math::argmax_combine (associative and
/// commutative, so the block/tree order does not change the answer).
template <typename A> struct ArgmaxReducer {
  using value_type = math::ArgPair<A>;

  __device__ __forceinline__ value_type identity() const { return math::argmax_identity<A>(); }
  __device__ __forceinline__ value_type combine(value_type a, value_type b) const { return math::argmax_combine(a, b); }
  template <typename In> __device__ __forceinline__ value_type lift(In v, int64_t r) const {
    if constexpr (std::is_same_v<In, value_type>) return v;  // a partial from the first pass
    else return {load_as<A>(v), r};
  }
  template <typename Out> __device__ __forceinline__ Out finish(value_type a) const {
    if constexpr (std::is_same_v<Out, value_type>) return a;
    else return static_cast<Out>(a.i);
  }
};

// ---- kernels ----

/// Accumulates p[begin, end) into acc with the threads of one block: a scalar head up to the
/// first 16-byte boundary, 16-byte vector loads, then a scalar tail. p is In-aligned.
template <typename In, typename Red>
__device__ __forceinline__ typename Red::value_type accumulate_span(const In* __restrict__ p, int64_t begin,
                                                                    int64_t end, const Red& red,
                                                                    typename Red::value_type acc) {
  static_assert(16 % sizeof(In) == 0, "element size must divide 16");
  constexpr int kVec = static_cast<int>(16 / sizeof(In));
  struct alignas(16) Vec {
    In val[kVec];
  };
  const int64_t tid = threadIdx.x, nthreads = blockDim.x;
  const auto addr = reinterpret_cast<uintptr_t>(p + begin);
  int64_t head = static_cast<int64_t>(((16u - (addr & 15u)) & 15u) / sizeof(In));
  if (head > end - begin) head = end - begin;
  for (int64_t r = begin + tid; r < begin + head; r += nthreads) acc = red.combine(acc, red.lift(p[r], r));
  const int64_t body = begin + head;
  const int64_t nvec = (end - body) / kVec;
  const Vec* pv = reinterpret_cast<const Vec*>(p + body);
  auto fold = [&](const Vec& w, int64_t vi) {  // vector vi: elements body + vi * kVec, ...
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc = red.combine(acc, red.lift(w.val[j], body + vi * kVec + j));
  };
  // kUnroll vectors per thread are loaded before any is folded, so each thread keeps kUnroll
  // loads in flight (one at a time left a 2^24-element sum at 64% of a copy's bandwidth).
  constexpr int kUnroll = 4;
  int64_t v = tid;
  for (; v + (kUnroll - 1) * nthreads < nvec; v += kUnroll * nthreads) {
    Vec w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = pv[v + u * nthreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fold(w[u], v + u * nthreads);
  }
  for (; v < nvec; v += nthreads) fold(pv[v], v);
  for (int64_t r = body + nvec * kVec + tid; r < end; r += nthreads) acc = red.combine(acc, red.lift(p[r], r));
  return acc;
}

/// One block per work item; item = row * splits + s reduces x[row, s*chunk : min(R, (s+1)*chunk)]
/// into out[item]. x: (rows, R) contiguous. out: (rows, splits).
template <typename In, typename Out, typename Red>
__global__ void row_reduce_block_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t rows, int64_t R,
                                        int64_t splits, int64_t chunk, Red red) {
  using V = typename Red::value_type;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(V)];
  V* smem = reinterpret_cast<V*>(smem_raw);
  auto combine = [&red](V a, V b) { return red.combine(a, b); };
  const int64_t items = rows * splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / splits;
    const int64_t s = item - row * splits;
    const int64_t begin = s * chunk;
    const int64_t end = begin + chunk < R ? begin + chunk : R;
    V acc = accumulate_span(x + row * R, begin, end, red, red.identity());
    acc = block_reduce(acc, combine, red.identity(), smem);
    if (threadIdx.x == 0) out[item] = red.template finish<Out>(acc);
  }
}

/// One warp per row of x (rows, R) contiguous; out (rows). Lanes read consecutive elements.
template <typename In, typename Out, typename Red>
__global__ void row_reduce_warp_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t rows, int64_t R,
                                       Red red) {
  using V = typename Red::value_type;
  auto combine = [&red](V a, V b) { return red.combine(a, b); };
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = first; row < rows; row += step) {  // warp-uniform loop: shuffles are safe
    const In* p = x + row * R;
    V acc = red.identity();
    for (int64_t r = lane; r < R; r += 32) acc = red.combine(acc, red.lift(p[r], r));
    acc = warp_reduce(acc, combine);
    if (lane == 0) out[row] = red.template finish<Out>(acc);
  }
}

/// Column reduction of x (outer, R, inner) contiguous over R. Block (bx, by): tile t covers
/// inner indices [(t % tpo) * bx, +bx) of outer index t / tpo (tpo = tiles per outer); thread
/// (tx, ty) folds rows r = r_begin + ty, + by, ... of its column, then shared memory folds ty.
/// blockIdx.y = s handles rows [s * chunk, min(R, (s+1) * chunk)) and writes
/// out[s, o * inner + i], out being (gridDim.y, outer * inner).
template <typename In, typename Out, typename Red>
__global__ void col_reduce_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t outer, int64_t R,
                                  int64_t inner, int64_t chunk, Red red) {
  using V = typename Red::value_type;
  __shared__ __align__(16) unsigned char smem_raw[kBlock * sizeof(V)];
  V* smem = reinterpret_cast<V*>(smem_raw);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int bx = static_cast<int>(blockDim.x), by = static_cast<int>(blockDim.y);
  const int64_t tiles_per_outer = (inner + bx - 1) / bx;
  const int64_t tiles = outer * tiles_per_outer;
  const int64_t s = blockIdx.y;
  const int64_t r_begin = s * chunk;
  const int64_t r_end = r_begin + chunk < R ? r_begin + chunk : R;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_outer;
    const int64_t i = (tile - o * tiles_per_outer) * bx + tx;
    V acc = red.identity();
    if (i < inner) {
      const In* p = x + o * R * inner + i;
      for (int64_t r = r_begin + ty; r < r_end; r += by) acc = red.combine(acc, red.lift(p[r * inner], r));
    }
    smem[ty * bx + tx] = acc;
    __syncthreads();
    for (int h = by / 2; h > 0; h >>= 1) {  // by is a power of two
      if (ty < h) smem[ty * bx + tx] = red.combine(smem[ty * bx + tx], smem[(ty + h) * bx + tx]);
      __syncthreads();
    }
    if (ty == 0 && i < inner) out[s * outer * inner + o * inner + i] = red.template finish<Out>(smem[tx]);
    __syncthreads();  // smem is rewritten by the next tile
  }
}

// ---- launchers ----

/// Pointer to the bytes of a temporary of n values of V, owned by `holder`.
template <typename V> V* temp_buffer(Tensor& holder, int64_t n, Device device) {
  holder = ember::empty({n * static_cast<int64_t>(sizeof(V))}, {.dtype = DType::u8, .device = device});
  return static_cast<V*>(holder.data_ptr());
}

/// Row reduction (inner == 1) of x (rows, R) into out (rows). `first` is the reducer for the
/// first pass over raw elements of a split row (its partials are not finalized), `final` the one
/// that finishes.
template <typename In, typename Out, typename Red>
void launch_rows(const In* x, Out* out, int64_t rows, int64_t R, const Red& first, const Red& final, Device device,
                 cudaStream_t stream) {
  using V = typename Red::value_type;
  const int64_t target = static_cast<int64_t>(sm_count(device.index())) * kBlocksPerSm;
  int64_t splits = 1;
  if (rows < target && R >= 2 * kMinRowChunk) {
    splits = std::min({ceil_div(target, rows), ceil_div(R, kMinRowChunk), kMaxSplits});
  }
  if (splits > 1) {
    // Chunks are a multiple of 16 elements so each split starts 16-byte aligned whenever the row does.
    const int64_t chunk = ceil_div(ceil_div(R, splits), 16) * 16;
    splits = ceil_div(R, chunk);
    Tensor holder;
    V* partial = temp_buffer<V>(holder, rows * splits, device);  // (rows, splits)
    const int grid1 = static_cast<int>(std::min(rows * splits, kMaxGrid));
    row_reduce_block_kernel<In, V, Red><<<grid1, kBlock, 0, stream>>>(x, partial, rows, R, splits, chunk, first);
    EMBER_LAUNCH_CHECK();
    const int grid2 = static_cast<int>(std::min(ceil_div(rows, kWarpsPerBlock), kMaxGrid));
    row_reduce_warp_kernel<V, Out, Red><<<grid2, kBlock, 0, stream>>>(partial, out, rows, splits, final);
    return;
  }
  if (R <= kWarpRowMax) {
    const int grid = static_cast<int>(std::min(ceil_div(rows, kWarpsPerBlock), kMaxGrid));
    row_reduce_warp_kernel<In, Out, Red><<<grid, kBlock, 0, stream>>>(x, out, rows, R, final);
  } else {
    const int grid = static_cast<int>(std::min(rows, kMaxGrid));
    row_reduce_block_kernel<In, Out, Red><<<grid, kBlock, 0, stream>>>(x, out, rows, R, 1, R, final);
  }
}

/// Block shape of the column kernel for `inner` columns: bx = min(32, pow2 >= inner), by = 256/bx.
dim3 col_block(int64_t inner) {
  int bx = 1;
  while (bx < 32 && bx < inner) bx *= 2;
  return dim3(static_cast<unsigned>(bx), static_cast<unsigned>(kBlock / bx), 1);
}

/// Column reduction (inner > 1) of x (outer, R, inner) into out (outer, inner).
template <typename In, typename Out, typename Red>
void launch_cols(const In* x, Out* out, int64_t outer, int64_t R, int64_t inner, const Red& first, const Red& final,
                 Device device, cudaStream_t stream) {
  using V = typename Red::value_type;
  const dim3 block = col_block(inner);
  const int64_t tiles = outer * ceil_div(inner, block.x);
  const int64_t target = static_cast<int64_t>(sm_count(device.index())) * kBlocksPerSm;
  const int64_t min_rows = static_cast<int64_t>(block.y) * 16;  // rows each thread folds, at least 16
  int64_t splits = 1;
  if (tiles < target && R >= 2 * min_rows) {
    splits = std::min({ceil_div(target, tiles), ceil_div(R, min_rows), kMaxSplits});
  }
  const unsigned grid_x = static_cast<unsigned>(std::min(tiles, kMaxGrid));
  if (splits > 1) {
    const int64_t chunk = ceil_div(R, splits);
    splits = ceil_div(R, chunk);
    Tensor holder;
    V* partial = temp_buffer<V>(holder, splits * outer * inner, device);  // (splits, outer * inner)
    col_reduce_kernel<In, V, Red><<<dim3(grid_x, static_cast<unsigned>(splits), 1), block, 0, stream>>>(
        x, partial, outer, R, inner, chunk, first);
    EMBER_LAUNCH_CHECK();
    // Second pass: partial viewed as (1, splits, outer * inner).
    const int64_t n = outer * inner;
    const dim3 block2 = col_block(n);
    const unsigned grid2 = static_cast<unsigned>(std::min(ceil_div(n, block2.x), kMaxGrid));
    col_reduce_kernel<V, Out, Red><<<dim3(grid2, 1, 1), block2, 0, stream>>>(partial, out, 1, splits, n, splits, final);
    return;
  }
  col_reduce_kernel<In, Out, Red><<<dim3(grid_x, 1, 1), block, 0, stream>>>(x, out, outer, R, inner, R, final);
}

/// Reduces x (outer, R, inner) into out (outer, inner) on out's device and stream.
template <typename In, typename Out, typename Red>
void launch_reduction(const Tensor& x, const Tensor& out, const Red& first, const Red& final) {
  const int64_t outer = x.size(0), R = x.size(1), inner = x.size(2);
  const In* xp = static_cast<const In*>(x.data_ptr());
  Out* op = static_cast<Out*>(out.data_ptr());
  launch_on(out, [&](cudaStream_t stream) {
    if (inner == 1) launch_rows<In, Out, Red>(xp, op, outer, R, first, final, x.device(), stream);
    else launch_cols<In, Out, Red>(xp, op, outer, R, inner, first, final, x.device(), stream);
  });
}

// The fronts (kernels/reduce.cpp: reduce, argmax) present x as a contiguous (outer, R, inner) view
// and allocate out (outer, inner) on x's device: debug-only.
void assert_operands(const char* what, const Tensor& x, const Tensor& out) {
  EMBER_DEBUG_ASSERT(x.device().is_cuda() && out.device() == x.device(), what,
                     ": expected x and out on one CUDA device, got x on ", x.device().str(), " and out on ",
                     out.device().str());
  EMBER_DEBUG_ASSERT(x.dim() == 3 && is_dense(x), what, ": expected x contiguous (outer, R, inner), got shape ",
                     x.shape_str());
  EMBER_DEBUG_ASSERT(is_dense(out) && out.numel() == x.size(0) * x.size(2), what, ": out of shape ", out.shape_str(),
                     " does not hold (outer, inner) = (", x.size(0), ", ", x.size(2), ") for x ", x.shape_str());
}

template <typename T, typename Out> void reduce_typed(ReduceOp op, const Tensor& x, const Tensor& out) {
  using A = red_acc_t<T>;
  const int64_t R = x.size(1);
  const ValueReducer<A> final{op, R, true};
  const ValueReducer<A> first{op, R, false};
  launch_reduction<T, Out>(x, out, first, final);
}

void reduce_cuda(ReduceOp op, const Tensor& x, const Tensor& out) {
  assert_operands("reduce", x, out);
  // The front (kernels/reduce.cpp: reduce) refuses an empty range for ops with no value there.
  EMBER_DEBUG_ASSERT(x.size(1) > 0 || op_info(op).on_empty, "reduce: ", op_name(op),
                     " over an empty dim (x of shape (outer, R, inner) = ", x.shape_str(), ")");
  EMBER_DISPATCH_ALL(x.dtype(), "reduce (cuda)", [&]<typename T>() {
    constexpr bool kFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
    if (out.dtype() == x.dtype()) return reduce_typed<T, T>(op, x, out);
    if constexpr (!kFloat) {
      // Integer sums come out as i64; an integer mean may be asked for in a floating dtype.
      if (out.dtype() == DType::i64) return reduce_typed<T, int64_t>(op, x, out);
      if (out.dtype() == DType::f32) return reduce_typed<T, float>(op, x, out);
    }
    EMBER_FAIL("reduce (cuda): ", op_name(op), " of ", dtype_name(x.dtype()), " into an output of dtype ",
               dtype_name(out.dtype()), " is not supported (x shape ", x.shape_str(), ")");
  });
}

void argmax_cuda(const Tensor& x, const Tensor& out) {
  assert_operands("argmax", x, out);
  // The front (kernels/reduce.cpp: argmax) allocates an i64 out and refuses an empty dim.
  EMBER_DEBUG_ASSERT(out.dtype() == DType::i64, "argmax: expected an i64 output, got ", dtype_name(out.dtype()));
  EMBER_DEBUG_ASSERT(x.size(1) > 0, "argmax: over an empty dim (x of shape (outer, R, inner) = ", x.shape_str(), ")");
  EMBER_DISPATCH_ALL(x.dtype(), "argmax (cuda)", [&]<typename T>() {
    const ArgmaxReducer<red_acc_t<T>> red{};
    launch_reduction<T, int64_t>(x, out, red, red);
  });
}

}  // namespace

void register_reduce() {
  reduce_table.set(DeviceType::CUDA, &reduce_cuda);
  argmax_table.set(DeviceType::CUDA, &argmax_cuda);
}

}  // namespace ember::kernels::cuda
