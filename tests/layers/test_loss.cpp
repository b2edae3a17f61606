// Losses against float64 references: cross_entropy (with label smoothing, i32 targets), nll_loss
// (value, gradient, range errors), mse_loss (value, gradcheck).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include "support/cross_entropy_bound.h"
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::ce_grad_row_bound;
using ember::testing::ce_loss_row_bound;
using ember::testing::ce_row;
using ember::testing::CeRow;
using ember::testing::check_close;
using ember::testing::gamma_n;
using ember::testing::kSecondOrder;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::unit_roundoff;

namespace {

// Mean over rows of -sum_c q_c log softmax(z)_c with q = (1 - s) one_hot + s / C.
double ce_ref(const std::vector<double>& z, const std::vector<int64_t>& t, int64_t N, int64_t C, double s) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e300;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, z[n * C + c]);
    double se = 0;
    for (int64_t c = 0; c < C; ++c) se += std::exp(z[n * C + c] - mx);
    const double lse = mx + std::log(se);
    for (int64_t c = 0; c < C; ++c) {
      const double q = (c == t[n] ? 1 - s : 0) + s / static_cast<double>(C);
      total -= q * (z[n * C + c] - lse);
    }
  }
  return total / static_cast<double>(N);
}

std::vector<int64_t> random_targets(int64_t N, int64_t C, uint64_t seed) {
  auto u = ember::testing::random_values(N, seed, 0.0, static_cast<double>(C));
  std::vector<int64_t> t;
  for (double v : u) t.push_back(std::min<int64_t>(C - 1, static_cast<int64_t>(v)));
  return t;
}

}  // namespace

TEST_CASE("cross_entropy: value vs float64 reference, label smoothing, i32 targets", "[cpu][layers]") {
  const int64_t N = 37, C = 11;
  Tensor z = random_tensor({N, C}, DType::f32, 1, -4, 4, Layout::Transposed);
  auto t = random_targets(N, C, 2);
  Tensor t64 = from_vector(t, {N});
  std::vector<int32_t> t32v(t.begin(), t.end());
  Tensor t32 = from_vector(t32v, {N});
  for (double s : {0.0, 0.1}) {
    const std::vector<double> zv = to_f64(z);
    const double ref = ce_ref(zv, t, N, C, s);
    // Bound: each row's kernel loss (ce_loss_row_bound) and its mean in double (gamma_N(u64) of
    // sum loss_n / N, the division and the f32 store: u64 + u32); ce_ref's lse per row (eps_r +
    // 4 u64 L, u64 |lse| the addition; its weights q sum to 1), then its N C terms q (x - lse): q
    // (3 u64), the subtraction and the product (2 u64), their sum (gamma_NC(u64)), / N (u64).
    const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64);
    double kb = 0, rb = 0, mag = 0, terms = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double* row = zv.data() + n * C;
      double loss_n;
      kb += ce_loss_row_bound(row, C, t[n], s, u32, loss_n) / N;
      mag += loss_n / N;
      const CeRow r = ce_row(row, C, u32);
      const double lse = r.mx + r.L;
      rb += (r.eps_r + 4 * u64 * r.L + u64 * std::fabs(lse)) / N;
      for (int64_t c = 0; c < C; ++c)
        terms += ((c == t[n] ? 1 - s : 0) + s / static_cast<double>(C)) * std::fabs(row[c] - lse) / N;
    }
    const double bound = kSecondOrder * (kb + gamma_n(N, u64) * mag + rb + (5 * u64 + gamma_n(N * C, u64)) * terms +
                                         (2 * u64 + u32) * std::fabs(ref));
    for (const Tensor& tt : {t64, t32}) {
      const double got = layers::cross_entropy(z, tt, {.label_smoothing = s}).item<double>();
      INFO("label_smoothing " << s << " target " << dtype_name(tt.dtype()) << ": error " << std::fabs(got - ref)
                              << " bound " << bound);
      CHECK(std::fabs(got - ref) <= bound);
    }
  }
  CHECK_THROWS_WITH(layers::cross_entropy(z, zeros({N})), Catch::Contains("class indices"));
}

