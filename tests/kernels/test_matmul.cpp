// Matrix products: ember's blocked GEMM called directly, the gemm() entry, and matmul() shape
// rules, views and batching, all against float64 references computed here.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/gemm_blocked.h>
#include <ember/kernels/matmul.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

/// Checks got against exp element-wise with the dot-product error bound
/// |got - exp| <= loose_tol_sum(dt, K) * sum_k |a_ik b_kj| + loose_tol(dt) * |exp| (the last term: rounding of
/// the stored result).
void check_products(const std::vector<double>& got, const std::vector<double>& exp, const std::vector<double>& abs,
                    DType dt, int64_t K) {
  REQUIRE(got.size() == exp.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = loose_tol_sum(dt, K) * abs[i] + loose_tol(dt) * std::fabs(exp[i]);
    if (!(std::fabs(got[i] - exp[i]) <= bound) && bad++ < 5)
      UNSCOPED_INFO("[" << i << "] got " << got[i] << " expected " << exp[i] << " bound " << bound);
  }
  CHECK(bad == 0);
}

/// NumPy-matmul reference on logical values: a (..., M, K) or (K), b (..., K, N) or (K).
struct Ref {
  std::vector<double> out, abs;
  Shape shape;
};
Ref ref_matmul(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = to_f64(a), bv = to_f64(b);
  Shape as = a.sizes(), bs = b.sizes();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  while (ab.size() < nb) ab.insert(ab.begin(), 1);
  while (bb.size() < nb) bb.insert(bb.begin(), 1);
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) batch[i] = std::max(ab[i], bb[i]);
  Ref r;
  r.shape = batch;
  if (a.dim() > 1) r.shape.push_back(M);
  if (b.dim() > 1) r.shape.push_back(N);
  const int64_t B = numel_of(batch);
  r.out.assign(B * M * N, 0.0);
  r.abs.assign(B * M * N, 0.0);
  for (int64_t bi = 0; bi < B; ++bi) {
    // Batch coordinates -> offsets into a and b (size-1 dims broadcast).
    int64_t rem = bi, aoff = 0, boff = 0, amul = 1, bmul = 1;
    for (size_t d = nb; d-- > 0;) {
      const int64_t c = rem % batch[d];
      rem /= batch[d];
      aoff += (ab[d] == 1 ? 0 : c) * amul;
      boff += (bb[d] == 1 ? 0 : c) * bmul;
      amul *= ab[d];
      bmul *= bb[d];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0.0, sa = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = av[(aoff * M + i) * K + k] * bv[(boff * K + k) * N + j];
          s += p;
          sa += std::fabs(p);
        }
        r.out[(bi * M + i) * N + j] = s;
        r.abs[(bi * M + i) * N + j] = sa;
      }
  }
  return r;
}

void check_matmul(const Tensor& a, const Tensor& b) {
  INFO("a " << a.shape_str() << " strides " << shape_str(a.strides()) << ", b " << b.shape_str() << " strides "
            << shape_str(b.strides()) << ", " << dtype_name(a.dtype()));
  const Ref r = ref_matmul(a, b);
  Tensor y = kernels::matmul(a, b);
  CHECK(y.sizes() == r.shape);
  CHECK(y.dtype() == a.dtype());
  CHECK(y.is_contiguous());
  const int64_t K = a.size(-1);
  check_products(to_f64(y), r.out, r.abs, a.dtype(), K);
}

