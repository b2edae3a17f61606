// CUDA softmax / log-softmax (forward and backward) over the middle dim of a contiguous
// (outer, D, inner) tensor, and the fused cross-entropy over logits (N, C).
//
// Why the kernels are shaped this way:
//  - inner == 1 (softmax over the last dim, the common case): each row is handled by one warp
//    when D <= kWarpRowMax (8 rows per 256-thread block, no idle lanes on 10-class rows) and by
//    one block otherwise. Rows of up to kCachedRowMax elements are read ONCE: each thread loads
//    its kPer elements into registers (all loads issued before any is used, so a thread keeps
//    kPer loads in flight), the group reduces the max, then the sum of exp(x - max) from the
//    registers, and writes. Longer rows fall back to an online (max, sum of exp(x - max)) pair
//    per thread, merged by shuffles and shared memory: the row is read once for the statistics
//    and once to write.
//  - inner > 1 (softmax over a leading or middle dim): one thread per (outer, inner) column,
//    walking D with stride inner. Consecutive threads take consecutive inner indices, so each
//    step of the walk is a coalesced load across the warp.
//  - cross-entropy forward fuses the row's (max, sum exp) with the row sum needed by label
//    smoothing and the gather of x[n, t_n]; backward recomputes each row's (max, sum exp) in
//    the accumulation type instead of trusting the saved lse, as the CPU twin does. The per-row
//    loss, lse and grad_rows are in the accumulation type (kernels::cross_entropy_row_dtype).
// Known limits: rows past kCachedRowMax and the backward kernels read their operands twice, with
// scalar loads (coalesced across the warp); the strided kernel runs one thread per column, so a
// huge D with few columns is slow (correct).
// NaN and infinite logits give what kernels/softmax.h defines (the CPU twin's arithmetic): merge()
// keeps a NaN seen by any thread, and finish() makes the sum NaN for rows whose max is +-inf.
// f16/bf16 compute in f32, f64 in f64. exp/log are the accurate library functions, not the
// __expf intrinsics: these kernels are bound by memory traffic, and results are compared
// against the CPU to a few ulp.
// An out-of-range target does not index memory: its row's loss is NaN and the kernel raises a
// device check (core/device_check.h) with the row and the value. Nothing waits for it: the Error
// naming them is thrown at the next synchronization (when the loss is read), so the forward pass
// costs no host round trip (EMBER_SYNC_DEVICE_CHECKS=1 throws at the call instead).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

#include <ember/core/stream.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/softmax.h>
#include <ember/core/cuda/device_check.cuh>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int kWarpRowMax = 1024;  // rows up to this length: one warp per row
constexpr int kCachedRowMax = 8192;  // rows up to this length are kept in registers (kBlock * 32)
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr int64_t kMaxGrid = 65536;

__device__ __forceinline__ float dev_exp(float v) { return expf(v); }
__device__ __forceinline__ double dev_exp(double v) { return exp(v); }
__device__ __forceinline__ float dev_log(float v) { return logf(v); }
__device__ __forceinline__ double dev_log(double v) { return log(v); }
template <typename A> __device__ __forceinline__ A neg_inf() { return -std::numeric_limits<A>::infinity(); }

/// Running maximum m and s = sum of exp(x - m) over the elements seen.
template <typename A> struct MaxSum {
  A m;
  A s;
};

/// Folds one element into (m, s). -inf elements add nothing (and keep s == 0 while m == -inf,
/// avoiding exp(-inf - -inf) = NaN); NaN elements make s NaN.
template <typename A> __device__ __forceinline__ void online_add(MaxSum<A>& ms, A x) {
  if (x > ms.m) {
    ms.s = ms.s * dev_exp(ms.m - x) + A(1);
    ms.m = x;
  } else if (x != neg_inf<A>()) {
    ms.s += dev_exp(x - ms.m);
  }
}

/// Merges two partial (m, s). A side whose m is -inf has seen only -inf or NaN entries (or none);
/// exp(m_side - m) would be NaN for it when m is -inf too, so its sum is scaled by 0 instead. Its
/// sum is then 0, or NaN when it saw a NaN, and multiplying (never replacing) keeps that NaN.
template <typename A> __device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  const A sa = a.s * (a.m == neg_inf<A>() ? A(0) : dev_exp(a.m - m));
  const A sb = b.s * (b.m == neg_inf<A>() ? A(0) : dev_exp(b.m - m));
  return {m, sa + sb};
}