TEST_CASE("nll_loss: value and gradient vs reference, agrees with cross_entropy on log_softmax", "[cpu][layers]") {
  const int64_t N = 19, C = 7;
  Tensor lp = random_tensor({N, C}, DType::f64, 3, -3, 0, Layout::Strided);
  lp.requires_grad_();
  auto t = random_targets(N, C, 4);
  Tensor loss = layers::nll_loss(lp, from_vector(t, {N}));
  auto v = to_f64(lp);
  double ref = 0;
  for (int64_t n = 0; n < N; ++n) ref -= v[n * C + t[n]];
  ref /= N;
  CHECK(loss.dim() == 0);
  CHECK(loss.dtype() == DType::f64);
  CHECK(loss.item<double>() == Approx(ref).epsilon(1e-12));
  loss.backward();
  std::vector<double> g(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n) g[n * C + t[n]] = -1.0 / N;
  check_close(lp.grad(), g, 1e-15, 1e-15);
  // nll_loss(log_softmax(z)) == cross_entropy(z)
  Tensor z = random_tensor({N, C}, DType::f32, 5, -2, 2);
  const double a = layers::nll_loss(log_softmax(z, 1), from_vector(t, {N})).item<double>();
  const double b = layers::cross_entropy(z, from_vector(t, {N})).item<double>();
  // Each side against the exact loss. b: the rows (ce_loss_row_bound) and their mean (gamma_N(u64) of
  // sum loss_n / N, u64 + u32). a: log_softmax's entries at the targets (kernels/cpu/softmax.cpp: z
  // (u32 |z|), the sum and log (eps_k + 4 u64 L) cast to f32 (u32 L), the subtraction and store
  // (u32 |y|)), the exact pick, their mean (gamma_N(u64) of sum |y_t| / N, u64 + u32).
  {
    const std::vector<double> zv = to_f64(z);
    const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64);
    double ea = 0, eb = 0, mag = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double* row = zv.data() + n * C;
      double loss_n;
      eb += ce_loss_row_bound(row, C, t[n], 0.0, u32, loss_n) / N;
      mag += loss_n / N;
      const CeRow r = ce_row(row, C, u32);
      const double zt = std::fabs(row[t[n]] - r.mx);
      ea += (u32 * zt + r.eps_k + (4 * u64 + u32) * r.L + u32 * (zt + r.L)) / N;
    }
    const double bound = kSecondOrder * (ea + eb + 2 * gamma_n(N, u64) * mag + 2 * (u64 + u32) * mag);
    INFO("nll_loss(log_softmax) " << a << " cross_entropy " << b << " bound " << bound);
    CHECK(std::fabs(a - b) <= bound);
  }
  t[3] = C;
  CHECK_THROWS_WITH(layers::nll_loss(lp, from_vector(t, {N})), Catch::Contains("target 7 at row 3"));
}

