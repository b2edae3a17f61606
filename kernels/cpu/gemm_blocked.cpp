// ember's blocked GEMM (Goto/BLIS scheme), row-major: C (M, N) = alpha * op(A) @ op(B) + beta * C.
//
// Loop nest, outermost first:
//   jc over N in NC columns     -- a B block (KC x NC) is packed once and shared by all threads
//   pc over K in KC             -- the K slice bounds the packed panels to cache size
//   tiles (MC rows x n chunk)   -- parallel: each task packs its A block (MC x KC, scaled by alpha)
//     jr over NR, ir over MR    -- the micro-kernel keeps an MR x NR accumulator tile in registers
// Packing turns any layout of A and B (plain or transposed, any leading dimension) into unit-stride
// panels, zero-padded to whole MR/NR tiles, so the micro-kernel has no edge cases and no strides.
// The micro-kernel uses 32-byte vectors over NR (GCC/Clang vector extensions).
#include <ember/kernels/cpu/gemm_blocked.h>
#include <ember/kernels/cpu/loops.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <ember/core/thread_pool.h>

namespace ember::kernels::cpu {
namespace {

template <typename T> struct Blocking;
// NR is one 32-byte vector: MR x NR is 6 AVX registers, or 12 SSE registers where the 32-byte
// vectors are split in two; both leave room for the B load and the broadcast A value. (Measured:
// a 6 x 16 float tile spills on SSE and is 10x slower there, and was no faster with AVX2.)
template <> struct Blocking<float> { static constexpr int64_t MR = 6, NR = 8, MC = 96, KC = 256, NC = 2048; };
template <> struct Blocking<double> { static constexpr int64_t MR = 6, NR = 4, MC = 72, KC = 256, NC = 1024; };
/// 32-byte SIMD vectors (GCC/Clang vector extension; lowered to pairs of 16-byte ops on CPUs
/// without AVX).
template <typename T> struct Vec32;
template <> struct Vec32<float> { typedef float type __attribute__((vector_size(32))); };
template <> struct Vec32<double> { typedef double type __attribute__((vector_size(32))); };

/// Packs rows [i0, i0+mc) x cols [p0, p0+kc) of op(A), times alpha, into MR-row panels:
/// panel p holds (kc, MR) with element (k, i) at p*kc*MR + k*MR + i. Rows past mc are zero.
template <typename T>
void pack_a(bool trans, const T* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T alpha, T* dst) {
  constexpr int64_t MR = Blocking<T>::MR;
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t mr = std::min(MR, mc - ir);
    T* panel = dst + ir * kc;
    for (int64_t k = 0; k < kc; ++k) {
      T* out = panel + k * MR;
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t row = i0 + ir + i, col = p0 + k;
        out[i] = alpha * (trans ? a[col * lda + row] : a[row * lda + col]);
      }
      for (int64_t i = mr; i < MR; ++i) out[i] = T(0);
    }
  }
}

/// Packs rows [p0, p0+kc) x cols [j0, j0+nc) of op(B) into NR-column panels: panel q holds (kc, NR)
/// with element (k, j) at q*kc*NR + k*NR + j. Columns past nc are zero. Panels [q0, q1) only.
template <typename T>
void pack_b(bool trans, const T* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t q0, int64_t q1,
            T* dst) {
  constexpr int64_t NR = Blocking<T>::NR;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t jr = q * NR;
    const int64_t nr = std::min(NR, nc - jr);
    T* panel = dst + q * kc * NR;
    for (int64_t k = 0; k < kc; ++k) {
      T* out = panel + k * NR;
      const int64_t row = p0 + k;
      if (!trans) {
        const T* src = b + row * ldb + j0 + jr;
        for (int64_t j = 0; j < nr; ++j) out[j] = src[j];
      } else {
        for (int64_t j = 0; j < nr; ++j) out[j] = b[(j0 + jr + j) * ldb + row];
      }
      for (int64_t j = nr; j < NR; ++j) out[j] = T(0);
    }
  }
}

/// acc (MR x NR) = Ap panel (kc x MR)^T @ Bp panel (kc x NR), then merged into C's mr x nr corner:
/// first K slice: C = acc (beta == 0) or beta * C + acc; later slices: C += acc.
template <typename T>
[[gnu::always_inline]] inline void micro_kernel(int64_t kc, const T* __restrict ap, const T* __restrict bp, T* c,
                                                int64_t ldc, int64_t mr, int64_t nr, bool first, T beta) {
  constexpr int64_t MR = Blocking<T>::MR, NR = Blocking<T>::NR;
  using V = typename Vec32<T>::type;
  constexpr int64_t W = static_cast<int64_t>(sizeof(V) / sizeof(T)), NV = NR / W;
  static_assert(NR % W == 0, "NR must be a whole number of vectors");
  V vacc[MR][NV] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const T* av = ap + k * MR;
    V bv[NV];
#pragma GCC unroll 4
    for (int64_t v = 0; v < NV; ++v) std::memcpy(&bv[v], bp + k * NR + v * W, sizeof(V));  // unaligned load
#pragma GCC unroll 8
    for (int64_t i = 0; i < MR; ++i) {
      const T ai = av[i];
#pragma GCC unroll 4
      for (int64_t v = 0; v < NV; ++v) vacc[i][v] += ai * bv[v];
    }
  }
  T acc[MR][NR];
  std::memcpy(acc, vacc, sizeof(acc));
  for (int64_t i = 0; i < mr; ++i) {
    T* crow = c + i * ldc;
    if (!first) {
      for (int64_t j = 0; j < nr; ++j) crow[j] += acc[i][j];
    } else if (beta == T(0)) {
      for (int64_t j = 0; j < nr; ++j) crow[j] = acc[i][j];
    } else {
      for (int64_t j = 0; j < nr; ++j) crow[j] = beta * crow[j] + acc[i][j];
    }
  }
}