/// Naive double reference for a row-major gemm with leading dimensions.
template <typename T>
void check_blocked(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, double beta, uint64_t seed) {
  INFO("blocked gemm M " << M << " N " << N << " K " << K << " trans " << ta << tb << " alpha " << alpha << " beta "
                         << beta << " " << dtype_name(dtype_of<T>()));
  // Padded leading dimensions (+3) so a kernel that assumes ld == width reads the wrong values.
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + 3;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + 3;
  const int64_t ldc = N + 2;
  std::vector<double> av = random_values(a_rows * lda, seed, -1, 1), bv = random_values(b_rows * ldb, seed + 1, -1, 1);
  std::vector<double> cv = random_values(M * ldc, seed + 2, -1, 1);
  std::vector<T> a(av.begin(), av.end()), b(bv.begin(), bv.end()), c(cv.begin(), cv.end());
  if (beta == 0.0) {
    for (int64_t i = 0; i < M; ++i) c[i * ldc] = std::numeric_limits<T>::quiet_NaN();  // must not leak
  }
  kernels::cpu::gemm_blocked(ta, tb, M, N, K, static_cast<T>(alpha), a.data(), lda, b.data(), ldb, static_cast<T>(beta),
                             c.data(), ldc);
  const DType dt = dtype_of<T>();
  std::vector<double> got, exp, abs;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0, sa = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = static_cast<double>(a[ta ? k * lda + i : i * lda + k]);
        const double y = static_cast<double>(b[tb ? j * ldb + k : k * ldb + j]);
        s += x * y;
        sa += std::fabs(x * y);
      }
      const double c0 = beta == 0.0 ? 0.0 : static_cast<double>(static_cast<T>(cv[i * ldc + j]));
      exp.push_back(alpha * s + beta * c0);
      abs.push_back(std::fabs(alpha) * sa + std::fabs(beta * c0));
      got.push_back(static_cast<double>(c[i * ldc + j]));
    }
  check_products(got, exp, abs, dt, K);
  // Padding columns of C are untouched.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) CHECK(c[i * ldc + j] == static_cast<T>(cv[i * ldc + j]));
}

}  // namespace

TEST_CASE("gemm_blocked matches a naive product on odd sizes, all transposes", "[cpu][matmul]") {
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_blocked<float>(ta, tb, 67, 131, 29, 1.0, 0.0, seed++);
      check_blocked<double>(ta, tb, 67, 131, 29, 1.0, 0.0, seed++);
      check_blocked<float>(ta, tb, 1, 1, 1, 2.0, 0.5, seed++);
      check_blocked<float>(ta, tb, 5, 3, 7, -0.5, 1.0, seed++);
      check_blocked<double>(ta, tb, 13, 9, 300, 1.5, -2.0, seed++);  // K crosses the K block
    }
  // Exact multiples of the register tile and the cache blocks.
  check_blocked<float>(false, false, 96, 16, 256, 1.0, 0.0, seed++);
  check_blocked<double>(false, true, 72, 8, 512, 1.0, 0.0, seed++);
  // K == 0 and alpha == 0 only scale C.
  check_blocked<float>(false, false, 4, 5, 0, 1.0, 0.0, seed++);
  check_blocked<double>(true, false, 4, 5, 0, 1.0, 3.0, seed++);
  check_blocked<float>(false, false, 4, 5, 6, 0.0, 2.0, seed++);
}

TEST_CASE("gemm_blocked on shapes crossing every cache block", "[cpu][matmul][slow]") {
  check_blocked<float>(false, false, 197, 2053, 301, 1.0, 0.0, 7);  // M > MC, N > NC, K > KC
  check_blocked<double>(true, true, 150, 1030, 260, 1.0, 0.25, 8);
}

TEST_CASE("matmul: 2-D products, transposed and sliced views", "[cpu][matmul]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = random_tensor({67, 29}, dt, 1), b = random_tensor({29, 131}, dt, 2);
    check_matmul(a, b);
    // Transposed views (passed to the GEMM as trans flags) and strided ones (copied).
    check_matmul(random_tensor({67, 29}, dt, 3, -1, 1, Layout::Transposed), b);
    check_matmul(a, random_tensor({29, 131}, dt, 4, -1, 1, Layout::Transposed));
    check_matmul(random_tensor({67, 29}, dt, 5, -1, 1, Layout::Transposed),
                 random_tensor({29, 131}, dt, 6, -1, 1, Layout::Transposed));
    check_matmul(random_tensor({67, 29}, dt, 7, -1, 1, Layout::Strided),
                 random_tensor({29, 131}, dt, 8, -1, 1, Layout::Strided));
    check_matmul(a.t().t(), b.slice(1, 3, 100, 2));
    check_matmul(random_tensor({29, 67}, dt, 9).t(), random_tensor({131, 29}, dt, 10).t());
  }
}

