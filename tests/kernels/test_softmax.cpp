// Softmax, log-softmax, their backward and the fused cross-entropy (kernels/softmax.h) on the CPU,
// against float64 references and central finite differences computed here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ember/kernels/softmax.h>
#include "support/reference.h"
#include "support/softmax_nonfinite.h"

using namespace ember;
using namespace ember::testing;

namespace {

/// (outer, D, inner) split of shape around dim.
void split(const Shape& s, int64_t dim, int64_t& outer, int64_t& D, int64_t& inner) {
  outer = 1, D = s[dim], inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
}

/// float64 (log-)softmax of row-major values along dim.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  int64_t outer, D, inner;
  split(shape, dim, outer, D, inner);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * D + d) * inner + i; };
      double mx = -INFINITY;
      for (int64_t d = 0; d < D; ++d) mx = std::max(mx, x[at(d)]);
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += std::exp(x[at(d)] - mx);
      for (int64_t d = 0; d < D; ++d) y[at(d)] = log ? x[at(d)] - mx - std::log(s) : std::exp(x[at(d)] - mx) / s;
    }
  return y;
}

/// float64 per-row cross-entropy with label smoothing.
std::vector<double> ref_ce(const std::vector<double>& x, int64_t N, int64_t C, const std::vector<int64_t>& t, double ls,
                           std::vector<double>* lse_out = nullptr) {
  std::vector<double> loss(N);
  for (int64_t n = 0; n < N; ++n) {
    // lse - (1 - ls) x_t - ls mean(x), with the max taken out of every term first: written as
    // lse - x_t it would lose log(C) entirely for a row of equal 1e30 logits, even in double.
    double mx = -INFINITY, s = 0, gap = 0;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[n * C + c]);
    for (int64_t c = 0; c < C; ++c) {
      s += std::exp(x[n * C + c] - mx);
      gap += mx - x[n * C + c];
    }
    const double lse = mx + std::log(s);
    loss[n] = std::log(s) + (1 - ls) * (mx - x[n * C + t[n]]) + ls / C * gap;
    if (lse_out) lse_out->push_back(lse);
  }
  return loss;
}

std::vector<int64_t> random_targets(int64_t N, int64_t C, uint64_t seed) {
  std::vector<int64_t> t;
  for (double v : random_values(N, seed, 0.0, static_cast<double>(C))) t.push_back(static_cast<int64_t>(v));
  return t;
}

Tensor targets_tensor(const std::vector<int64_t>& t, DType dt = DType::i64) {
  return from_vector(std::vector<double>(t.begin(), t.end()), {static_cast<int64_t>(t.size())}, {.dtype = dt});
}

}  // namespace

TEST_CASE("softmax / log_softmax over each dim, all layouts and float dtypes", "[cpu][softmax]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      Tensor x = random_tensor({4, 9, 6}, dt, 3, -3.0, 3.0, layout);
      const std::vector<double> xv = to_f64(x);
      for (int64_t dim : {0, 1, 2, -1})
        for (bool log : {false, true}) {
          const int64_t d = dim < 0 ? dim + 3 : dim;
          INFO(dtype_name(dt) << " dim " << dim << " log " << log << " strides " << shape_str(x.strides()));
          Tensor y = kernels::softmax(x, dim, log);
          CHECK(y.sizes() == x.sizes());
          CHECK(y.dtype() == dt);
          // Sums over D in double, then one exp/log and one store: tol_sum over D relative;
          // log-softmax additionally carries the rounding of (x - max), bounded by |x| <= 3.
          const double rt = tol_sum(dt, x.size(d));
          check_close(y, ref_softmax(xv, x.sizes(), d, log), rt, log ? tol(dt) * 3.0 : 0.0);
        }
    }
}

TEST_CASE("softmax is stable for huge logits and handles -inf", "[cpu][softmax]") {
  // Differences are exact in f32; a softmax without max subtraction overflows to inf/NaN.
  const std::vector<double> v = {1e4, 1e4 + 1, 1e4 - 3, -1e4, /**/ -1e38, 1e38, 0, 1, /**/ 5, -INFINITY, 2, 5};
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = from_vector(v, {3, 4}, {.dtype = dt});
    for (bool log : {false, true}) {
      INFO(dtype_name(dt) << " log " << log);
      const std::vector<double> ref = ref_softmax(to_f64(x), {3, 4}, 1, log);
      Tensor y = kernels::softmax(x, 1, log);
      for (double e : to_f64(y)) CHECK(!std::isnan(e));
      // Log-probabilities reach -2e4 (-2e38): their rounding is relative to that magnitude.
      check_close(y, ref, 4 * tol(dt), log ? 0.0 : tol(dt) * 1e-3);
    }
  }
}

