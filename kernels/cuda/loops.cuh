#pragma once
// Elementwise launch machinery shared by the CUDA elementwise ops, where, copy and fill
// (elementwise.cu, copy.cu): out[i] = f(in_0[i], ..., in_k[i]) over every element of one logical
// shape.
//
// Why it is shaped this way:
//  * Elementwise kernels are memory bound, so the fast path (every operand contiguous, or all
//    channels-last with out's strides, and its base 16-byte aligned for the vector width) moves 16 bytes per load/store
//    per thread: kVec elements, where kVec = 16 / the widest element among the operands (f32x4, 8 halves, 2 doubles).
//    The narrower operands then move kVec * their size (e.g. 4 bools next to 4 floats).
//  * Everything else takes the strided path: one element per thread, each operand's storage offset
//    computed from the linear index by its own indexer (dims already merged by make_indexer, so a
//    contiguous operand costs one multiply; broadcast operands have stride 0).
//  * Grid-stride loops over a grid capped by grid_for(). Index math is 64-bit whenever a tensor
//    needs it (past 2^31 elements or offsets); otherwise the strided path switches to Indexer32,
//    whose per-dim divisions are a multiply-high and a shift with precomputed magic numbers. A
//    64-bit division is a ~60-instruction software routine on the GPU, and two or three of them
//    per element would make a broadcast add compute bound.
//  * The op is a functor (plain struct with a __device__ operator()), not an extended lambda, so
//    no --extended-lambda flag is needed; ops pick their branch at run time from a member (a
//    warp-uniform switch costs nothing next to the memory traffic) to keep instantiations few.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ember/core/stream.h>
#include <ember/kernels/convert.h>
#include <ember/kernels/strided.h>
#include <ember/kernels/cuda/common.cuh>

namespace ember::kernels::cuda {

/// kVec elements of T moved as one aligned load/store (sizeof(T) * N is a power of two <= 16).
template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };

/// One typed input operand of launch_elementwise: a same-shaped (possibly strided) view.
template <typename T> struct Operand { const Tensor& t; };
template <typename T> Operand<T> operand(const Tensor& t) { return Operand<T>{t}; }

/// Division by a fixed divisor as a multiply-high, an add and a shift (Granlund-Montgomery, the
/// scheme of PyTorch's IntDivider). Exact for dividends and divisors below 2^31.
struct FastDiv32 {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;
  FastDiv32() = default;
  explicit FastDiv32(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t(1) << shift) < d) ++shift;  // shift = ceil(log2(d))
    // 2^32 * (2^shift - d) / d + 1 < 2^32 because 2^shift - d < d.
    multiplier = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, multiplier) + n) >> shift; }
};

/// Division by a fixed divisor in 64 bits, with FastDiv32's interface (the fallback when indices
/// may reach 2^31).
struct Div64 {
  int64_t divisor = 1;
  Div64() = default;
  explicit Div64(int64_t d) : divisor(d) {}
  __device__ int64_t div(int64_t n) const { return n / divisor; }
};

/// Calls launch.operator()<I, Dv>() with (uint32_t, FastDiv32) when both the iterated tensor (n
/// elements) and the indexed one (`other` elements) are below 2^31, else with (int64_t, Div64).
template <typename Launch> void with_index_width(int64_t n, int64_t other, Launch&& launch) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (n < kLimit && other < kLimit) launch.template operator()<uint32_t, FastDiv32>();
  else launch.template operator()<int64_t, Div64>();
}

/// StridedIndexer in 32-bit arithmetic, for tensors whose element count and largest offset are
/// below 2^31 (see fits_32bit_indexing).
struct Indexer32 {
  int ndim = 0;
  FastDiv32 sizes[kMaxDims];
  uint32_t strides[kMaxDims] = {};

  Indexer32() = default;
  explicit Indexer32(const StridedIndexer& ix) : ndim(ix.ndim) {
    for (int d = 0; d < ndim; ++d) {
      sizes[d] = FastDiv32(static_cast<uint32_t>(ix.sizes[d]));
      strides[d] = static_cast<uint32_t>(ix.strides[d]);
    }
  }
  /// Element offset of linear index i (< the tensor's numel).
  __device__ uint32_t operator()(uint32_t i) const {
    uint32_t off = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const uint32_t q = sizes[d].div(i);
      off += (i - q * sizes[d].divisor) * strides[d];
      i = q;
    }
    // What is left of i is the index along dim 0 (i < numel, so no division is needed).
    return ndim > 0 ? off + i * strides[0] : 0u;
  }
};

/// True when every element of t is reachable with 32-bit indices: numel and the largest element
/// offset from data_ptr() (strides are never negative) both below 2^31.
inline bool fits_32bit_indexing(const Tensor& t) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (t.numel() >= kLimit) return false;
  int64_t max_off = 0;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) max_off += (t.size(d) - 1) * t.stride(d);
  return max_off < kLimit;
}

/// Kernel-side view of a strided operand: base pointer plus the offset map (StridedIndexer with
/// 64-bit indices, Indexer32 with 32-bit ones).
template <typename T, typename Ix> struct StridedArg {
  const T* p;
  Ix idx;
  template <typename I> __device__ T operator[](I i) const { return p[idx(i)]; }
};

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

namespace detail {

template <int kVec, typename T> __device__ inline Vec<T, kVec> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, kVec>*>(p);
}

