// CPU GEMM: BLAS sgemm_/dgemm_ through the Fortran interface when the build has BLAS, else ember's
// blocked GEMM (kernels/cpu/gemm_blocked.cpp). f16/bf16 are converted to f32, multiplied, and
// rounded back once at the end.
//
// Threads: ember's pool owns the cores. BLAS is told to run single-threaded and ember splits the
// work instead (the products of a batch, and a large product into row or column blocks of C).
// OpenBLAS's pthread build, left to its own threads, keeps them spinning for a while after every
// call: between the GEMMs of a training step they competed with ember's pool and the data loader
// for the same cores, and throughput swung from run to run (docs/benchmarks.md, "CPU training").
#include <algorithm>
#include <climits>
#include <cstddef>
#include <mutex>
#include <type_traits>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/gemm_blocked.h>
#include <ember/kernels/matmul.h>

#ifdef EMBER_HAVE_BLAS
// Fortran BLAS (column-major). The trailing size_t arguments are the hidden lengths of the two
// CHARACTER*1 arguments that gfortran-built BLAS expects; C implementations (OpenBLAS) ignore them.
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc,
            size_t transa_len, size_t transb_len);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, size_t transa_len, size_t transb_len);
// OpenBLAS's extension; weak, so that ember links and runs against a BLAS without it.
void openblas_set_num_threads(int) __attribute__((weak));
}
#endif

namespace ember::kernels::cpu {
namespace {

/// One row-major product: c (M, N) = alpha * op(a) @ op(b) + beta * c, a stored with row stride
/// lda, b with ldb, c with row stride N.
struct GemmArgs {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb;
};

#ifdef EMBER_HAVE_BLAS
bool fits_int(const GemmArgs& g) {
  return g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: hand BLAS b as its first
// operand and a as its second, with the row-major leading dimensions unchanged. C's rows are ldc
// apart (a block of columns of a wider C has ldc > N).
template <typename T> void blas_gemm(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c, int64_t ldc) {
  const int m = static_cast<int>(g.N), n = static_cast<int>(g.M), k = static_cast<int>(g.K);
  const int lda = static_cast<int>(std::max<int64_t>(g.ldb, 1)), ldb = static_cast<int>(std::max<int64_t>(g.lda, 1));
  const int ldc_ = static_cast<int>(std::max<int64_t>(ldc, 1));
  const char ta = g.trans_b ? 'T' : 'N', tb = g.trans_a ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&ta, &tb, &m, &n, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc_, 1, 1);
  } else {
    dgemm_(&ta, &tb, &m, &n, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc_, 1, 1);
  }
}

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  });
}

// Multiply-adds below which handing a piece of a product to another thread costs more than it saves.
constexpr int64_t kMinTaskWork = int64_t{1} << 16;

// The batch of products on ember's pool, BLAS single-threaded in each task. With fewer products than
// threads, each large product is cut into `parts` blocks of C along its longer side: rows
// [m0, m1) of C read rows m0.. of op(A), columns [n0, n1) read columns n0.. of op(B).
template <typename T>
void blas_batched(const GemmArgs& g, int64_t batch, T alpha, const T* a, int64_t a_stride, const T* b, int64_t b_stride,
                  T beta, T* c) {
  blas_single_threaded();
  const int64_t work = g.M * g.N * g.K;
  const bool by_rows = g.M >= g.N;
  const int64_t dim = by_rows ? g.M : g.N;
  int64_t parts = 1;
  const int64_t threads = num_threads();
  if (batch < threads)
    parts = std::max<int64_t>(1, std::min({(threads + batch - 1) / batch, work / kMinTaskWork, dim}));
  const int64_t task_work = std::max<int64_t>(work / parts, 1);
  parallel_for(0, batch * parts, std::max<int64_t>(1, kMinTaskWork / task_work), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / parts, p = t % parts;
      const int64_t lo = dim * p / parts, hi = dim * (p + 1) / parts;
      const T* ai = a + i * a_stride;
      const T* bi = b + i * b_stride;
      T* ci = c + i * g.M * g.N;
      GemmArgs piece = g;
      if (by_rows) {
        piece.M = hi - lo;
        blas_gemm(piece, alpha, ai + (g.trans_a ? lo : lo * g.lda), bi, beta, ci + lo * g.N, g.N);
      } else {
        piece.N = hi - lo;
        blas_gemm(piece, alpha, ai, bi + (g.trans_b ? lo * g.ldb : lo), beta, ci + lo, g.N);
      }
    }
  });
}
#endif