/// The row's (m, s) as kernels/softmax.h defines them: when m is +inf (a +inf entry) or -inf (only
/// -inf entries) the CPU's sum meets inf - inf or -inf - -inf and is NaN, so s is NaN here too.
/// (The online pass alone would give s = 1 for a +inf row and 0 for an all -inf row.)
template <typename A> __device__ __forceinline__ MaxSum<A> finish(MaxSum<A> ms) {
  if (isinf(ms.m)) ms.s = std::numeric_limits<A>::quiet_NaN();
  return ms;
}

/// Which threads cooperate on a row: a warp (kWarp) or the whole 1-D block.
template <bool kWarp> struct RowGroup {
  __device__ static int rank() { return kWarp ? static_cast<int>(threadIdx.x & 31u) : static_cast<int>(threadIdx.x); }
  __device__ static int size() { return kWarp ? 32 : static_cast<int>(blockDim.x); }
  __device__ static int64_t first() {
    return kWarp ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  }
  __device__ static int64_t step() {
    return kWarp ? static_cast<int64_t>(gridDim.x) * (blockDim.x / 32) : static_cast<int64_t>(gridDim.x);
  }
  /// Reduces v over the group; every member gets the result. smem: 32 values (block groups only).
  template <typename V, typename Combine> __device__ static V reduce(V v, Combine combine, V identity, V* smem) {
    if constexpr (kWarp) return warp_reduce(v, combine);
    else return block_reduce(v, combine, identity, smem);
  }
};

/// A row held in registers by a group of kSize threads (a warp or a kBlock block), kPer elements
/// per thread, moved in vectors of kVec elements: thread `rank` holds vectors rank, rank + kSize,
/// ... of the row, so each load instruction of a warp reads 32 consecutive vectors. kVec > 1
/// needs D % kVec == 0 and rows aligned to a vector (the launcher checks). Indices are int:
/// D <= kCachedRowMax. The group size is a constant, so the kPer / kVec loads of a thread are
/// one base address plus immediate offsets.
template <typename T, int kSize, int kPer, int kVec> struct CachedRow {
  static_assert(kPer % kVec == 0, "a thread holds whole vectors");
  static constexpr int kVecs = kPer / kVec;
  struct alignas(sizeof(T) * kVec) Vec {
    T val[kVec];
  };
  /// Row index of the thread's element i (vector i / kVec, lane i % kVec).
  __device__ static int index(int rank, int i) { return (rank + (i / kVec) * kSize) * kVec + i % kVec; }
  /// Whether the thread's vector q lies in the row (wholly, as D % kVec == 0).
  __device__ static bool in_row(int rank, int q, int D) { return (rank + q * kSize) * kVec < D; }

  /// Loads the thread's share of xr into v (slots past D hold -inf) and returns its max (NaN
  /// entries never win a comparison, as in online_add).
  template <typename A> __device__ static A load(const T* __restrict__ xr, int D, int rank, A (&v)[kPer]) {
    const Vec* xv = reinterpret_cast<const Vec*>(xr);
#pragma unroll
    for (int q = 0; q < kVecs; ++q) {
      Vec w;
      if (in_row(rank, q, D)) w = xv[rank + q * kSize];
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[q * kVec + j] = in_row(rank, q, D) ? load_as<A>(w.val[j]) : neg_inf<A>();
    }
    A m = neg_inf<A>();
#pragma unroll
    for (int i = 0; i < kPer; ++i) m = v[i] > m ? v[i] : m;
    return m;
  }

  /// The thread's part of s = sum of exp(v - m) over the row's entries (NaN once an entry is NaN;
  /// finish() then makes the row's s NaN when m is +-inf, as the online pass does). With
  /// keep_exp, v[i] becomes exp(v[i] - m), so the softmax write needs no second exp.
  template <typename A> __device__ static A exp_sum(A (&v)[kPer], A m, int D, int rank, bool keep_exp) {
    A s = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (index(rank, i) < D) {
        const A e = dev_exp(v[i] - m);
        s += e;
        if (keep_exp) v[i] = e;
      }
    }
    return s;
  }

  /// Writes f(v[i]) to the thread's elements of yr.
  template <typename A, typename F>
  __device__ static void store(T* __restrict__ yr, int D, int rank, const A (&v)[kPer], F f) {
    Vec* yv = reinterpret_cast<Vec*>(yr);
#pragma unroll
    for (int q = 0; q < kVecs; ++q) {
      if (!in_row(rank, q, D)) continue;
      Vec w;
#pragma unroll
      for (int j = 0; j < kVec; ++j) w.val[j] = store_as<T>(f(v[q * kVec + j]));
      yv[rank + q * kSize] = w;
    }
  }
};

