// CUDA GEMM through cuBLAS: out[i] = alpha * op(a[i]) @ op(b[i]) + beta * out[i], row-major.
//
// Why it is shaped this way: cuBLAS is column-major. A row-major (r, c) matrix with leading
// dimension c is, read column-major, its own transpose (c, r) with the same leading dimension.
// So the row-major product C = op(A) op(B) (M x N) is computed as the column-major product
//   C^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M)
// i.e. cuBLAS gets the operands swapped: its "A" is our b (transposed iff trans_b, leading
// dimension = b's row length cb), its "B" is our a (transposed iff trans_a, leading dimension
// ca), and its C is our out with leading dimension N.
//
// Batches use cublasGemmStridedBatchedEx (cublasDgemmStridedBatched for f64); a b shared across
// the batch has stride 0. When b is shared and a is not transposed, the batch is folded into M
// instead: (B, M, K) contiguous is the row-major (B*M, K) matrix, and one GEMM is faster than B.
// f32 computes in f32 (CUBLAS_COMPUTE_32F: no TF32 unless set_allow_tf32(true)); f16 and bf16
// keep their storage type and accumulate in f32 (compute type 32F, no reduced-precision split-K).
// K == 0 is handled here (out = beta * out) since cuBLAS requires leading dimensions >= 1.
#include <climits>
#include <cstdint>

#include <ember/core/stream.h>
#include <ember/kernels/cuda/cublas_handle.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/matmul.h>
#include <ember/kernels/precision.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int64_t kMaxBatchChunk = 65535;  // batches per cuBLAS call (older cuBLAS grid-z limit)

/// out[i] = beta * out[i] for the K == 0 product (beta == 0 writes zeros, ignoring NaN in out).
template <typename T> __global__ void scale_kernel(T* __restrict__ out, int64_t n, double beta) {
  using A = acc_t<T>;
  const A b = static_cast<A>(beta);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = beta == 0.0 ? store_as<T>(A(0)) : store_as<T>(b * load_as<A>(out[i]));
  }
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

