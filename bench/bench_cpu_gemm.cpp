// CPU sgemm GFLOP/s at 1024^3: ember's matmul beside its own blocked fallback, a naive loop and the
// raw BLAS call it wraps, all measured in one run on the same operands.
//
// Rows:
//   ember matmul          kernels::matmul (BLAS when built with it, else the blocked GEMM);
//                         includes allocating the output
//   ember blocked GEMM    kernels::cpu::gemm_blocked, the fallback of builds without BLAS
//   naive loop (1 thread) i-k-j triple loop, compiler-vectorized
//   raw BLAS sgemm_       the BLAS library called directly (only in builds that found BLAS)
// Every result is checked on sampled entries against a float64 dot product, tolerance
// 1e-5 * sqrt(K) * sum_k |a_ik * b_kj| (f32 rounding grows like sqrt(K)).
// Flags: --quick (256^3, few repetitions; used by the CTest smoke test).
#include <cmath>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/gemm_blocked.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/matmul.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;

namespace {

void naive_gemm(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    float* ci = c + i * N;
    for (int64_t j = 0; j < N; ++j) ci[j] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float aik = a[i * K + k];
      const float* bk = b + k * N;
      for (int64_t j = 0; j < N; ++j) ci[j] += aik * bk[j];
    }
  }
}

// Largest error over sampled entries, in units of the tolerance (<= 1 passes).
double worst_error(const float* a, const float* b, const float* c, int64_t M, int64_t N, int64_t K) {
  double worst = 0;
  for (int s = 0; s < 97; ++s) {
    const int64_t i = (s * 7919) % M, j = (s * 104729 + 13) % N;
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < K; ++k) {
      ref += static_cast<double>(a[i * K + k]) * b[k * N + j];
      mag += std::fabs(static_cast<double>(a[i * K + k]) * b[k * N + j]);
    }
    const double tol = 1e-5 * std::sqrt(static_cast<double>(K)) * mag + 1e-30;
    worst = std::max(worst, std::fabs(c[i * N + j] - ref) / tol);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int64_t n = quick ? 256 : 1024;
  const int reps = quick ? 3 : 10;
  const double flops = 2.0 * n * n * n;
  std::printf("bench_cpu_gemm: f32 (%lld x %lld) @ (%lld x %lld), median of %d reps, %d pool threads\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(n), reps, num_threads());

  manual_seed(42);
  Tensor a = randn({n, n}), b = randn({n, n}), c = zeros({n, n});
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();

  bench::Table table({"implementation", "time (ms)", "GFLOP/s", "error/tol"});
  bool ok = true;
  auto row = [&](const char* name, double secs, const float* result) {
    const double err = worst_error(pa, pb, result, n, n, n);
    ok = ok && err <= 1.0;
    table.add({name, fmt("%.2f", secs * 1e3), fmt("%.1f", flops / secs / 1e9), fmt("%.2g", err)});
  };

  Tensor out;
  double t = bench::median_seconds([&] { out = kernels::matmul(a, b); }, reps);
  row("ember matmul", t, out.data<float>());

  t = bench::median_seconds([&] { kernels::cpu::gemm_blocked(false, false, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n); },
                            reps);
  row("ember blocked GEMM (fallback)", t, pc);

  t = bench::median_seconds([&] { naive_gemm(pa, pb, pc, n, n, n); }, quick ? 2 : 1, quick ? 1 : 0);
  row("naive i-k-j loop (1 thread)", t, pc);

#ifdef EMBER_BENCH_HAVE_BLAS
  const int in = static_cast<int>(n);
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  {
    const bench::RawBlasThreads blas_threads(num_threads());
    t = bench::median_seconds([&] { sgemm_("N", "N", &in, &in, &in, &one, pb, &in, pa, &in, &zero, pc, &in, 1, 1); },
                              reps);
  }
  row("raw BLAS sgemm_", t, pc);
#else
  table.add({"raw BLAS sgemm_", "n/a", "n/a", "(no BLAS)"});
#endif
  table.print();
  if (!ok) std::printf("MISMATCH: some implementation is outside the tolerance\n");
  return ok ? 0 : 1;
}