template <typename A> __device__ __forceinline__ A max_of(A a, A b) { return a > b ? a : b; }

/// Threads cooperating on a row in the cached kernels: a warp, or the kBlock threads of a block.
template <bool kWarp> constexpr int kGroupSize = kWarp ? 32 : kBlock;

// ---- softmax forward ----

/// x, y: (rows, D) contiguous, D <= kPer * group size. One group (warp or block) per row,
/// grid-stride over rows; the row stays in registers between the reductions and the write, so
/// it is read once and each element costs one exp.
template <typename T, bool kWarp, int kPer, int kVec>
__global__ void __launch_bounds__(kBlock)
    softmax_rows_cached_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int D, bool log) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  using Row = CachedRow<T, kGroupSize<kWarp>, kPer, kVec>;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  auto add = [](A a, A b) { return a + b; };
  auto greater = [](A a, A b) { return max_of(a, b); };
  const int rank = G::rank();
  for (int64_t row = G::first(); row < rows; row += G::step()) {  // uniform over the group
    A v[kPer];
    const A m = G::reduce(Row::load(x + row * D, D, rank, v), greater, neg_inf<A>(), smem);
    A s = G::reduce(Row::exp_sum(v, m, D, rank, !log), add, A(0), smem);
    s = finish(MaxSum<A>{m, s}).s;
    if (log) {
      const A log_s = dev_log(s);
      Row::store(y + row * D, D, rank, v, [&](A vi) { return (vi - m) - log_s; });
    } else {
      Row::store(y + row * D, D, rank, v, [&](A e) { return e / s; });
    }
  }
}

/// x, y: (rows, D) contiguous, any D (used past kCachedRowMax). One group (warp or block) per
/// row, grid-stride over rows.
template <typename T, bool kWarp>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(MaxSum<A>)];
  auto* smem = reinterpret_cast<MaxSum<A>*>(smem_raw);
  auto combine = [](MaxSum<A> a, MaxSum<A> b) { return merge(a, b); };
  const int rank = G::rank(), gsize = G::size();
  for (int64_t row = G::first(); row < rows; row += G::step()) {  // uniform over the group
    const T* xr = x + row * D;
    T* yr = y + row * D;
    MaxSum<A> ms{neg_inf<A>(), A(0)};
    for (int64_t d = rank; d < D; d += gsize) online_add(ms, load_as<A>(xr[d]));
    ms = finish(G::reduce(ms, combine, MaxSum<A>{neg_inf<A>(), A(0)}, smem));
    if (log) {
      const A log_s = dev_log(ms.s);
      for (int64_t d = rank; d < D; d += gsize) yr[d] = store_as<T>((load_as<A>(xr[d]) - ms.m) - log_s);
    } else {
      for (int64_t d = rank; d < D; d += gsize) yr[d] = store_as<T>(dev_exp(load_as<A>(xr[d]) - ms.m) / ms.s);
    }
  }
}

/// x, y: (outer, D, inner) contiguous, inner > 1. One thread per (o, i) column.
template <typename T>
__global__ void softmax_strided_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t D,
                                       int64_t inner, bool log) {
  using A = acc_t<T>;
  const int64_t n = outer * inner;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = idx / inner, i = idx - o * inner;
    const int64_t base = o * D * inner + i;
    MaxSum<A> ms{neg_inf<A>(), A(0)};
    for (int64_t d = 0; d < D; ++d) online_add(ms, load_as<A>(x[base + d * inner]));
    ms = finish(ms);
    if (log) {
      const A log_s = dev_log(ms.s);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t k = base + d * inner;
        y[k] = store_as<T>((load_as<A>(x[k]) - ms.m) - log_s);
      }
    } else {
      for (int64_t d = 0; d < D; ++d) {
        const int64_t k = base + d * inner;
        y[k] = store_as<T>(dev_exp(load_as<A>(x[k]) - ms.m) / ms.s);
      }
    }
  }
}

// ---- softmax backward ----
// softmax:     dx = y * (g - sum_d g*y)
// log-softmax: dx = g - exp(y) * sum_d g