void gemm_cuda(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, double alpha,
               double beta) {
  const Device dev = out.device();
  // Devices, dtypes, dense 3-D shapes and their agreement: the fronts (kernels/matmul.cpp) guarantee them.
  EMBER_DEBUG_ASSERT(dev.is_cuda() && a.device() == dev && b.device() == dev,
                     "gemm: expected a, b and out on one CUDA device, got a on ", a.device().str(), ", b on ",
                     b.device().str(), ", out on ", out.device().str());
  EMBER_DEBUG_ASSERT(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "gemm: expected one dtype, got a ",
                     dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()), ", out ", dtype_name(out.dtype()));
  EMBER_DEBUG_ASSERT(a.dim() == 3 && b.dim() == 3 && out.dim() == 3,
                     "gemm: expected 3-D a (B, ra, ca), b (B|1, rb, cb) ", "and out (B, M, N), got a ", a.shape_str(),
                     ", b ", b.shape_str(), ", out ", out.shape_str());
  EMBER_DEBUG_ASSERT(is_dense(a) && is_dense(b) && is_dense(out), "gemm: expected contiguous operands (a ",
                     a.shape_str(), ", b ", b.shape_str(), ", out ", out.shape_str(), ")");
  const int64_t batch = a.size(0), ra = a.size(1), ca = a.size(2);
  const int64_t rb = b.size(1), cb = b.size(2);
  const int64_t M = trans_a ? ca : ra, K = trans_a ? ra : ca;
  const int64_t Kb = trans_b ? cb : rb, N = trans_b ? rb : cb;
  EMBER_DEBUG_ASSERT(K == Kb, "gemm: inner dimensions differ: op(a) is (", M, ", ", K, ") from a ", a.shape_str(),
                     trans_a ? " transposed" : "", ", op(b) is (", Kb, ", ", N, ") from b ", b.shape_str(),
                     trans_b ? " transposed" : "");
  EMBER_DEBUG_ASSERT(b.size(0) == batch || b.size(0) == 1, "gemm: b's batch ", b.size(0), " is neither a's batch ",
                     batch, " nor 1 (a ", a.shape_str(), ", b ", b.shape_str(), ")");
  EMBER_DEBUG_ASSERT(out.size(0) == batch && out.size(1) == M && out.size(2) == N, "gemm: expected out of shape (",
                     batch, ", ", M, ", ", N, "), got ", out.shape_str());
  // out is (batch, M, N): launch_on returns at once when batch, M or N is 0.
  launch_on(out, [&](cudaStream_t stream) {
    if (K == 0) {
      const int64_t n = out.numel();
      EMBER_DISPATCH_FLOAT(out.dtype(), "gemm (cuda)", [&]<typename T>() {
        scale_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(out.data_ptr()), n, beta);
      });
      return;
    }

    const bool b_shared = b.size(0) == 1;
    // Fold the batch into M when b is shared and a's rows run on across batches.
    const bool fold = b_shared && !trans_a && batch > 1 && fits_int(batch * M);
    const int64_t m_rows = fold ? batch * M : M;  // our M as cuBLAS sees it (its n)
    const int64_t batches = fold ? 1 : batch;
    EMBER_CHECK(fits_int(N) && fits_int(m_rows) && fits_int(K) && fits_int(ca) && fits_int(cb),
                "gemm: dimensions exceed cuBLAS's 32-bit limits (a ", a.shape_str(), ", b ", b.shape_str(), ")");

    // cuBLAS column-major view (see the top of the file): C^T = op'(b) * op'(a).
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS transa
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS transb
    const int m = static_cast<int>(N), n = static_cast<int>(m_rows), k = static_cast<int>(K);
    const int lda = static_cast<int>(std::max<int64_t>(1, cb));  // b's row length
    const int ldb = static_cast<int>(std::max<int64_t>(1, ca));  // a's row length
    const int ldc = static_cast<int>(std::max<int64_t>(1, N));
    const long long stride_b = b_shared ? 0 : rb * cb;  // cuBLAS strideA
    const long long stride_a = ra * ca;  // cuBLAS strideB
    const long long stride_c = M * N;
    const size_t esize = out.element_size();
    const char* pb = static_cast<const char*>(b.data_ptr());
    const char* pa = static_cast<const char*>(a.data_ptr());
    char* pc = static_cast<char*>(out.data_ptr());
    cublasHandle_t handle = cublas_handle(dev, stream);

    for (int64_t start = 0; start < batches; start += kMaxBatchChunk) {
      const int count = static_cast<int>(std::min(kMaxBatchChunk, batches - start));
      const void* bb = pb + static_cast<size_t>(start * stride_b) * esize;
      const void* ab = pa + static_cast<size_t>(start * stride_a) * esize;
      void* cbp = pc + static_cast<size_t>(start * stride_c) * esize;
      if (out.dtype() == DType::f64) {
        const double al = alpha, be = beta;
        CUBLAS_CHECK(cublasDgemmStridedBatched(handle, op_b, op_a, m, n, k, &al, static_cast<const double*>(bb), lda,
                                               stride_b, static_cast<const double*>(ab), ldb, stride_a, &be,
                                               static_cast<double*>(cbp), ldc, stride_c, count));
        continue;
      }
      cudaDataType_t type;
      cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
      switch (out.dtype()) {
        case DType::f32:
          type = CUDA_R_32F;
          if (ember::allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
          break;
        case DType::f16:
          type = CUDA_R_16F;
          break;
        case DType::bf16:
          type = CUDA_R_16BF;
          break;
        default:
          EMBER_FAIL("gemm (cuda): unsupported dtype ", dtype_name(out.dtype()), " (expected f32, f64, f16 or bf16; a ",
                     a.shape_str(), ", b ", b.shape_str(), ")");
      }
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, m, n, k, &al, bb, type, lda, stride_b, ab, type, ldb,
                                              stride_a, &be, cbp, type, ldc, stride_c, count, compute,
                                              CUBLAS_GEMM_DEFAULT));
    }
  });
}

}  // namespace

void register_matmul() { gemm_table.set(DeviceType::CUDA, &gemm_cuda); }

}  // namespace ember::kernels::cuda
