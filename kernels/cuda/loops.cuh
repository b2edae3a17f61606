#pragma once
// Elementwise launch machinery shared by the group-1 CUDA kernels (elementwise ops, where, copy,
// fill): out[i] = f(in_0[i], ..., in_k[i]) over every element of one logical shape.
//
// Why it is shaped this way:
//  * Elementwise kernels are memory bound, so the fast path (every operand contiguous and its base
//    16-byte aligned for the vector width) moves 16 bytes per load/store per thread: kVec elements,
//    where kVec = 16 / the widest element among the operands (f32x4, 8 halves, 2 doubles). The
//    narrower operands then move kVec * their size (e.g. 4 bools next to 4 floats).
//  * Everything else takes the strided path: one element per thread, each operand's storage offset
//    computed from the linear index by its own StridedIndexer (dims already merged by make_indexer,
//    so a contiguous operand costs one multiply; broadcast operands have stride 0).
//  * Grid-stride loops over a grid capped by grid_for(), 64-bit indices throughout: tensors past
//    2^31 elements work, and huge launches loop instead of spawning millions of blocks.
//  * The op is a functor (plain struct with a __device__ operator()), not an extended lambda, so
//    no --extended-lambda flag is needed; ops pick their branch at run time from a member (a
//    warp-uniform switch costs nothing next to the memory traffic) to keep instantiations few.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/stream.h"
#include "kernels/convert.h"
#include "kernels/cuda/common.cuh"
#include "kernels/strided.h"

namespace ember::kernels::cuda {

/// kVec elements of T moved as one aligned load/store (sizeof(T) * N is a power of two <= 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

/// One typed input operand of launch_elementwise: a same-shaped (possibly strided) view.
template <typename T>
struct Operand {
  const Tensor& t;
};
template <typename T>
Operand<T> operand(const Tensor& t) {
  return Operand<T>{t};
}

/// Kernel-side view of a strided operand: base pointer plus the offset map.
template <typename T>
struct StridedArg {
  const T* p;
  StridedIndexer idx;
  __device__ T operator[](int64_t i) const { return p[idx(i)]; }
};

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

namespace detail {

template <int kVec, typename T>
__device__ inline Vec<T, kVec> load_vec(const T* p) {
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

// General strides. kOutContig skips the output's index arithmetic (elementwise outputs are always
// contiguous; copy/fill destinations may not be).
template <bool kOutContig, typename F, typename Out, typename... Ins>
__global__ void __launch_bounds__(kBlock)
    strided_kernel(int64_t n, F f, Out* out, StridedIndexer out_idx, StridedArg<Ins>... ins) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t o = kOutContig ? i : out_idx(i);
    out[o] = f(ins[i]...);
  }
}

}  // namespace detail

/// out[i] = f(ins[i]...) for every element i of out's shape, on out's device and current stream.
/// Every operand has out's shape (broadcast views with stride 0 are fine) and lives on out's
/// device; Out and Ins are the C++ element types (the caller dispatched on dtype). out may be
/// strided; elements of out that alias each other (stride 0) get the same value written.
template <typename Out, typename F, typename... Ins>
void launch_elementwise(const Tensor& out, const F& f, Operand<Ins>... ins) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  const cudaStream_t stream = stream_of(out);
  Out* po = static_cast<Out*>(out.data_ptr());
  const bool out_contig = out.is_contiguous();
  if (out_contig && (ins.t.is_contiguous() && ...)) {
    constexpr size_t kWidest = std::max({sizeof(Out), sizeof(Ins)...});
    constexpr int kVec = static_cast<int>(16 / kWidest);
    const bool aligned =
        is_aligned(po, sizeof(Out) * kVec) && (is_aligned(ins.t.data_ptr(), sizeof(Ins) * kVec) && ...);
    if constexpr (kVec > 1) {
      if (aligned && n >= kVec) {
        detail::contiguous_kernel<kVec><<<grid_for((n + kVec - 1) / kVec), kBlock, 0, stream>>>(
            n, f, po, static_cast<const Ins*>(ins.t.data_ptr())...);
        EMBER_LAUNCH_CHECK();
        return;
      }
    }
    detail::contiguous_kernel<1><<<grid_for(n), kBlock, 0, stream>>>(n, f, po,
                                                                   static_cast<const Ins*>(ins.t.data_ptr())...);
    EMBER_LAUNCH_CHECK();
    return;
  }
  if (out_contig) {
    detail::strided_kernel<true><<<grid_for(n), kBlock, 0, stream>>>(
        n, f, po, StridedIndexer{}, StridedArg<Ins>{static_cast<const Ins*>(ins.t.data_ptr()), make_indexer(ins.t)}...);
  } else {
    detail::strided_kernel<false><<<grid_for(n), kBlock, 0, stream>>>(
        n, f, po, make_indexer(out), StridedArg<Ins>{static_cast<const Ins*>(ins.t.data_ptr()), make_indexer(ins.t)}...);
  }
  EMBER_LAUNCH_CHECK();
}

/// The same-sized unsigned integer type: kernels that only move bits (copy without cast, where,
/// gathers) dispatch on element size instead of dtype.
template <size_t kBytes> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };

/// Calls fn.template operator()<U>() with U the unsigned type of `bytes` bytes.
template <typename Fn>
void dispatch_bits(size_t bytes, const char* name, Fn&& fn) {
  switch (bytes) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
  }
  EMBER_FAIL(name, ": unsupported element size ", bytes, " bytes");
}

}  // namespace ember::kernels::cuda