template <typename T, bool kWarp>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx,
                                             int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(A)];
  A* smem = reinterpret_cast<A*>(smem_raw);
  auto add = [](A a, A b) { return a + b; };
  const int rank = G::rank(), gsize = G::size();
  for (int64_t row = G::first(); row < rows; row += G::step()) {
    const int64_t base = row * D;
    A acc = 0;
    if (log) {
      for (int64_t d = rank; d < D; d += gsize) acc += load_as<A>(g[base + d]);
    } else {
      for (int64_t d = rank; d < D; d += gsize) acc += load_as<A>(g[base + d]) * load_as<A>(y[base + d]);
    }
    acc = G::reduce(acc, add, A(0), smem);
    for (int64_t d = rank; d < D; d += gsize) {
      const A gv = load_as<A>(g[base + d]), yv = load_as<A>(y[base + d]);
      dx[base + d] = store_as<T>(log ? gv - dev_exp(yv) * acc : yv * (gv - acc));
    }
  }
}

template <typename T>
__global__ void softmax_backward_strided_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx,
                                                int64_t outer, int64_t D, int64_t inner, bool log) {
  using A = acc_t<T>;
  const int64_t n = outer * inner;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = idx / inner, i = idx - o * inner;
    const int64_t base = o * D * inner + i;
    A acc = 0;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = base + d * inner;
      acc += log ? load_as<A>(g[k]) : load_as<A>(g[k]) * load_as<A>(y[k]);
    }
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = base + d * inner;
      const A gv = load_as<A>(g[k]), yv = load_as<A>(y[k]);
      dx[k] = store_as<T>(log ? gv - dev_exp(yv) * acc : yv * (gv - acc));
    }
  }
}

// ---- cross-entropy ----

template <typename A> struct CeStats {
  A m;  // running max
  A s;  // sum exp(x - m)
  double sum;  // plain sum of x (label smoothing; see ce_row_loss)
};

/// The loss of a row from its max m, s = sum exp(x - m), x_t and the plain sum of x (label
/// smoothing), as the CPU twin computes it: log(s) + (1 - ls) (m - x_t) + ls (m - mean x), so that
/// huge logits cancel (m - x_t is exact for nearby values) before the small log(s) is added; the
/// form lse - x_t would lose log(s) to the rounding of lse (|x| ~ 1e4: ~5e-4 in f32). The sum is
/// accumulated in double, as the CPU's sum of m - x is: an f32 sum of logits near 1e5 put m - mean x
/// off by 1e-3. ls = 1 leaves the target out (0 * inf would make a -inf target's loss NaN).
template <typename A> __device__ __forceinline__ A ce_row_loss(A m, A s, A xt, double sum, int64_t C, A smooth) {
  A l = dev_log(s);
  if (smooth != A(1)) l += (A(1) - smooth) * (m - xt);
  if (smooth != A(0)) l += smooth * static_cast<A>(static_cast<double>(m) - sum / static_cast<double>(C));
  return l;
}

/// cross_entropy_kernel for rows of C <= kPer * group size: the row is read once, into
/// registers. The target is read first, with the row; the thread holding x[n, t_n] writes the
/// row's loss and lse (rank 0 does for an out-of-range target), so no load waits at the end.
template <typename T, bool kWarp, int kPer, int kVec>
__global__ void __launch_bounds__(kBlock)
    cross_entropy_cached_kernel(const T* __restrict__ x, const int64_t* __restrict__ target, int64_t target_stride,
                                acc_t<T>* __restrict__ loss, acc_t<T>* __restrict__ lse, int64_t N, int C, double ls,
                                DeviceErrorSlot err) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  using Row = CachedRow<T, kGroupSize<kWarp>, kPer, kVec>;
  struct SumPair {
    A s;  // sum exp(x - m)
    double sum;  // plain sum of x (label smoothing)
  };
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(SumPair)];
  auto greater = [](A a, A b) { return max_of(a, b); };
  auto add = [](SumPair a, SumPair b) { return SumPair{a.s + b.s, a.sum + b.sum}; };
  const A smooth = static_cast<A>(ls);
  const int rank = G::rank();
  for (int64_t row = G::first(); row < N; row += G::step()) {
    const int64_t t = target[row * target_stride];
    const bool bad = t < 0 || t >= C;
    const int target_index = bad ? -1 : static_cast<int>(t);  // int compares below
    A v[kPer];
    const A m = G::reduce(Row::load(x + row * C, C, rank, v), greater, neg_inf<A>(), reinterpret_cast<A*>(smem_raw));
    SumPair part{A(0), 0.0};
    A xt = 0;
    bool holds_target = false;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = Row::index(rank, i);
      if (c < C) part.sum += static_cast<double>(v[i]);
      if (c == target_index) xt = v[i], holds_target = true;
    }
    part.s = Row::exp_sum(v, m, C, rank, false);
    const SumPair st = G::reduce(part, add, SumPair{A(0), 0.0}, reinterpret_cast<SumPair*>(smem_raw));
    const A s = finish(MaxSum<A>{m, st.s}).s;
    if (bad ? rank == 0 : holds_target) {
      if (bad) raise_device_error(err, row, t);
      const A l = bad ? std::numeric_limits<A>::quiet_NaN() : ce_row_loss(m, s, xt, st.sum, C, smooth);
      loss[row] = l;
      lse[row] = m + dev_log(s);
    }
  }
}