TEST_CASE("softmax_backward matches finite differences (f64) and the f32 formula", "[cpu][softmax]") {
  const Shape shape{3, 7, 5};
  for (int64_t dim : {0, 1, 2})
    for (bool log : {false, true}) {
      INFO("dim " << dim << " log " << log);
      Tensor x = random_tensor(shape, DType::f64, 60 + dim, -2, 2);
      Tensor g = random_tensor(shape, DType::f64, 70 + dim, -1, 1, Layout::Transposed);
      const std::vector<double> xv = to_f64(x), gv = to_f64(g);
      Tensor y = kernels::softmax(x, dim, log);
      Tensor dx = kernels::softmax_backward(g, y, dim, log);
      // d/dx_i of L(x) = sum_j g_j y_j(x), central differences with h = 1e-6: truncation ~h^2
      // and rounding ~1e-16 / h, far below the 1e-8 checked here.
      std::vector<double> fd(xv.size());
      const double h = 1e-6;
      for (size_t i = 0; i < xv.size(); ++i) {
        std::vector<double> xp = xv, xm = xv;
        xp[i] += h;
        xm[i] -= h;
        const std::vector<double> yp = ref_softmax(xp, shape, dim, log), ym = ref_softmax(xm, shape, dim, log);
        double lp = 0, lm = 0;
        for (size_t j = 0; j < xv.size(); ++j) {
          lp += gv[j] * yp[j];
          lm += gv[j] * ym[j];
        }
        fd[i] = (lp - lm) / (2 * h);
      }
      check_close(dx, fd, 1e-8, 1e-8);

      // f32: the same formula in double from the f32 inputs, sums over D.
      Tensor x32 = random_tensor(shape, DType::f32, 80 + dim, -2, 2);
      Tensor g32 = random_tensor(shape, DType::f32, 90 + dim, -1, 1);
      Tensor y32 = kernels::softmax(x32, dim, log);
      const std::vector<double> yv = to_f64(y32), g2 = to_f64(g32);
      int64_t outer, D, inner;
      split(shape, dim, outer, D, inner);
      std::vector<double> ref(yv.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) {
            const int64_t k = (o * D + d) * inner + i;
            s += log ? g2[k] : g2[k] * yv[k];
          }
          for (int64_t d = 0; d < D; ++d) {
            const int64_t k = (o * D + d) * inner + i;
            ref[k] = log ? g2[k] - std::exp(yv[k]) * s : yv[k] * (g2[k] - s);
          }
        }
      check_close(kernels::softmax_backward(g32, y32, dim, log), ref, tol_sum(DType::f32, D), tol_sum(DType::f32, D));
    }
  CHECK_THROWS_WITH(kernels::softmax_backward(empty({2, 3}), empty({3, 2}), 1), Catch::Contains("[2, 3]"));
}

TEST_CASE("cross_entropy_rows: loss and lse with and without label smoothing", "[cpu][softmax]") {
  const int64_t N = 37, C = 11;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (double ls : {0.0, 0.1, 1.0}) {
      INFO(dtype_name(dt) << " ls " << ls);
      Tensor x = random_tensor({N, C}, dt, 5, -4, 4, Layout::Transposed);
      const std::vector<int64_t> t = random_targets(N, C, 6);
      std::vector<double> lse;
      const std::vector<double> loss = ref_ce(to_f64(x), N, C, t, ls, &lse);
      auto r = kernels::cross_entropy_rows(x, targets_tensor(t), ls);
      // The rows are f64 for f64 logits (as PyTorch's loss), else f32.
      const DType rows = dt == DType::f64 ? DType::f64 : DType::f32;
      CHECK(r.loss.dtype() == rows);
      CHECK(r.lse.dtype() == rows);
      CHECK(r.loss.sizes() == Shape{N});
      // Outputs are rounded once to `rows`; inside, sums of C terms in double; |x| <= 4 bounds
      // the cancellation in lse - x_t.
      const double rt = tol_sum(rows, C);
      check_close(r.loss, loss, rt, rt * 4);
      check_close(r.lse, lse, rt, rt * 4);
    }
  // i32 targets are accepted.
  Tensor x = random_tensor({5, 3}, DType::f32, 7);
  const std::vector<int64_t> t = {0, 2, 1, 1, 0};
  check_close(kernels::cross_entropy_rows(x, targets_tensor(t, DType::i32)).loss, ref_ce(to_f64(x), 5, 3, t, 0.0),
              tol_sum(DType::f32, 3), tol_sum(DType::f32, 3));
}

