// matmul, softmax / log_softmax, cross_entropy and index_select (autograd/ops_nn.cpp): forward
// values against float64 references and finite-difference gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include "support/cross_entropy_bound.h"
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::ce_grad_row_bound;
using ember::testing::ce_loss_row_bound;
using ember::testing::ce_row;
using ember::testing::CeRow;
using ember::testing::check_bounded;
using ember::testing::check_close;
using ember::testing::gamma_n;
using ember::testing::GradcheckOptions;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::unit_roundoff;
using TL = std::vector<Tensor>;

namespace {

// Batched reference: a (B, M, K) and b (B, K, N) as flat row-major vectors; b_shared: b is (K, N).
std::vector<double> mm_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M, int64_t K,
                           int64_t N, bool b_shared = false) {
  std::vector<double> out;
  for (int64_t z = 0; z < B; ++z)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(z * M + i) * K + k] * b[((b_shared ? 0 : z) * K + k) * N + j];
        out.push_back(s);
      }
  return out;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

/// CHECKs got (dtype dt) against mm_ref(a, b, ...) within a rounding bound: every entry is a dot of
/// K products; the kernel's (BLAS or the blocked GEMM in dt, any order, fused or not) is within
/// gamma_K(u_dt) sum_k |a_k b_k| of the exact dot, the reference's (in double) within gamma_K(u64).
void check_mm(const Tensor& got, const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t M,
              int64_t K, int64_t N, bool b_shared = false) {
  const double g = gamma_n(K, unit_roundoff(got.dtype())) + gamma_n(K, unit_roundoff(DType::f64));
  std::vector<double> bound = mm_ref(abs_of(a), abs_of(b), B, M, K, N, b_shared);
  for (double& x : bound) x *= g;
  check_bounded(got, mm_ref(a, b, B, M, K, N, b_shared), bound);
}

}  // namespace

TEST_CASE("matmul forward: 2-D, vectors, batched, shared and broadcast batches", "[cpu][autograd]") {
  Tensor a = random_tensor({5, 7}, DType::f32, 400, -1, 1, Layout::Transposed);
  Tensor b = random_tensor({7, 3}, DType::f32, 401, -1, 1, Layout::Strided);
  check_mm(matmul(a, b), to_f64(a), to_f64(b), 1, 5, 7, 3);
  Tensor v = random_tensor({7}, DType::f32, 402);
  CHECK(matmul(a, v).sizes() == Shape{5});
  check_mm(matmul(a, v), to_f64(a), to_f64(v), 1, 5, 7, 1);
  CHECK(matmul(v, b).sizes() == Shape{3});
  check_mm(matmul(v, b), to_f64(v), to_f64(b), 1, 1, 7, 3);
  CHECK(matmul(v, v).sizes() == Shape{});
  check_mm(matmul(v, v), to_f64(v), to_f64(v), 1, 1, 7, 1);
  Tensor a3 = random_tensor({2, 5, 7}, DType::f32, 403, -1, 1, Layout::Transposed);
  Tensor b3 = random_tensor({2, 7, 3}, DType::f32, 404);
  check_mm(matmul(a3, b3), to_f64(a3), to_f64(b3), 2, 5, 7, 3);
  check_mm(matmul(a3, b), to_f64(a3), to_f64(b), 2, 5, 7, 3, true);
  // Broadcast batch: (2, 1, 5, 7) @ (3, 7, 3) -> (2, 3, 5, 3).
  Tensor a4 = random_tensor({2, 1, 5, 7}, DType::f32, 405);
  Tensor b4 = random_tensor({3, 7, 3}, DType::f32, 406);
  Tensor o4 = matmul(a4, b4);
  REQUIRE(o4.sizes() == Shape{2, 3, 5, 3});
  const auto va4 = to_f64(a4), vb4 = to_f64(b4);
  std::vector<double> ap, bq;  // the 6 products' operands, batch (p, q) in row-major order
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q) {
      ap.insert(ap.end(), va4.begin() + p * 35, va4.begin() + (p + 1) * 35);
      bq.insert(bq.end(), vb4.begin() + q * 21, vb4.begin() + (q + 1) * 21);
    }
  check_mm(o4, ap, bq, 6, 5, 7, 3);
}