/// logits (N, C) contiguous; target (N) i64 with stride target_stride; loss, lse (N) in the
/// accumulation type, contiguous. err: raised with (row, target) by a row whose target is outside [0, C).
template <typename T, bool kWarp>
__global__ void cross_entropy_kernel(const T* __restrict__ x, const int64_t* __restrict__ target, int64_t target_stride,
                                     acc_t<T>* __restrict__ loss, acc_t<T>* __restrict__ lse, int64_t N, int64_t C,
                                     double ls, DeviceErrorSlot err) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(CeStats<A>)];
  auto* smem = reinterpret_cast<CeStats<A>*>(smem_raw);
  auto combine = [](CeStats<A> a, CeStats<A> b) {
    const MaxSum<A> ms = merge(MaxSum<A>{a.m, a.s}, MaxSum<A>{b.m, b.s});
    return CeStats<A>{ms.m, ms.s, a.sum + b.sum};
  };
  const A smooth = static_cast<A>(ls);
  const int rank = G::rank(), gsize = G::size();
  for (int64_t row = G::first(); row < N; row += G::step()) {
    const T* xr = x + row * C;
    MaxSum<A> ms{neg_inf<A>(), A(0)};
    double sum = 0;
    for (int64_t c = rank; c < C; c += gsize) {
      const A v = load_as<A>(xr[c]);
      online_add(ms, v);
      sum += static_cast<double>(v);
    }
    CeStats<A> st = G::reduce(CeStats<A>{ms.m, ms.s, sum}, combine, CeStats<A>{neg_inf<A>(), A(0), 0.0}, smem);
    st.s = finish(MaxSum<A>{st.m, st.s}).s;
    if (rank == 0) {
      const int64_t t = target[row * target_stride];
      const bool bad = t < 0 || t >= C;
      if (bad) raise_device_error(err, row, t);
      const A l =
          bad ? std::numeric_limits<A>::quiet_NaN() : ce_row_loss(st.m, st.s, load_as<A>(xr[t]), st.sum, C, smooth);
      loss[row] = l;
      lse[row] = st.m + dev_log(st.s);
    }
  }
}

/// dlogits[n, c] = g_n * (exp((x[n, c] - m_n) - log s_n) - (1 - ls) * [c == t_n] - ls / C), with
/// the row's max m_n and s_n = sum exp(x - m_n) recomputed here, one group (warp or block) per row
/// as in the forward pass, as the CPU twin does: exp(x - lse) would carry the saved lse's rounding
/// into every probability (|x| ~ 1e4: a relative 5e-4 in f32). logits and dlogits (N, C) contiguous; grad_rows and
/// target (N) read with their strides. Targets were validated by the forward pass; an
/// out-of-range one just never matches c.
template <typename T, bool kWarp>
__global__ void cross_entropy_backward_rows_kernel(const acc_t<T>* __restrict__ grad_rows, int64_t grad_stride,
                                                   const T* __restrict__ x, const int64_t* __restrict__ target,
                                                   int64_t target_stride, T* __restrict__ dx, int64_t N, int64_t C,
                                                   double ls) {
  using A = acc_t<T>;
  using G = RowGroup<kWarp>;
  __shared__ __align__(16) unsigned char smem_raw[32 * sizeof(MaxSum<A>)];
  auto* smem = reinterpret_cast<MaxSum<A>*>(smem_raw);
  auto combine = [](MaxSum<A> a, MaxSum<A> b) { return merge(a, b); };
  const A smooth = static_cast<A>(ls);
  const A uniform = smooth / static_cast<A>(C);
  const A on_target = A(1) - smooth;
  const int rank = G::rank(), gsize = G::size();
  for (int64_t row = G::first(); row < N; row += G::step()) {
    const T* xr = x + row * C;
    MaxSum<A> ms{neg_inf<A>(), A(0)};
    for (int64_t c = rank; c < C; c += gsize) online_add(ms, load_as<A>(xr[c]));
    ms = finish(G::reduce(ms, combine, MaxSum<A>{neg_inf<A>(), A(0)}, smem));
    const A log_s = dev_log(ms.s);
    const A g = static_cast<A>(grad_rows[row * grad_stride]);
    const int64_t t = target[row * target_stride];
    for (int64_t c = rank; c < C; c += gsize) {
      const A p = dev_exp((load_as<A>(xr[c]) - ms.m) - log_s);
      dx[row * C + c] = store_as<T>(g * (p - (c == t ? on_target : A(0)) - uniform));
    }
  }
}