TEST_CASE("matmul: 1-D operands follow NumPy", "[cpu][matmul]") {
  Tensor v = random_tensor({29}, DType::f32, 11), w = random_tensor({29}, DType::f32, 12);
  Tensor m = random_tensor({29, 17}, DType::f32, 13), mt = random_tensor({17, 29}, DType::f32, 14);
  Tensor dot = kernels::matmul(v, w);
  CHECK(dot.dim() == 0);
  check_matmul(v, w);
  check_matmul(v, m);  // (29) @ (29, 17) -> (17)
  check_matmul(mt, v);  // (17, 29) @ (29) -> (17)
  check_matmul(random_tensor({29}, DType::f32, 15, -1, 1, Layout::Strided), m);
  check_matmul(v, random_tensor({4, 29, 6}, DType::f32, 16));  // vector @ batch
  check_matmul(random_tensor({3, 5, 29}, DType::f32, 17), w);  // batch @ vector
}

TEST_CASE("matmul: batched, shared and broadcast batch dims", "[cpu][matmul]") {
  for (DType dt : {DType::f32, DType::f64}) {
    check_matmul(random_tensor({5, 13, 7}, dt, 20), random_tensor({5, 7, 11}, dt, 21));
    check_matmul(random_tensor({5, 13, 7}, dt, 22), random_tensor({7, 11}, dt, 23));  // b shared
    check_matmul(random_tensor({13, 7}, dt, 24), random_tensor({5, 7, 11}, dt, 25));  // a shared
    check_matmul(random_tensor({2, 1, 13, 7}, dt, 26), random_tensor({1, 3, 7, 11}, dt, 27));
    check_matmul(random_tensor({3, 1, 4, 7}, dt, 28), random_tensor({2, 7, 5}, dt, 29));
    // Batched transposed views, with and without a shared operand.
    check_matmul(random_tensor({5, 7, 13}, dt, 30).transpose(1, 2), random_tensor({5, 11, 7}, dt, 31).transpose(1, 2));
    check_matmul(random_tensor({5, 13, 7}, dt, 32, -1, 1, Layout::Transposed),
                 random_tensor({7, 11}, dt, 33, -1, 1, Layout::Transposed));
    check_matmul(random_tensor({13, 7}, dt, 34, -1, 1, Layout::Transposed),
                 random_tensor({5, 7, 11}, dt, 35, -1, 1, Layout::Transposed));
    // An expanded (stride 0) batch operand.
    check_matmul(random_tensor({1, 13, 7}, dt, 36).expand({4, 13, 7}), random_tensor({4, 7, 11}, dt, 37));
    // Batch dims that are themselves permuted (not one contiguous block).
    check_matmul(random_tensor({7, 3, 13}, dt, 38).permute({1, 2, 0}), random_tensor({3, 7, 2}, dt, 39));
  }
}

TEST_CASE("matmul: f16 and bf16 on the CPU", "[cpu][matmul]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    check_matmul(random_tensor({19, 37}, dt, 40), random_tensor({37, 23}, dt, 41));
    check_matmul(random_tensor({3, 19, 37}, dt, 42, -1, 1, Layout::Transposed), random_tensor({37, 23}, dt, 43));
  }
}

TEST_CASE("matmul: empty dims and errors", "[cpu][matmul]") {
  Tensor z = kernels::matmul(random_tensor({4, 0}, DType::f32, 1), random_tensor({0, 3}, DType::f32, 2));
  CHECK(z.sizes() == Shape{4, 3});
  CHECK(to_f64(z) == std::vector<double>(12, 0.0));
  CHECK(kernels::matmul(empty({0, 5}), empty({5, 3})).sizes() == Shape{0, 3});
  CHECK(kernels::matmul(empty({2, 0, 5}), empty({5, 3})).sizes() == Shape{2, 0, 3});

  CHECK_THROWS_WITH(kernels::matmul(empty({4, 5}), empty({6, 3})),
                    Catch::Contains("[4, 5]") && Catch::Contains("[6, 3]") && Catch::Contains("5 columns"));
  CHECK_THROWS_WITH(kernels::matmul(empty({2, 4, 5}), empty({3, 5, 3})), Catch::Contains("broadcast"));
  CHECK_THROWS_WITH(kernels::matmul(empty({4, 5}), empty({5, 3}, {.dtype = DType::f64})), Catch::Contains("f64"));
  CHECK_THROWS_WITH(kernels::matmul(empty({4, 5}, {.dtype = DType::i32}), empty({5, 3}, {.dtype = DType::i32})),
                    Catch::Contains("floating"));
  CHECK_THROWS(kernels::matmul(empty({}), empty({3})));
}