TEST_CASE("cross_entropy_rows: huge logits stay finite and exact", "[cpu][softmax]") {
  const std::vector<double> v = {1e4, 1e4 + 2, -1e4, /**/ -1e38, 1e38, 0, /**/ 1e30, 1e30, 1e30};
  const std::vector<int64_t> t = {0, 0, 2};
  Tensor x = from_vector(v, {3, 3}, {.dtype = DType::f32});
  for (double ls : {0.0, 0.2}) {
    std::vector<double> lse;
    const std::vector<double> loss = ref_ce(to_f64(x), 3, 3, t, ls, &lse);
    auto r = kernels::cross_entropy_rows(x, targets_tensor(t), ls);
    INFO("ls " << ls);
    // Rounded once to f32 relative to the values themselves (up to 2e38).
    check_close(r.loss, loss, 4 * tol(DType::f32), 1e-6);
    check_close(r.lse, lse, 4 * tol(DType::f32));
  }
  // Row 0 without smoothing: 2 + log(1 + e^-2 + e^-2e4), where a naive exp(1e4) would overflow.
  const float l0 = kernels::cross_entropy_rows(x, targets_tensor(t)).loss.to_vector<float>()[0];
  CHECK(l0 == Approx(2.0 + std::log1p(std::exp(-2.0))).epsilon(tol(DType::f32)));
}

TEST_CASE("cross_entropy_backward: formula, finite differences, expanded grad", "[cpu][softmax]") {
  const int64_t N = 13, C = 7;
  for (double ls : {0.0, 0.15}) {
    INFO("ls " << ls);
    // f64: against central differences of the float64 reference loss (h = 1e-6; error ~1e-10).
    Tensor x = random_tensor({N, C}, DType::f64, 40, -3, 3);
    const std::vector<int64_t> t = random_targets(N, C, 41);
    const std::vector<double> xv = to_f64(x), gv = random_values(N, 42, -1, 1);
    Tensor g = from_vector(gv, {N}, {.dtype = DType::f32});
    const std::vector<double> gr = to_f64(g);  // g as rounded to f32
    auto r = kernels::cross_entropy_rows(x, targets_tensor(t), ls);
    Tensor dx = kernels::cross_entropy_backward(g, x, targets_tensor(t), r.lse, ls);
    CHECK(dx.dtype() == DType::f64);
    std::vector<double> fd(xv.size());
    const double h = 1e-6;
    for (size_t i = 0; i < xv.size(); ++i) {
      std::vector<double> xp = xv, xm = xv;
      xp[i] += h;
      xm[i] -= h;
      const std::vector<double> lp = ref_ce(xp, N, C, t, ls), lm = ref_ce(xm, N, C, t, ls);
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += gr[n] * (lp[n] - lm[n]);
      fd[i] = s / (2 * h);
    }
    check_close(dx, fd, 1e-8, 1e-8);

    // f32 / bf16 logits with grad_rows expanded from a scalar (stride 0), as a mean's backward gives.
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor x2 = random_tensor({N, C}, dt, 43, -3, 3, Layout::Strided);
      const std::vector<double> x2v = to_f64(x2);
      Tensor g2 = from_vector({0.25}, {1}, {.dtype = DType::f32}).expand({N});
      auto r2 = kernels::cross_entropy_rows(x2, targets_tensor(t), ls);
      Tensor d2 = kernels::cross_entropy_backward(g2, x2, targets_tensor(t), r2.lse, ls);
      CHECK(d2.dtype() == dt);
      std::vector<double> ref;
      for (int64_t n = 0; n < N; ++n) {
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x2v[n * C + c]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(x2v[n * C + c] - mx);
        for (int64_t c = 0; c < C; ++c)
          ref.push_back(0.25 * (std::exp(x2v[n * C + c] - mx) / s - (c == t[n] ? 1 - ls : 0.0) - ls / C));
      }
      INFO(dtype_name(dt));
      check_close(d2, ref, tol_sum(dt, C), tol_sum(dt, C) * 0.25);
    }
  }
  // Huge logits: probabilities from the recomputed row statistics, not a rounded f32 lse.
  Tensor xh = from_vector<double>({1e4, 1e4, 1e4 - 1}, {1, 3}, {.dtype = DType::f32});
  auto rh = kernels::cross_entropy_rows(xh, targets_tensor({1}));
  Tensor dh =
      kernels::cross_entropy_backward(from_vector({1.0}, {1}, {.dtype = DType::f32}), xh, targets_tensor({1}), rh.lse);
  const double z = 2 + std::exp(-1.0);
  check_close(dh, {1 / z, 1 / z - 1, std::exp(-1.0) / z}, 4 * tol(DType::f32), tol(DType::f32));
}