TEST_CASE("gradcheck: matmul in all its forms", "[cpu][autograd]") {
  const Tensor a = random_tensor({5, 7}, DType::f64, 410, -1, 1, Layout::Transposed);
  const Tensor b = random_tensor({7, 3}, DType::f64, 411, -1, 1, Layout::Strided);
  const Tensor v = random_tensor({7}, DType::f64, 412);
  const Tensor w = random_tensor({5}, DType::f64, 413);
  const Tensor a3 = random_tensor({2, 5, 7}, DType::f64, 414, -1, 1, Layout::Transposed);
  const Tensor b3 = random_tensor({2, 7, 3}, DType::f64, 415);
  const Tensor a4 = random_tensor({2, 1, 5, 7}, DType::f64, 416);
  const Tensor b4 = random_tensor({3, 7, 3}, DType::f64, 417, -1, 1, Layout::Strided);
  auto mm = [](const TL& t) { return matmul(t[0], t[1]); };
  EMBER_CHECK_GRADIENTS(mm, {a, b});
  EMBER_CHECK_GRADIENTS(mm, {a, v});
  EMBER_CHECK_GRADIENTS(mm, {v, b});
  EMBER_CHECK_GRADIENTS(mm, {w, a});
  EMBER_CHECK_GRADIENTS(mm, {v, v});
  EMBER_CHECK_GRADIENTS(mm, {a3, b3});
  EMBER_CHECK_GRADIENTS(mm, {a3, b});
  EMBER_CHECK_GRADIENTS(mm, {a, b3});
  EMBER_CHECK_GRADIENTS(mm, {a4, b4});
  EMBER_CHECK_GRADIENTS(mm, {a3, v});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return matmul(t[0].t(), t[0]); }, {a});
  // b a transposed view of a contiguous buffer (Linear's W.t()): dB is computed as (g^T A)^T.
  const Tensor bt = random_tensor({7, 3}, DType::f64, 418, -1, 1, Layout::Transposed);
  REQUIRE((bt.stride(0) == 1 && bt.stride(1) == 7));
  EMBER_CHECK_GRADIENTS(mm, {a, bt});
  EMBER_CHECK_GRADIENTS(mm, {a3, bt});
  EMBER_CHECK_GRADIENTS(mm, {v, bt});
}

TEST_CASE("matmul(x, W.t()) gives W a contiguous gradient equal to g^T x", "[cpu][autograd]") {
  Tensor x = random_tensor({4, 6}, DType::f64, 419);
  Tensor w = random_tensor({5, 6}, DType::f64, 420);
  w.requires_grad_();
  Tensor g = random_tensor({4, 5}, DType::f64, 421);
  matmul(x, w.t()).backward(g);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().is_contiguous());
  CHECK(!w.grad().storage().is_same(g.storage()));
  CHECK(!w.grad().storage().is_same(x.storage()));
  check_mm(w.grad(), to_f64(g.t().contiguous()), to_f64(x), 1, 5, 4, 6);  // one f64 GEMM, dots of 4
}

TEST_CASE("softmax and log_softmax: forward values over any dim", "[cpu][autograd]") {
  Tensor x = random_tensor({3, 4, 5}, DType::f64, 420, -3, 3, Layout::Transposed);
  const auto v = to_f64(x);
  std::vector<double> sm(v.size()), lsm(v.size());
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double mx = -1e30, s = 0;
      for (int j = 0; j < 4; ++j) mx = std::max(mx, v[(i * 4 + j) * 5 + k]);
      for (int j = 0; j < 4; ++j) s += std::exp(v[(i * 4 + j) * 5 + k] - mx);
      for (int j = 0; j < 4; ++j) {
        const size_t idx = (i * 4 + j) * 5 + k;
        sm[idx] = std::exp(v[idx] - mx) / s;
        lsm[idx] = v[idx] - mx - std::log(s);
      }
    }
  check_close(softmax(x, 1), sm, 1e-12, 1e-14);
  check_close(log_softmax(x, -2), lsm, 1e-12, 1e-14);
}

TEST_CASE("gradcheck: softmax and log_softmax", "[cpu][autograd]") {
  const Tensor x = random_tensor({3, 4, 5}, DType::f64, 430, -2, 2, Layout::Transposed);
  EMBER_CHECK_GRADIENTS([](const TL& t) { return softmax(t[0], 1); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return softmax(t[0], -1); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return log_softmax(t[0], 0); }, {x});
  EMBER_CHECK_GRADIENTS([](const TL& t) { return log_softmax(t[0], 2); }, {x});
}

