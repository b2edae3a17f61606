#pragma once
// ember's own CPU GEMM (internal header): cache-blocked, packed, multithreaded. Used when the build
// has no BLAS, and always compiled so its tests run either way.
#include <cstdint>

namespace ember::kernels::cpu {

/// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C.
/// A is stored (M, K) with row stride lda, or (K, M) when trans_a; B is stored (K, N) with row
/// stride ldb, or (N, K) when trans_b; C has row stride ldc. beta == 0 overwrites C without reading
/// it (NaNs in C do not leak through). K == 0 scales C by beta.
/// Parallel over tiles of C through parallel_for; runs inline when called from a pool worker.
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

/// One f32 product with gemm_blocked's arguments (C's rows N apart), computed on the calling thread
/// as one call, never split into blocks for other threads: BLAS's sgemm when the build has BLAS
/// (single-threaded, as matmul.cpp sets it), else gemm_blocked. Its rounding does not depend on
/// the thread count, which a product split by kernels::gemm's dispatch does (matmul.cpp); the
/// Winograd convolution runs its 36 per-frequency products through it, one per task.
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c);

}  // namespace ember::kernels::cpu