TEST_CASE("cross_entropy: out-of-range targets and bad shapes are errors naming them", "[cpu][softmax]") {
  Tensor x = random_tensor({4, 5}, DType::f32, 1);
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(x, targets_tensor({0, 1, 2, 5})),
                    Catch::Contains("target 5") && Catch::Contains("row 3") && Catch::Contains("[0, 5)"));
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(x, targets_tensor({0, -1, 2, 3})),
                    Catch::Contains("target -1") && Catch::Contains("row 1"));
  auto r = kernels::cross_entropy_rows(x, targets_tensor({0, 1, 2, 3}));
  CHECK_THROWS_WITH(kernels::cross_entropy_backward(empty({4}), x, targets_tensor({0, 9, 2, 3}), r.lse),
                    Catch::Contains("target 9") && Catch::Contains("row 1"));
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(x, targets_tensor({0, 1, 2})),
                    Catch::Contains("[3]") && Catch::Contains("[4, 5]"));
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(random_tensor({5}, DType::f32, 1), targets_tensor({0})),
                    Catch::Contains("2-D"));
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(x, targets_tensor({0, 1, 2, 3}), 1.5),
                    Catch::Contains("label_smoothing"));
  CHECK_THROWS_WITH(kernels::cross_entropy_rows(x, from_vector({0, 1, 2, 3}, {4}, {.dtype = DType::f32})),
                    Catch::Contains("f32"));
}

TEST_CASE("non-finite logits follow kernels/softmax.h: NaN, +inf and all -inf rows are NaN, -inf has probability 0",
          "[cpu][softmax]") {
  // D: one entry per warp lane (3, 10, 32), several per lane (100), a block per row on CUDA (1300).
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t D : {3, 10, 32, 100, 1300}) {
      NonFiniteLogits l = nonfinite_logits(D, 900 + D);
      INFO(dtype_name(dt) << " D " << D);
      // Logits in [-4, 4] and a log-sum of at most log(D) + 8: log-probabilities carry roundings
      // relative to about that size; sums of D terms one tol_sum.
      const double rt = 4 * tol_sum(dt, D), at = 4 * tol(dt) * (std::log(static_cast<double>(D)) + 9);
      const Tensor x = from_vector(l.x, {l.rows, D}, {.dtype = dt});
      l.x = to_f64(x);  // the references see the logits as rounded to dt
      const Tensor xt = from_vector(transposed(l, l.x), {D, l.rows}, {.dtype = dt});  // softmax over dim 0
      for (bool log : {false, true}) {
        INFO("log " << log);
        const std::vector<double> ref = nonfinite_softmax_ref(l, log);
        check_close(kernels::softmax(x, 1, log), ref, rt, log ? at : 0.0);
        check_close(kernels::softmax(xt, 0, log), transposed(l, ref), rt, log ? at : 0.0);
        const Tensor y = from_vector(ref, {l.rows, D}, {.dtype = dt});
        const Tensor g = random_tensor({l.rows, D}, dt, 901 + D, -1.0, 1.0);
        const std::vector<double> dref = nonfinite_softmax_backward_ref(to_f64(g), to_f64(y), l.rows, D, log);
        // |sum g| is about sqrt(D / 3) and p * |log p| <= 1/e: about 2.4 tol_sum of error at most.
        check_close(kernels::softmax_backward(g, y, 1, log), dref, rt, 6 * tol_sum(dt, D));
      }
      for (double ls : {0.0, 0.1}) {
        INFO("cross_entropy ls " << ls);
        std::vector<double> loss, lse;
        nonfinite_cross_entropy_ref(l, ls, loss, lse);
        const auto r = kernels::cross_entropy_rows(x, targets_tensor(l.target), ls);
        // loss and lse in the rows' dtype: f64 for f64 logits, else f32.
        const double rt32 = 4 * tol_sum(kernels::cross_entropy_row_dtype(dt), D);
        check_close(r.loss, loss, rt32, rt32 * 4);
        check_close(r.lse, lse, rt32, rt32 * 4);
        const Tensor g = from_vector(random_values(l.rows, 902, -1.0, 1.0), {l.rows}, {.dtype = DType::f32});
        const std::vector<double> dref = nonfinite_cross_entropy_backward_ref(l, to_f64(g), ls);
        check_close(kernels::cross_entropy_backward(g, x, targets_tensor(l.target), r.lse, ls), dref, rt, rt);
      }
    }
}
