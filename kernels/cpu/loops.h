#pragma once
// Helpers for CPU kernels that walk several same-shaped, arbitrarily strided operands together.
//
// LoopGeometry<N> merges dims jointly for N operands (a dim folds into the one inside it only
// when it does so for every operand), then strided_runs() hands the caller runs along the
// innermost dim: (offsets of the run's first element per operand, inner stride per operand,
// length). The caller's inner loop is a plain pointer loop, and when every inner stride is 1 the
// caller can take a unit-stride loop the compiler vectorizes. No division per element.
#include <algorithm>
#include <array>
#include <cstdint>

#include <ember/core/shape.h>
#include <ember/kernels/strided.h>

// EMBER_NOINLINE: one out-of-line copy of a function, however many callers it has (a loop that
// every instantiation of a kernel would otherwise repeat inline: kernels/cpu/elementwise.cpp).
#define EMBER_NOINLINE __attribute__((noinline))

// EMBER_CPU_CLONES: a hot loop compiled twice on x86-64 GCC/Clang, for the baseline ISA and for
// x86-64-v3 (AVX2 + FMA), picked at load time, so a default build (no -march) still runs 256-bit
// vectors where the CPU has them. "arch=haswell" would not do: its resolver asks whether the CPU
// *is* a Haswell, not whether it has the features. -DEMBER_GEMM_NO_CLONES turns this off.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(EMBER_GEMM_NO_CLONES)
#define EMBER_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define EMBER_CPU_CLONES
#endif

namespace ember::kernels::cpu {

/// Elements per parallel_for chunk for cheap elementwise work.
constexpr int64_t kGrain = 32768;

template <size_t N> struct LoopGeometry {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

/// Joint geometry of N operands of logical shape `sizes` with the given strides (element units).
/// The dims are walked in operand 0's memory order (by its strides, largest outermost; ties keep
/// the logical order), so that a channels-last or otherwise permuted output is written in order
/// and, when the inputs share its layout, everything merges into one unit-stride run.
template <size_t N> LoopGeometry<N> make_geometry(const Shape& sizes, const std::array<const Shape*, N>& strides) {
  int64_t order[64];
  int nd = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d)
    if (sizes[d] != 1) order[nd++] = d;
  const Shape& s0 = *strides[0];
  std::stable_sort(order, order + nd, [&](int64_t a, int64_t b) { return s0[a] > s0[b]; });
  int64_t msz[64];
  int64_t mst[N][64];
  int n = 0;
  for (int i = nd - 1; i >= 0; --i) {
    const int64_t d = order[i];
    bool merge = n > 0;
    for (size_t k = 0; k < N && merge; ++k) merge = (*strides[k])[d] == msz[n - 1] * mst[k][n - 1];
    if (merge) {
      msz[n - 1] *= sizes[d];
      continue;
    }
    EMBER_CHECK(n < kMaxDims, "strided loop: shape ", shape_str(sizes), " needs more than ", kMaxDims,
                " dims after merging");
    msz[n] = sizes[d];
    for (size_t k = 0; k < N; ++k) mst[k][n] = (*strides[k])[d];
    ++n;
  }
  LoopGeometry<N> g;
  g.ndim = n;
  for (int i = 0; i < n; ++i) {
    g.sizes[i] = msz[n - 1 - i];
    for (size_t k = 0; k < N; ++k) g.strides[k][i] = mst[k][n - 1 - i];
  }
  return g;
}

/// Calls fn(offsets, inner_strides, count) for consecutive runs covering linear indices
/// [begin, end) of the geometry's shape. offsets[k] is operand k's element offset of the run's
/// first element; element j of the run sits at offsets[k] + j * inner_strides[k].
template <size_t N, typename Fn> void strided_runs(const LoopGeometry<N>& g, int64_t begin, int64_t end, Fn&& fn) {
  std::array<int64_t, N> off{}, inner{};
  if (begin >= end) return;
  if (g.ndim == 0) {  // every dim has size 1: a single element
    fn(off, inner, end - begin);
    return;
  }
  const int last = g.ndim - 1;
  for (size_t k = 0; k < N; ++k) inner[k] = g.strides[k][last];
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % g.sizes[d];
    rem /= g.sizes[d];
  }
  int64_t i = begin;
  while (i < end) {
    for (size_t k = 0; k < N; ++k) {
      int64_t o = 0;
      for (int d = 0; d <= last; ++d) o += idx[d] * g.strides[k][d];
      off[k] = o;
    }
    const int64_t run = std::min(g.sizes[last] - idx[last], end - i);
    fn(off, inner, run);
    i += run;
    idx[last] += run;
    for (int d = last; d > 0 && idx[d] == g.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

}  // namespace ember::kernels::cpu