TEST_CASE("gemm entry: alpha, beta, shared b, 2-D operands and shape errors", "[cpu][matmul]") {
  const int64_t B = 3, M = 9, K = 14, N = 5;
  Tensor a = random_tensor({B, K, M}, DType::f32, 50);  // used transposed
  Tensor b = random_tensor({1, K, N}, DType::f32, 51);  // shared across the batch
  Tensor c = random_tensor({B, M, N}, DType::f32, 52);
  const std::vector<double> av = to_f64(a), bv = to_f64(b), cv = to_f64(c);
  kernels::gemm(a, b, c, /*trans_a=*/true, /*trans_b=*/false, 0.5, -1.5);
  std::vector<double> exp, abs;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, sa = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = av[(bi * K + k) * M + i] * bv[k * N + j];
          s += p;
          sa += std::fabs(p);
        }
        const double c0 = cv[(bi * M + i) * N + j];
        exp.push_back(0.5 * s - 1.5 * c0);
        abs.push_back(0.5 * sa + 1.5 * std::fabs(c0));
      }
  check_products(to_f64(c), exp, abs, DType::f32, K);

  // 2-D operands are a batch of one; out = a @ b^T.
  Tensor a2 = random_tensor({M, K}, DType::f64, 53), b2 = random_tensor({N, K}, DType::f64, 54);
  Tensor o2 = empty({M, N}, {.dtype = DType::f64});
  kernels::gemm(a2, b2, o2, false, true);
  const Ref r = ref_matmul(a2, b2.t());
  check_products(to_f64(o2), r.out, r.abs, DType::f64, K);

  CHECK_THROWS_WITH(kernels::gemm(a, b, empty({B, M, N + 1}), true, false),
                    Catch::Contains("[3, 9, 6]") && Catch::Contains("[3, 14, 9]"));
  CHECK_THROWS_WITH(kernels::gemm(a.transpose(1, 2), b, c, false, false), Catch::Contains("contiguous"));
  CHECK_THROWS_WITH(kernels::gemm(a, b, c, false, false), Catch::Contains("shapes do not match"));
}

TEST_CASE("gemm entry: products split over the pool's threads in row or column blocks", "[cpu][matmul]") {
  // With BLAS, each product large enough is cut into blocks of C along its longer side, one per
  // thread (kernels/cpu/matmul.cpp); 3 threads make the blocks uneven. Tall (M > N) and wide
  // (M < N) products, every transpose, a batch of one and of two (fewer products than threads), and
  // beta = 1 accumulating onto C, each against the float64 reference. Each product here has enough
  // multiply-adds (over 2^16 per block) to be split.
  const int before = num_threads();
  set_num_threads(3);
  struct Shape3 {
    int64_t B, M, N, K;
  };
  uint64_t seed = 60;
  for (const Shape3 s : {Shape3{1, 301, 7, 100}, Shape3{1, 9, 300, 100}, Shape3{2, 67, 64, 65}, Shape3{2, 9, 200, 90}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        INFO("B " << s.B << " M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb " << tb);
        Tensor a = random_tensor(ta ? Shape{s.B, s.K, s.M} : Shape{s.B, s.M, s.K}, DType::f32, seed++);
        Tensor b = random_tensor(tb ? Shape{s.B, s.N, s.K} : Shape{s.B, s.K, s.N}, DType::f32, seed++);
        Tensor c = random_tensor({s.B, s.M, s.N}, DType::f32, seed++);
        const std::vector<double> av = to_f64(a), bv = to_f64(b), cv = to_f64(c);
        kernels::gemm(a, b, c, ta, tb, 1.0, 1.0);
        std::vector<double> exp, abs;
        for (int64_t bi = 0; bi < s.B; ++bi)
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = 0; j < s.N; ++j) {
              double sum = 0, sum_abs = 0;
              for (int64_t k = 0; k < s.K; ++k) {
                const double x = ta ? av[(bi * s.K + k) * s.M + i] : av[(bi * s.M + i) * s.K + k];
                const double y = tb ? bv[(bi * s.N + j) * s.K + k] : bv[(bi * s.K + k) * s.N + j];
                sum += x * y;
                sum_abs += std::fabs(x * y);
              }
              const double c0 = cv[(bi * s.M + i) * s.N + j];
              exp.push_back(sum + c0);
              abs.push_back(sum_abs + std::fabs(c0));
            }
        check_products(to_f64(c), exp, abs, DType::f32, s.K);
      }
  set_num_threads(before);
}