/// Batched product over float or double buffers. a_stride / b_stride are per-batch element
/// strides (b_stride 0 when b is shared); c is (batch, M, N) contiguous.
template <typename T>
void gemm_batched(const GemmArgs& g, int64_t batch, T alpha, const T* a, int64_t a_stride, const T* b, int64_t b_stride,
                  T beta, T* c) {
  const int64_t c_stride = g.M * g.N;
  if (g.M == 0 || g.N == 0 || batch == 0) return;
    // K == 0 (or alpha == 0) only scales C; the blocked GEMM does that without reading A or B.
#ifdef EMBER_HAVE_BLAS
  if (fits_int(g) && g.K > 0) {
    blas_batched(g, batch, alpha, a, a_stride, b, b_stride, beta, c);
    return;
  }
#endif
  auto one = [&](int64_t i) {
    gemm_blocked(g.trans_a, g.trans_b, g.M, g.N, g.K, alpha, a + i * a_stride, g.lda, b + i * b_stride, g.ldb, beta,
                 c + i * c_stride, g.N);
  };
  // Many small products: one per task (the inner GEMM then runs inline). Otherwise the GEMM
  // parallelizes over its own tiles.
  const int64_t work = g.M * g.N * std::max<int64_t>(g.K, 1);
  if (batch > 1 && work < (int64_t{1} << 18)) {
    parallel_for(0, batch, std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(work, 1)),
                 [&](int64_t b0, int64_t b1) {
                   for (int64_t i = b0; i < b1; ++i) one(i);
                 });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

template <typename H> std::vector<float> widen(const Tensor& t) {
  const H* p = static_cast<const H*>(t.data_ptr());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  return v;
}

void gemm_cpu(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, double alpha,
              double beta) {
  const int64_t batch = out.size(0);
  GemmArgs g{trans_a, trans_b, out.size(1), out.size(2), trans_a ? a.size(1) : a.size(2), a.size(2), b.size(2)};
  const int64_t a_stride = a.size(1) * a.size(2);
  const int64_t b_stride = b.size(0) == 1 ? 0 : b.size(1) * b.size(2);
  switch (out.dtype()) {
    case DType::f32:
      gemm_batched<float>(g, batch, static_cast<float>(alpha), a.data<float>(), a_stride, b.data<float>(), b_stride,
                          static_cast<float>(beta), out.data<float>());
      return;
    case DType::f64:
      gemm_batched<double>(g, batch, alpha, a.data<double>(), a_stride, b.data<double>(), b_stride, beta,
                           out.data<double>());
      return;
    case DType::f16:
    case DType::bf16: {
      const bool half = out.dtype() == DType::f16;
      std::vector<float> af = half ? widen<Half>(a) : widen<BFloat16>(a);
      std::vector<float> bf = half ? widen<Half>(b) : widen<BFloat16>(b);
      std::vector<float> cf = beta != 0.0 ? (half ? widen<Half>(out) : widen<BFloat16>(out))
                                          : std::vector<float>(static_cast<size_t>(out.numel()));
      gemm_batched<float>(g, batch, static_cast<float>(alpha), af.data(), a_stride, bf.data(), b_stride,
                          static_cast<float>(beta), cf.data());
      if (half) {
        Half* o = out.data<Half>();
        for (size_t i = 0; i < cf.size(); ++i) o[i] = Half(cf[i]);
      } else {
        BFloat16* o = out.data<BFloat16>();
        for (size_t i = 0; i < cf.size(); ++i) o[i] = BFloat16(cf[i]);
      }
      return;
    }
    default:
      EMBER_FAIL("gemm (cpu): expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(out.dtype()));
  }
}

}  // namespace

void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c) {
  if (M == 0 || N == 0) return;
#ifdef EMBER_HAVE_BLAS
  const GemmArgs g{trans_a, trans_b, M, N, K, lda, ldb};
  if (fits_int(g) && K > 0) {
    blas_single_threaded();
    blas_gemm(g, alpha, a, b, beta, c, N);
    return;
  }
#endif
  gemm_blocked(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, N);
}

void register_matmul() { gemm_table.set(DeviceType::CPU, &gemm_cpu); }

}  // namespace ember::kernels::cpu