TEST_CASE("cross_entropy with non-finite logits: NaN and +inf rows make the mean NaN, a -inf target +inf",
          "[cpu][layers]") {
  // kernels/softmax.h: a NaN or +inf poisons its own row only. The mean loss is NaN (or +inf), but
  // the gradient of every other row is still (softmax - onehot) / N, and a -inf logit has p = 0.
  const double nan = std::nan(""), inf = INFINITY;
  const int64_t N = 3, C = 4;
  const std::vector<double> finite_row = {0.5, -1.0, 2.0, 1.0};
  double mx = 2.0, s = 0.0;
  for (double v : finite_row) s += std::exp(v - mx);
  const std::vector<int64_t> t = {1, 2, 0};
  for (double bad : {nan, inf, -inf}) {
    INFO("bad logit " << bad);
    // Row 0 holds the bad logit at its target (class 1); rows 1 and 2 are finite.
    std::vector<double> zv = {1.0, bad, 3.0, 0.0};
    zv.insert(zv.end(), finite_row.begin(), finite_row.end());
    zv.insert(zv.end(), finite_row.begin(), finite_row.end());
    Tensor z = from_vector(zv, {N, C}, {.dtype = DType::f32});
    z.requires_grad_();
    Tensor loss = layers::cross_entropy(z, from_vector(t, {N}));
    const double l = loss.item<double>();
    if (bad == -inf) CHECK(l == inf);  // -log p_t with p_t = 0
    else CHECK(std::isnan(l));
    loss.backward();
    const std::vector<double> g = to_f64(z.grad());
    // Per-element bounds of ce_grad_row_bound (f32 rows, g_n = 1 / N); row 0 only when its bad
    // logit is -inf (p = 0 there exactly).
    const double u32 = unit_roundoff(DType::f32);
    const std::vector<double> gb0 = ce_grad_row_bound(zv.data(), C, t[0], 0.0, u32, N);
    const std::vector<std::vector<double>> gbn = {{},
                                                  ce_grad_row_bound(zv.data() + C, C, t[1], 0.0, u32, N),
                                                  ce_grad_row_bound(zv.data() + 2 * C, C, t[2], 0.0, u32, N)};
    for (int64_t c = 0; c < C; ++c) {
      if (bad == -inf) {  // row 0: softmax of {1, 3, 0} with p = 0 at the -inf entry, minus the one-hot
        const double s0 = std::exp(1.0 - 3.0) + 1.0 + std::exp(0.0 - 3.0);
        const double p = c == 1 ? 0.0 : std::exp(zv[c] - 3.0) / s0;
        CHECK(std::fabs(g[c] - (p - (c == 1 ? 1.0 : 0.0)) / N) <= kSecondOrder * gb0[c]);
      } else {
        CHECK(std::isnan(g[c]));
      }
      for (int64_t n = 1; n < N; ++n) {
        const double p = std::exp(finite_row[c] - mx) / s;
        CHECK(std::fabs(g[n * C + c] - (p - (c == t[n] ? 1.0 : 0.0)) / N) <= kSecondOrder * gbn[n][c]);
      }
    }
  }
}

TEST_CASE("mse_loss: value vs reference and gradcheck", "[cpu][layers]") {
  Tensor a = random_tensor({5, 9}, DType::f32, 6, -1, 1, Layout::Transposed);
  Tensor b = random_tensor({5, 9}, DType::f32, 7);
  auto av = to_f64(a), bv = to_f64(b);
  double ref = 0;
  for (size_t i = 0; i < av.size(); ++i) ref += (av[i] - bv[i]) * (av[i] - bv[i]);
  ref /= static_cast<double>(av.size());
  // mean((a - b)^2), every term >= 0, relative to ref: the f32 difference (2 u32 once squared) and
  // product (u32), the double sum and division (gamma_45(u64) + u64), the f32 store (u32); the
  // reference's difference, product, sum and division in double (3 u64 + gamma_45(u64)).
  const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64);
  const double mse_rel = kSecondOrder * (4 * u32 + 4 * u64 + 2 * gamma_n(45, u64));
  const double mse = layers::mse_loss(a, b).item<double>();
  INFO("mse_loss " << mse << " ref " << ref << " relative bound " << mse_rel);
  CHECK(std::fabs(mse - ref) <= mse_rel * ref);
  auto fn = [](const std::vector<Tensor>& v) { return layers::mse_loss(v[0], v[1]); };
  EMBER_CHECK_GRADIENTS(
      fn, {random_tensor({4, 6}, DType::f64, 8, -1, 1, Layout::Strided), random_tensor({4, 6}, DType::f64, 9)});
  CHECK_THROWS_WITH(layers::mse_loss(a, zeros({9, 5})), Catch::Contains("[5, 9]") && Catch::Contains("[9, 5]"));
}