template <int kVec, typename F, typename Out, typename... V>
__device__ inline void apply_vec(const F& f, Out* out, const V&... in) {
  Vec<Out, kVec> r;
#pragma unroll
  for (int k = 0; k < kVec; ++k) r.v[k] = f(in.v[k]...);
  *reinterpret_cast<Vec<Out, kVec>*>(out) = r;
}

// All operands contiguous. Thread t handles vectors t, t + stride, ... of kVec elements
// (elements [v * kVec, v * kVec + kVec)), then the n % kVec tail one element per thread.
// With kVec == 1 there is no tail. Pointers must be aligned to sizeof(T) * kVec (checked by the
// launcher).
template <int kVec, typename F, typename Out, typename... Ins>
__global__ void __launch_bounds__(kBlock) contiguous_kernel(int64_t n, F f, Out* out, const Ins*... ins) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / kVec;
  for (int64_t v = tid; v < nvec; v += stride) {
    const int64_t base = v * kVec;
    apply_vec<kVec>(f, out + base, load_vec<kVec>(ins + base)...);
  }
  for (int64_t i = nvec * kVec + tid; i < n; i += stride) out[i] = f(ins[i]...);
}

// General strides, index type I (uint32_t with Indexer32, int64_t with StridedIndexer).
// kOutContig skips the output's index arithmetic (elementwise outputs are always contiguous;
// copy/fill destinations may not be). With I = uint32_t, i + stride cannot wrap: i < n < 2^31 and
// the capped grid has at most 2^24 threads.
template <bool kOutContig, typename I, typename Ix, typename F, typename Out, typename... Ins>
__global__ void __launch_bounds__(kBlock) strided_kernel(I n, F f, Out* out, Ix out_idx, StridedArg<Ins, Ix>... ins) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < n;
       i += stride) {
    const I o = kOutContig ? i : static_cast<I>(out_idx(i));
    out[o] = f(ins[i]...);
  }
}

template <bool kOutContig, typename I, typename Ix, typename F, typename Out, typename... Ins>
void launch_strided(int64_t n, const F& f, Out* out, const Tensor& out_t, cudaStream_t stream, Operand<Ins>... ins) {
  strided_kernel<kOutContig, I, Ix><<<grid_for(n), kBlock, 0, stream>>>(
      static_cast<I>(n), f, out, kOutContig ? Ix{} : Ix(make_indexer(out_t)),
      StridedArg<Ins, Ix>{static_cast<const Ins*>(ins.t.data_ptr()), Ix(make_indexer(ins.t))}...);
}

}  // namespace detail

/// out[i] = f(ins[i]...) for every element i of out's shape, on out's device and current stream.
/// Every operand has out's shape (broadcast views with stride 0 are fine) and lives on out's
/// device; Out and Ins are the C++ element types (the caller dispatched on dtype). out may be
/// strided; elements of out that alias each other (stride 0) get the same value written.
template <typename Out, typename F, typename... Ins>
void launch_elementwise(const Tensor& out, const F& f, Operand<Ins>... ins) {
  launch_on(out, [&](cudaStream_t stream) {
    const int64_t n = out.numel();
    Out* po = static_cast<Out*>(out.data_ptr());
    const bool out_contig = out.is_contiguous();
    // Flat: every operand walks its memory in order, row-major, or (channels-last) all with out's strides.
    const bool flat =
        out_contig ? (ins.t.is_contiguous() && ...)
                   : out.is_contiguous(MemoryFormat::channels_last) && ((ins.t.strides() == out.strides()) && ...);
    if (flat) {
      constexpr size_t kWidest = std::max({sizeof(Out), sizeof(Ins)...});
      constexpr int kVec = static_cast<int>(16 / kWidest);
      const bool aligned =
          is_aligned(po, sizeof(Out) * kVec) && (is_aligned(ins.t.data_ptr(), sizeof(Ins) * kVec) && ...);
      if constexpr (kVec > 1) {
        if (aligned && n >= kVec) {
          detail::contiguous_kernel<kVec><<<grid_for((n + kVec - 1) / kVec), kBlock, 0, stream>>>(
              n, f, po, static_cast<const Ins*>(ins.t.data_ptr())...);
          return;
        }
      }
      detail::contiguous_kernel<1>
          <<<grid_for(n), kBlock, 0, stream>>>(n, f, po, static_cast<const Ins*>(ins.t.data_ptr())...);
      return;
    }
    const bool small = fits_32bit_indexing(out) && (fits_32bit_indexing(ins.t) && ...);
    if (small) {
      if (out_contig) detail::launch_strided<true, uint32_t, Indexer32>(n, f, po, out, stream, ins...);
      else detail::launch_strided<false, uint32_t, Indexer32>(n, f, po, out, stream, ins...);
    } else {
      if (out_contig) detail::launch_strided<true, int64_t, StridedIndexer>(n, f, po, out, stream, ins...);
      else detail::launch_strided<false, int64_t, StridedIndexer>(n, f, po, out, stream, ins...);
    }
  });
}

/// The same-sized unsigned integer type: kernels that only move bits (copy without cast, where,
/// gathers) dispatch on element size instead of dtype.
template <size_t kBytes> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };

/// Calls fn.template operator()<U>() with U the unsigned type of `bytes` bytes.
template <typename Fn> void dispatch_bits(size_t bytes, const char* name, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    case 8:
      return fn.template operator()<uint64_t>();
  }
  EMBER_FAIL(name, ": unsupported element size ", bytes, " bytes");
}

}  // namespace ember::kernels::cuda