// ---- launchers ----

int warp_rows_grid(int64_t rows) { return static_cast<int>(std::min(ceil_div(rows, kWarpsPerBlock), kMaxGrid)); }
int block_rows_grid(int64_t rows) { return static_cast<int>(std::min(rows, kMaxGrid)); }

/// Calls launch(kWarp, kPer, kVec, grid) (the first three as std::integral_constant) with the
/// layout of the cached-row kernels for rows of length D <= kCachedRowMax: a warp per row up to
/// kWarpRowMax, a block beyond; kPer the registers per thread that hold the row; kVec the widest
/// vector (16 bytes, kPer elements at most) that D and the alignment of every pointer in `ptrs`
/// allow, else 1.
template <typename T, typename Launch>
void with_cached_rows(int64_t rows, int64_t D, std::initializer_list<const void*> ptrs, Launch&& launch) {
  static_assert(kCachedRowMax == 32 * kBlock && kWarpRowMax == 32 * 32, "the kPer cases below cover the row lengths");
  auto with_vec = [&](auto warp, auto per, int grid) {
    constexpr int kVec = std::min<int>(16 / sizeof(T), decltype(per)::value);
    bool fits = D % kVec == 0;
    for (const void* p : ptrs) fits = fits && reinterpret_cast<uintptr_t>(p) % (kVec * sizeof(T)) == 0;
    if (fits) launch(warp, per, std::integral_constant<int, kVec>{}, grid);
    else launch(warp, per, std::integral_constant<int, 1>{}, grid);
  };
  using Warp = std::true_type;
  using Block = std::false_type;
  if (D <= 4 * 32) with_vec(Warp{}, std::integral_constant<int, 4>{}, warp_rows_grid(rows));
  else if (D <= kWarpRowMax) with_vec(Warp{}, std::integral_constant<int, 32>{}, warp_rows_grid(rows));
  else if (D <= 16 * kBlock) with_vec(Block{}, std::integral_constant<int, 16>{}, block_rows_grid(rows));
  else with_vec(Block{}, std::integral_constant<int, 32>{}, block_rows_grid(rows));
}

// The launchers' operand checks repeat what the fronts (kernels/softmax.cpp) guarantee: debug-only.
void check_same_cuda(const char* what, const Tensor& ref, std::initializer_list<const Tensor*> others) {
  EMBER_DEBUG_ASSERT(ref.device().is_cuda(), what, ": expected CUDA tensors, got one on ", ref.device().str());
  for (const Tensor* t : others) {
    EMBER_DEBUG_ASSERT(t->device() == ref.device(), what, ": operands on different devices: ", ref.device().str(),
                       " and ", t->device().str(), " (shapes ", ref.shape_str(), " and ", t->shape_str(), ")");
  }
}

/// (outer, D, inner) of a 3-D contiguous operand.
void check_3d(const char* what, const Tensor& t, const Tensor& like) {
  EMBER_DEBUG_ASSERT(t.dim() == 3 && is_dense(t) && t.sizes() == like.sizes() && t.dtype() == like.dtype(), what,
                     ": expected contiguous (outer, D, inner) operands of one shape and dtype, got ", t.shape_str(),
                     " ", dtype_name(t.dtype()), " and ", like.shape_str(), " ", dtype_name(like.dtype()));
}