/// Every micro-tile of one packed A block (mc x kc) against the packed B panels [q0, q1) of a
/// block nc wide; c points at the block's top-left element.
template <typename T>
[[gnu::always_inline]] inline void macro_kernel_t(int64_t mc, int64_t nc, int64_t kc, int64_t q0, int64_t q1,
                                                  const T* ap, const T* bpack, T* c, int64_t ldc, bool first, T beta) {
  constexpr int64_t MR = Blocking<T>::MR, NR = Blocking<T>::NR;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t jr = q * NR, nr = std::min(NR, nc - jr);
    const T* bp = bpack + q * kc * NR;
    for (int64_t ir = 0; ir < mc; ir += MR) {
      micro_kernel<T>(kc, ap + ir * kc, bp, c + ir * ldc + jr, ldc, std::min(MR, mc - ir), nr, first, beta);
    }
  }
}

// The compute loops run compiled for x86-64-v3 where the CPU has it (EMBER_CPU_CLONES, loops.h):
// a default build (no -march) still runs its GEMM with 256-bit FMAs (about 3.5x faster).
EMBER_CPU_CLONES void macro_kernel(int64_t mc, int64_t nc, int64_t kc, int64_t q0, int64_t q1, const float* ap,
                                   const float* bpack, float* c, int64_t ldc, bool first, float beta) {
  macro_kernel_t<float>(mc, nc, kc, q0, q1, ap, bpack, c, ldc, first, beta);
}
EMBER_CPU_CLONES void macro_kernel(int64_t mc, int64_t nc, int64_t kc, int64_t q0, int64_t q1, const double* ap,
                                   const double* bpack, double* c, int64_t ldc, bool first, double beta) {
  macro_kernel_t<double>(mc, nc, kc, q0, q1, ap, bpack, c, ldc, first, beta);
}

/// C = beta * C without reading C when beta == 0 (used when there is nothing to multiply).
template <typename T> void scale_c(int64_t M, int64_t N, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0)) std::fill(row, row + N, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
  }
}

template <typename T>
void gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  using Bk = Blocking<T>;
  constexpr int64_t NR = Bk::NR, MC = Bk::MC, KC = Bk::KC, NC = Bk::NC;
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    scale_c(M, N, beta, c, ldc);
    return;
  }
  const int64_t threads = num_threads();
  std::vector<T> bpack(static_cast<size_t>(KC * ((std::min(NC, N) + NR - 1) / NR) * NR));

  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    const int64_t n_panels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool first = pc == 0;
      // B block: (kc, nc) packed in parallel over its NR panels.
      parallel_for(0, n_panels, std::max<int64_t>(1, 4096 / kc),
                   [&](int64_t q0, int64_t q1) { pack_b(trans_b, b, ldb, pc, kc, jc, nc, q0, q1, bpack.data()); });
      // Tiles: MC row blocks times chunks of NR panels; split columns only when there are too few
      // row blocks to keep every thread busy.
      const int64_t m_blocks = (M + MC - 1) / MC;
      int64_t n_chunks = 1;
      if (m_blocks < 2 * threads) n_chunks = std::min(n_panels, (2 * threads + m_blocks - 1) / m_blocks);
      const int64_t panels_per_chunk = (n_panels + n_chunks - 1) / n_chunks;
      const int64_t work_per_tile = std::min(MC, M) * std::min(nc, panels_per_chunk * NR) * kc;
      parallel_for(0, m_blocks * n_chunks, work_per_tile >= 65536 ? 1 : 64, [&](int64_t t0, int64_t t1) {
        thread_local std::vector<T> apack;
        apack.resize(static_cast<size_t>(MC * KC));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t mb = t / n_chunks, chunk = t % n_chunks;
          const int64_t ic = mb * MC, mc = std::min(MC, M - ic);
          const int64_t q0 = chunk * panels_per_chunk, q1 = std::min(n_panels, q0 + panels_per_chunk);
          if (q0 >= q1) continue;
          pack_a(trans_a, a, lda, ic, mc, pc, kc, alpha, apack.data());
          macro_kernel(mc, nc, kc, q0, q1, apack.data(), bpack.data(), c + ic * ldc + jc, ldc, first, beta);
        }
      });
    }
  }
}

}  // namespace

void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl<float>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl<double>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ember::kernels::cpu