TEST_CASE("cross_entropy: value and gradient against float64 references", "[cpu][autograd]") {
  const int64_t N = 6, C = 5;
  const std::vector<int64_t> tv{0, 4, 2, 2, 1, 3};
  Tensor target = from_vector(tv, {N});
  for (double ls : {0.0, 0.1}) {
    for (DType dt : {DType::f32, DType::f64}) {
      INFO("label_smoothing " << ls << " dtype " << dtype_name(dt));
      Tensor logits = random_tensor({N, C}, dt, 440, -3, 3, Layout::Transposed);
      logits.requires_grad_();
      Tensor loss = cross_entropy(logits, target, ls);
      CHECK(loss.dim() == 0);
      const auto x = to_f64(logits);
      double ref = 0;
      std::vector<double> gref(N * C);
      for (int64_t n = 0; n < N; ++n) {
        double mx = -1e30, s = 0, sx = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[n * C + c]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(x[n * C + c] - mx), sx += x[n * C + c];
        const double lse = mx + std::log(s);
        ref += (lse - (1 - ls) * x[n * C + tv[n]] - ls / C * sx) / N;
        for (int64_t c = 0; c < C; ++c)
          gref[n * C + c] = (std::exp(x[n * C + c] - lse) - (1 - ls) * (c == tv[n]) - ls / C) / N;
      }
      // f64 logits give an f64 loss (its rows and their mean in f64, as PyTorch's), f32 ones f32.
      CHECK(loss.dtype() == dt);
      // Bounds: each row's kernel loss (ce_loss_row_bound) and the reference's row, lse (eps_r + 4 u64 L
      // for the sum and log, u64 |lse| the addition), (1 - ls) x_t (2 u64), ls / C sum x (gamma_C(u64)
      // + 2 u64), the two subtractions and / N (3 u64): at most eps_r + 4 u64 L + (gamma_C(u64) + 5 u64)
      // M_n, M_n = |lse| + (1 - ls) |x_t| + ls / C sum |x|; the means over N rows (gamma_N(u64) of
      // sum |loss_n| / N on each side, the kernel's division and store u64 + uc).
      const double uc = unit_roundoff(dt), u64 = unit_roundoff(DType::f64);
      double lb = 0, mag = 0;
      std::vector<double> gb;
      for (int64_t n = 0; n < N; ++n) {
        const double* row = x.data() + n * C;
        double loss_n, sabs = 0;
        lb += ce_loss_row_bound(row, C, tv[n], ls, uc, loss_n) / N;
        const CeRow r = ce_row(row, C, uc);
        for (int64_t c = 0; c < C; ++c) sabs += std::fabs(row[c]);
        const double M = std::fabs(r.mx + r.L) + (1 - ls) * std::fabs(row[tv[n]]) + ls / C * sabs;
        lb += (r.eps_r + 4 * u64 * r.L + (gamma_n(C, u64) + 5 * u64) * M) / N;
        mag += loss_n / N;
        const std::vector<double> b = ce_grad_row_bound(row, C, tv[n], ls, uc, N);
        gb.insert(gb.end(), b.begin(), b.end());
      }
      check_bounded(loss, {ref}, {lb + 2 * gamma_n(N, u64) * mag + (u64 + uc) * std::fabs(ref)});
      loss.backward();
      REQUIRE(logits.grad().defined());
      CHECK(logits.grad().dtype() == dt);
      check_bounded(logits.grad(), gref, gb);
    }
  }
  // A wrong target is reported with its value.
  Tensor bad = from_vector(std::vector<int64_t>{0, 9, 0, 0, 0, 0}, {N});
  CHECK_THROWS_WITH(cross_entropy(random_tensor({N, C}, DType::f32, 1), bad), Catch::Contains("9"));
}

TEST_CASE("gradcheck: cross_entropy of f64 logits, at the f64 step", "[cpu][autograd]") {
  // The loss is f64 for f64 logits: an f32-rounded loss (~1e-7 relative) would fail this check
  // at gradcheck's f64 step of 1e-6.
  const Tensor logits = random_tensor({4, 7}, DType::f64, 450, -2, 2, Layout::Strided);
  Tensor target = from_vector(std::vector<int64_t>{6, 0, 3, 3}, {4});
  EMBER_CHECK_GRADIENTS([target](const TL& t) { return cross_entropy(t[0], target); }, {logits});
  EMBER_CHECK_GRADIENTS([target](const TL& t) { return cross_entropy(t[0], target, 0.2); }, {logits});
}

TEST_CASE("index_select: forward and scatter-add gradient with repeated indices", "[cpu][autograd]") {
  Tensor x = from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, {.dtype = DType::f64});
  Tensor idx = from_vector(std::vector<int64_t>{3, 0, 3}, {3});
  check_close(index_select(x, 1, idx), {3, 0, 3, 7, 4, 7, 11, 8, 11}, 0.0);
  x.requires_grad_();
  sum(index_select(x, 1, idx)).backward();
  check_close(x.grad(), {1, 0, 0, 2, 1, 0, 0, 2, 1, 0, 0, 2}, 0.0);
  const Tensor y = random_tensor({5, 4, 3}, DType::f64, 460, -1, 1, Layout::Transposed);
  Tensor rows = from_vector(std::vector<int64_t>{4, 1, 1, 0}, {4});
  EMBER_CHECK_GRADIENTS([rows](const TL& t) { return index_select(t[0], 0, rows); }, {y});
  EMBER_CHECK_GRADIENTS([rows](const TL& t) { return index_select(t[0], -1, rows.slice(0, 1, 4)); }, {y});
}

TEST_CASE("gradcheck: a small network end to end", "[cpu][autograd]") {
  const Tensor x = random_tensor({4, 5}, DType::f64, 470);
  const Tensor w1 = random_tensor({5, 6}, DType::f64, 471, -1, 1, Layout::Transposed);
  const Tensor b1 = random_tensor({6}, DType::f64, 472);
  const Tensor w2 = random_tensor({6, 3}, DType::f64, 473);
  EMBER_CHECK_GRADIENTS(
      [](const TL& t) {
        Tensor h = tanh(matmul(t[0], t[1]) + t[2]);
        Tensor o = log_softmax(matmul(h, t[3]), 1);
        return mean(o * sigmoid(o)) + sum(gelu(h), {0});
      },
      {x, w1, b1, w2});
}