void softmax_cuda(const Tensor& x, const Tensor& out, bool log) {
  check_same_cuda("softmax", x, {&out});
  check_3d("softmax", x, x);
  check_3d("softmax", out, x);
  const int64_t outer = x.size(0), D = x.size(1), inner = x.size(2);
  launch_on(x, [&](cudaStream_t stream) {
    EMBER_DISPATCH_FLOAT(x.dtype(), "softmax (cuda)", [&]<typename T>() {
      const T* xp = static_cast<const T*>(x.data_ptr());
      T* yp = static_cast<T*>(out.data_ptr());
      if (inner == 1 && D <= kCachedRowMax) {
        with_cached_rows<T>(outer, D, {xp, yp}, [&](auto warp, auto per, auto vec, int grid) {
          softmax_rows_cached_kernel<T, decltype(warp)::value, decltype(per)::value, decltype(vec)::value>
              <<<grid, kBlock, 0, stream>>>(xp, yp, outer, static_cast<int>(D), log);
        });
      } else if (inner == 1) {
        softmax_rows_kernel<T, false><<<block_rows_grid(outer), kBlock, 0, stream>>>(xp, yp, outer, D, log);
      } else {
        softmax_strided_kernel<T><<<grid_for(outer * inner), kBlock, 0, stream>>>(xp, yp, outer, D, inner, log);
      }
    });
  });
}

void softmax_backward_cuda(const Tensor& grad, const Tensor& y, const Tensor& out, bool log) {
  check_same_cuda("softmax_backward", grad, {&y, &out});
  check_3d("softmax_backward", grad, grad);
  check_3d("softmax_backward", y, grad);
  check_3d("softmax_backward", out, grad);
  const int64_t outer = grad.size(0), D = grad.size(1), inner = grad.size(2);
  launch_on(grad, [&](cudaStream_t stream) {
    EMBER_DISPATCH_FLOAT(grad.dtype(), "softmax_backward (cuda)", [&]<typename T>() {
      const T* gp = static_cast<const T*>(grad.data_ptr());
      const T* yp = static_cast<const T*>(y.data_ptr());
      T* dp = static_cast<T*>(out.data_ptr());
      if (inner == 1) {
        if (D <= kWarpRowMax) {
          softmax_backward_rows_kernel<T, true>
              <<<warp_rows_grid(outer), kBlock, 0, stream>>>(gp, yp, dp, outer, D, log);
        } else {
          softmax_backward_rows_kernel<T, false>
              <<<block_rows_grid(outer), kBlock, 0, stream>>>(gp, yp, dp, outer, D, log);
        }
      } else {
        softmax_backward_strided_kernel<T>
            <<<grid_for(outer * inner), kBlock, 0, stream>>>(gp, yp, dp, outer, D, inner, log);
      }
    });
  });
}

void check_rows(const char* what, const Tensor& t, int64_t N, DType dtype, const char* name) {
  EMBER_DEBUG_ASSERT(t.dim() == 1 && t.size(0) == N && t.dtype() == dtype, what, ": expected ", name, " of shape [", N,
                     "] and dtype ", dtype_name(dtype), ", got ", t.shape_str(), " ", dtype_name(t.dtype()));
}

/// The error of a raised cross-entropy check: info {C, N}, (row, target value).
std::string describe_bad_target(const DeviceCheckInfo& info, int64_t row, int64_t value) {
  return "cross_entropy: target[" + std::to_string(row) + "] = " + std::to_string(value) + " is out of range [0, " +
         std::to_string(info.arg0) + ") for logits of shape [" + std::to_string(info.arg1) + ", " +
         std::to_string(info.arg0) + "]";
}

