#pragma once
// Matrix products. CPU: BLAS sgemm/dgemm when built with it, else ember's blocked GEMM.
// CUDA: cuBLAS (f32 with TF32 off by default for accuracy, f16/bf16 with f32 accumulation).
#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// a (M,K) @ b (K,N) -> (M,N); a (B,M,K) @ b (B,K,N) -> (B,M,N); a (B,M,K) @ b (K,N) -> (B,M,N);
/// a 1-D or b 1-D as in NumPy. Transposed views are passed to BLAS as transposes, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- implementation signature ----
/// Batched row-major GEMM: out[i] = alpha * op(a[i]) @ op(b[i]) + beta * out[i].
/// a is contiguous (B, ra, ca), b contiguous (B, rb, cb) or (1, rb, cb) (shared across the batch),
/// out contiguous (B, M, N). op(x) is x or its transpose per the flags. One dtype throughout.
using GemmFn = void(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, double alpha,
                    double beta);
extern DispatchTable<GemmFn> gemm_table;

/// Direct access for layers: out = alpha * op(a) @ op(b) + beta * out with the layout above.
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, double alpha = 1.0,
          double beta = 0.0);

}  // namespace ember::kernels