void cross_entropy_cuda(const Tensor& logits, const Tensor& target, double ls, const Tensor& loss, const Tensor& lse) {
  check_same_cuda("cross_entropy", logits, {&target, &loss, &lse});
  EMBER_DEBUG_ASSERT(logits.dim() == 2 && is_dense(logits), "cross_entropy: expected contiguous logits (N, C), got ",
                     logits.shape_str());
  const int64_t N = logits.size(0), C = logits.size(1);
  check_rows("cross_entropy", target, N, DType::i64, "target");
  const DType row_dtype = cross_entropy_row_dtype(logits.dtype());
  check_rows("cross_entropy", loss, N, row_dtype, "loss");
  check_rows("cross_entropy", lse, N, row_dtype, "lse");
  EMBER_DEBUG_ASSERT(is_dense(loss) && is_dense(lse), "cross_entropy: loss and lse must be contiguous");
  if (N == 0) return;
  EMBER_CHECK(C > 0, "cross_entropy: logits of shape ", logits.shape_str(), " have no classes");
  // Launched by hand, not through launch_on: the device check is set up before the launch and told
  // of it after the launch check.
  DeviceGuard guard(logits.device());
  cudaStream_t stream = stream_of(logits);
  DeviceCheck check({"cross_entropy (cuda)", C, N, &describe_bad_target}, current_stream(logits.device()));
  const DeviceErrorSlot& bad = check.slot();
  EMBER_DISPATCH_FLOAT(logits.dtype(), "cross_entropy (cuda)", [&]<typename T>() {
    const T* xp = static_cast<const T*>(logits.data_ptr());
    const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
    acc_t<T>* lp = static_cast<acc_t<T>*>(loss.data_ptr());
    acc_t<T>* sp = static_cast<acc_t<T>*>(lse.data_ptr());
    if (C <= kCachedRowMax) {
      with_cached_rows<T>(N, C, {xp}, [&](auto warp, auto per, auto vec, int grid) {
        cross_entropy_cached_kernel<T, decltype(warp)::value, decltype(per)::value, decltype(vec)::value>
            <<<grid, kBlock, 0, stream>>>(xp, tp, target.stride(0), lp, sp, N, static_cast<int>(C), ls, bad);
      });
    } else {
      cross_entropy_kernel<T, false>
          <<<block_rows_grid(N), kBlock, 0, stream>>>(xp, tp, target.stride(0), lp, sp, N, C, ls, bad);
    }
    EMBER_LAUNCH_CHECK();
  });
  check.launched();
}

void cross_entropy_backward_cuda(const Tensor& grad_rows, const Tensor& logits, const Tensor& target, const Tensor& lse,
                                 double ls, const Tensor& dlogits) {
  check_same_cuda("cross_entropy_backward", logits, {&grad_rows, &target, &lse, &dlogits});
  EMBER_DEBUG_ASSERT(logits.dim() == 2 && is_dense(logits),
                     "cross_entropy_backward: expected contiguous logits (N, C), got ", logits.shape_str());
  EMBER_DEBUG_ASSERT(dlogits.sizes() == logits.sizes() && is_dense(dlogits) && dlogits.dtype() == logits.dtype(),
                     "cross_entropy_backward: dlogits ", dlogits.shape_str(), " ", dtype_name(dlogits.dtype()),
                     " does not match logits ", logits.shape_str(), " ", dtype_name(logits.dtype()));
  const int64_t N = logits.size(0), C = logits.size(1);
  const DType row_dtype = cross_entropy_row_dtype(logits.dtype());
  check_rows("cross_entropy_backward", grad_rows, N, row_dtype, "grad_rows");
  check_rows("cross_entropy_backward", target, N, DType::i64, "target");
  check_rows("cross_entropy_backward", lse, N, row_dtype, "lse");
  launch_on(logits, [&](cudaStream_t stream) {
    EMBER_DISPATCH_FLOAT(logits.dtype(), "cross_entropy_backward (cuda)", [&]<typename T>() {
      const acc_t<T>* gp = static_cast<const acc_t<T>*>(grad_rows.data_ptr());
      const T* xp = static_cast<const T*>(logits.data_ptr());
      const int64_t* tp = static_cast<const int64_t*>(target.data_ptr());
      T* dp = static_cast<T*>(dlogits.data_ptr());
      if (C <= kWarpRowMax) {
        cross_entropy_backward_rows_kernel<T, true>
            <<<warp_rows_grid(N), kBlock, 0, stream>>>(gp, grad_rows.stride(0), xp, tp, target.stride(0), dp, N, C, ls);
      } else {
        cross_entropy_backward_rows_kernel<T, false><<<block_rows_grid(N), kBlock, 0, stream>>>(
            gp, grad_rows.stride(0), xp, tp, target.stride(0), dp, N, C, ls);
      }
    });
  });
}

}  // namespace

void register_softmax() {
  softmax_table.set(DeviceType::CUDA, &softmax_cuda);
  softmax_backward_table.set(DeviceType::CUDA, &softmax_backward_cuda);
  cross_entropy_table.set(DeviceType::CUDA, &cross_entropy_cuda);
  cross_entropy_backward_table.set(DeviceType::CUDA, &cross_entropy_backward_cuda);
}

}  // namespace ember::kernels::cuda
