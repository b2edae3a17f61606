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

/// Unit roundoffs of kernels/cpu/softmax.cpp for logits of dtype dt. uc: its arithmetic (calc_t:
/// float for f32 and the 16-bit dtypes, double for f64); us: the store of a result into a 16-bit
/// dt (0 otherwise); u64: its sums, log and divisions in double; r = uc + u64: one rounding of the
/// kernel's and one of the float64 reference's, for an operation both perform. std::exp and std::log
/// (float and double) are taken as within 1 ulp, 2 u, of the exact value (glibc's stated bound).
struct Units {
  double uc, us, u64, r;
};
Units units(DType dt) {
  const double uc = unit_roundoff(acc_of(dt)), u64 = unit_roundoff(DType::f64);
  const double us = dt == DType::f16 || dt == DType::bf16 ? unit_roundoff(dt) : 0.0;
  return {uc, us, u64, uc + u64};
}

/// Relative error bound of a column's sum s = sum_d exp(z_d), z_d = x_d - max, for the kernel and
/// the reference together: each term's z rounds (|z| r) and its exp rounds (2 r, exp amplifies the
/// first to |z| r relative); each side sums its n terms in double (gamma_n(u64)).
double sum_rel_bound(const std::vector<double>& z, const Units& un) {
  double s = 0, w = 0;
  for (double v : z)
    if (std::isfinite(v)) {
      s += std::exp(v);
      w += std::exp(v) * (std::fabs(v) + 2) * un.r;
    }
  return w / s + 2 * gamma_n(static_cast<int64_t>(z.size()), un.u64);
}

/// float64 (log-)softmax of row-major values along dim. With `un`, also a per-element bound on
/// |kernels::softmax - it| (kernels/cpu/softmax.cpp, both sides' roundings; z = x - max, s the sum,
/// eps_s its sum_rel_bound):
///   softmax:     y (|z| r + 2 r (own z, exp) + eps_s + uc + 2 u64 (1 / s in double, its cast;
///                the reference's division) + uc (the product) + us)
///   log_softmax: |z| r + eps_s (the log of the sum) + (uc + 4 u64) log s (the log in double on
///                each side, the kernel's cast) + (r + us) |y| (the subtraction, the store)
/// Entries with exp(z) = 0 (z = -inf) are exactly 0 / -inf on both sides: bound 0.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log,
                                const Units* un = nullptr, std::vector<double>* bound = nullptr) {
  int64_t outer, D, inner;
  split(shape, dim, outer, D, inner);
  std::vector<double> y(x.size());
  if (bound) bound->assign(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * D + d) * inner + i; };
      double mx = -INFINITY;
      for (int64_t d = 0; d < D; ++d) mx = std::max(mx, x[at(d)]);
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += std::exp(x[at(d)] - mx);
      for (int64_t d = 0; d < D; ++d) y[at(d)] = log ? x[at(d)] - mx - std::log(s) : std::exp(x[at(d)] - mx) / s;
      if (!bound) continue;
      std::vector<double> z(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) z[d] = x[at(d)] - mx;
      const double eps_s = sum_rel_bound(z, *un), ls = std::log(s);
      for (int64_t d = 0; d < D; ++d) {
        if (!std::isfinite(z[d])) continue;
        const double az = std::fabs(z[d]);
        (*bound)[at(d)] =
            log ? az * un->r + eps_s + (un->uc + 4 * un->u64) * ls + (un->r + un->us) * std::fabs(y[at(d)])
                : y[at(d)] * (az * un->r + 2 * un->r + eps_s + 2 * un->uc + 2 * un->u64 + un->us);
      }
    }
  return y;
}

/// Per-element bound on |kernels::softmax_backward(g, y) - the float64 formula| for row-major
/// (outer, D, inner) g, y of dtype dt (kernels/cpu/softmax.cpp; both sides' roundings): the dot
/// s = sum g y (softmax) or sum g (log) in double, gamma_D(u64) of sum |terms| on each side, and
/// the kernel's cast of s to uc; then
///   softmax:     y (g - s): the difference (r), the product and the store ((r + us) |dx|)
///   log_softmax: g - exp(y) s: exp (2 r), the product (r), the difference and store ((r + us) |dx|)
std::vector<double> softmax_backward_bound(const std::vector<double>& g, const std::vector<double>& y,
                                           const Shape& shape, int64_t dim, bool log, DType dt) {
  const Units un = units(dt);
  int64_t outer, D, inner;
  split(shape, dim, outer, D, inner);
  std::vector<double> bound(g.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return static_cast<size_t>((o * D + d) * inner + i); };
      double s = 0, mag = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double t = log ? g[at(d)] : g[at(d)] * y[at(d)];
        s += t;
        mag += std::fabs(t);
      }
      const double es = 2 * gamma_n(D, un.u64) * mag + un.uc * std::fabs(s);
      for (int64_t d = 0; d < D; ++d) {
        const double gv = g[at(d)], yv = y[at(d)];
        const double dx = log ? gv - std::exp(yv) * s : yv * (gv - s);
        bound[at(d)] =
            (log ? std::exp(yv) * (es + 3 * un.r * std::fabs(s)) : std::fabs(yv) * (es + un.r * std::fabs(gv - s))) +
            (un.r + un.us) * std::fabs(dx);
      }
    }
  return bound;
}

/// Bounds of one cross-entropy row (kernels/cpu/softmax.cpp's cross_entropy_typed against ref_ce,
/// both sides' roundings): eps_s the sum's sum_rel_bound (row_stats rounds z and exp in uc), the
/// log in double on each side (4 u64 log s); loss adds (1 - ls) (max - x_t) (the difference, 1 - ls,
/// the product: 6 u64 of it over both sides) and ls / C * sum (max - x) (C differences and sums,
/// gamma_C(u64) of it on each side, ls / C and the product: 4 u64 more), the two sums and its
/// rounding to the rows' dtype ((4 u64 + uR) |loss|); lse = max + log s one sum each side and the
/// rounding ((2 u64 + uR) |lse|).
struct CeBound {
  double loss, lse;
};
CeBound ce_row_bound(const double* row, int64_t C, int64_t t, double ls, const Units& un, double uR) {
  double mx = -INFINITY;
  for (int64_t c = 0; c < C; ++c) mx = std::max(mx, row[c]);
  std::vector<double> z(static_cast<size_t>(C));
  double s = 0, gap = 0;
  for (int64_t c = 0; c < C; ++c) {
    z[c] = row[c] - mx;
    if (std::isfinite(z[c])) s += std::exp(z[c]);
    gap += mx - row[c];
  }
  const double L = std::log(s), eps_s = sum_rel_bound(z, un), u64 = un.u64;
  const double gap_t = mx - row[t];
  const double loss = L + (1 - ls) * gap_t + (ls != 0 ? ls * gap / C : 0.0), lse = mx + L;
  double lb = eps_s + 4 * u64 * L + 6 * u64 * (1 - ls) * gap_t + (4 * u64 + uR) * std::fabs(loss);
  if (ls != 0) lb += (2 * gamma_n(C, u64) + 4 * u64) * ls * gap / C;
  return {lb, eps_s + 4 * u64 * L + (2 * u64 + uR) * std::fabs(lse)};
}

/// float64 per-row cross-entropy with label smoothing. With `un` (the logits' Units) and the rows'
/// dtype, also the per-row bounds of ce_row_bound on |loss| and |lse|.
std::vector<double> ref_ce(const std::vector<double>& x, int64_t N, int64_t C, const std::vector<int64_t>& t, double ls,
                           std::vector<double>* lse_out = nullptr, const Units* un = nullptr, DType rows = DType::f32,
                           std::vector<double>* loss_bound = nullptr, std::vector<double>* lse_bound = nullptr) {
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
    if (un) {
      const CeBound b = ce_row_bound(x.data() + n * C, C, t[n], ls, *un, unit_roundoff(rows));
      loss_bound->push_back(b.loss);
      lse_bound->push_back(b.lse);
    }
  }
  return loss;
}

/// float64 cross_entropy_backward: g_n (softmax(x_n)_c - (1 - ls) [c == t] - ls / C), and per
/// element a bound on |kernel - it| (cross_entropy_backward_typed; both sides' roundings). The
/// kernel's p = exp((x - max) - fl(log s)): relative eps_s (the sum) + 2 r log s (the log in
/// double, its cast, the subtraction's share) + (r + uc) |z| (z and the subtraction) + 2 uc (exp)
/// + 3 u64 (the reference's z, exp, division); 1 - ls and ls / C in double and cast (2 r each);
/// the two differences (r each); the product by g and the store ((r + us) |d|).
std::vector<double> ref_ce_backward(const std::vector<double>& x, int64_t N, int64_t C, const std::vector<int64_t>& t,
                                    double ls, const std::vector<double>& g, DType dt, std::vector<double>& bound) {
  const Units un = units(dt);
  std::vector<double> d;
  bound.clear();
  for (int64_t n = 0; n < N; ++n) {
    const double* row = x.data() + n * C;
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, row[c]);
    std::vector<double> z(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      z[c] = row[c] - mx;
      s += std::exp(z[c]);
    }
    const double L = std::log(s), eps_s = sum_rel_bound(z, un), smooth = ls / C;
    for (int64_t c = 0; c < C; ++c) {
      const double p = std::exp(z[c]) / s, hit = c == t[n] ? 1 - ls : 0.0, q = p - hit - smooth;
      d.push_back(g[n] * q);
      const double p_rel = eps_s + 2 * un.r * L + (un.r + un.uc) * std::fabs(z[c]) + 2 * un.uc + 3 * un.u64;
      const double eq =
          (p > 0 ? p * p_rel : 0.0) + 2 * un.r * (hit + smooth) + un.r * (std::fabs(p - hit) + std::fabs(q));
      bound.push_back(std::fabs(g[n]) * eq + (un.r + un.us) * std::fabs(d.back()));
    }
  }
  return d;
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
          // Per-element rounding bounds of ref_softmax (its comment has the count).
          const Units un = units(dt);
          std::vector<double> bound;
          const std::vector<double> ref = ref_softmax(xv, x.sizes(), d, log, &un, &bound);
          check_bounded(y, ref, bound);
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
      const Units un = units(dt);
      std::vector<double> bound;
      const std::vector<double> ref = ref_softmax(to_f64(x), {3, 4}, 1, log, &un, &bound);
      Tensor y = kernels::softmax(x, 1, log);
      for (double e : to_f64(y)) CHECK(!std::isnan(e));
      // Log-probabilities reach -2e4 (-2e38): the bound's |z| r and |y| r terms scale with them.
      check_bounded(y, ref, bound);
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

      // f32: the same formula in double from the f32 inputs, sums over D; bounds of
      // softmax_backward_bound.
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
      check_bounded(kernels::softmax_backward(g32, y32, dim, log), ref,
                    softmax_backward_bound(g2, yv, shape, dim, log, DType::f32));
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
      // The rows are f64 for f64 logits (as PyTorch's loss), else f32.
      const DType rows = dt == DType::f64 ? DType::f64 : DType::f32;
      const Units un = units(dt);
      std::vector<double> lse, loss_b, lse_b;
      const std::vector<double> loss = ref_ce(to_f64(x), N, C, t, ls, &lse, &un, rows, &loss_b, &lse_b);
      auto r = kernels::cross_entropy_rows(x, targets_tensor(t), ls);
      CHECK(r.loss.dtype() == rows);
      CHECK(r.lse.dtype() == rows);
      CHECK(r.loss.sizes() == Shape{N});
      // Per-row bounds of ce_row_bound.
      check_bounded(r.loss, loss, loss_b);
      check_bounded(r.lse, lse, lse_b);
    }
  // i32 targets are accepted.
  Tensor x = random_tensor({5, 3}, DType::f32, 7);
  const std::vector<int64_t> t = {0, 2, 1, 1, 0};
  const Units un = units(DType::f32);
  std::vector<double> lse, loss_b, lse_b;
  const std::vector<double> loss = ref_ce(to_f64(x), 5, 3, t, 0.0, &lse, &un, DType::f32, &loss_b, &lse_b);
  check_bounded(kernels::cross_entropy_rows(x, targets_tensor(t, DType::i32)).loss, loss, loss_b);
}

TEST_CASE("cross_entropy_rows: huge logits stay finite and exact", "[cpu][softmax]") {
  const std::vector<double> v = {1e4, 1e4 + 2, -1e4, /**/ -1e38, 1e38, 0, /**/ 1e30, 1e30, 1e30};
  const std::vector<int64_t> t = {0, 0, 2};
  Tensor x = from_vector(v, {3, 3}, {.dtype = DType::f32});
  const Units un = units(DType::f32);
  std::vector<double> loss_b0;
  for (double ls : {0.0, 0.2}) {
    std::vector<double> lse, loss_b, lse_b;
    const std::vector<double> loss = ref_ce(to_f64(x), 3, 3, t, ls, &lse, &un, DType::f32, &loss_b, &lse_b);
    auto r = kernels::cross_entropy_rows(x, targets_tensor(t), ls);
    INFO("ls " << ls);
    // ce_row_bound: the rounding to f32 is relative to the values themselves (up to 2e38).
    check_bounded(r.loss, loss, loss_b);
    check_bounded(r.lse, lse, lse_b);
    if (ls == 0.0) loss_b0 = loss_b;
  }
  // Row 0 without smoothing: 2 + log(1 + e^-2 + e^-2e4), where a naive exp(1e4) would overflow.
  // Within ce_row_bound of the exact value; the closed form rounds in double (exp, log1p, the sum:
  // under 5 u64 of it).
  const float l0 = kernels::cross_entropy_rows(x, targets_tensor(t)).loss.to_vector<float>()[0];
  const double l0_exact = 2.0 + std::log1p(std::exp(-2.0));
  CHECK(std::fabs(l0 - l0_exact) <= kSecondOrder * loss_b0[0] + 5 * unit_roundoff(DType::f64) * l0_exact);
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
      std::vector<double> bound;
      const std::vector<double> ref = ref_ce_backward(x2v, N, C, t, ls, std::vector<double>(N, 0.25), dt, bound);
      INFO(dtype_name(dt));
      check_bounded(d2, ref, bound);
    }
  }
  // Huge logits: probabilities from the recomputed row statistics, not a rounded f32 lse.
  Tensor xh = from_vector<double>({1e4, 1e4, 1e4 - 1}, {1, 3}, {.dtype = DType::f32});
  auto rh = kernels::cross_entropy_rows(xh, targets_tensor({1}));
  Tensor dh =
      kernels::cross_entropy_backward(from_vector({1.0}, {1}, {.dtype = DType::f32}), xh, targets_tensor({1}), rh.lse);
  // ref_ce_backward's bound; its probabilities are 1 / z, 1 / z, e^-1 / z with z = 2 + e^-1.
  std::vector<double> bh;
  const std::vector<double> refh = ref_ce_backward(to_f64(xh), 1, 3, {1}, 0.0, {1.0}, DType::f32, bh);
  const double z = 2 + std::exp(-1.0);
  CHECK(std::fabs(refh[0] - 1 / z) <= 4 * unit_roundoff(DType::f64));
  check_bounded(dh, refh, bh);
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
      // Bounds per element as in the finite tests (ref_softmax, softmax_backward_bound,
      // ce_row_bound, ref_ce_backward), computed from the rows' finite entries; NaN and infinite
      // expected values must match exactly.
      const Units un = units(dt);
      const Tensor x = from_vector(l.x, {l.rows, D}, {.dtype = dt});
      l.x = to_f64(x);  // the references see the logits as rounded to dt
      const Tensor xt = from_vector(transposed(l, l.x), {D, l.rows}, {.dtype = dt});  // softmax over dim 0
      for (bool log : {false, true}) {
        INFO("log " << log);
        const std::vector<double> ref = nonfinite_softmax_ref(l, log);
        std::vector<double> bound;
        ref_softmax(l.x, {l.rows, D}, 1, log, &un, &bound);
        check_bounded(kernels::softmax(x, 1, log), ref, bound);
        check_bounded(kernels::softmax(xt, 0, log), transposed(l, ref), transposed(l, bound));
        const Tensor y = from_vector(ref, {l.rows, D}, {.dtype = dt});
        const Tensor g = random_tensor({l.rows, D}, dt, 901 + D, -1.0, 1.0);
        const std::vector<double> gv = to_f64(g), yv = to_f64(y);
        const std::vector<double> dref = nonfinite_softmax_backward_ref(gv, yv, l.rows, D, log);
        check_bounded(kernels::softmax_backward(g, y, 1, log), dref,
                      softmax_backward_bound(gv, yv, {l.rows, D}, 1, log, dt));
      }
      for (double ls : {0.0, 0.1, 1.0}) {  // 1: the target left out (a -inf one too: +inf, not NaN)
        INFO("cross_entropy ls " << ls);
        std::vector<double> loss, lse;
        nonfinite_cross_entropy_ref(l, ls, loss, lse);
        const auto r = kernels::cross_entropy_rows(x, targets_tensor(l.target), ls);
        // loss and lse in the rows' dtype: f64 for f64 logits, else f32.
        std::vector<double> lse_ignored, loss_b, lse_b;
        ref_ce(l.x, l.rows, D, l.target, ls, &lse_ignored, &un, kernels::cross_entropy_row_dtype(dt), &loss_b, &lse_b);
        check_bounded(r.loss, loss, loss_b);
        check_bounded(r.lse, lse, lse_b);
        const Tensor g = from_vector(random_values(l.rows, 902, -1.0, 1.0), {l.rows}, {.dtype = DType::f32});
        const std::vector<double> dref = nonfinite_cross_entropy_backward_ref(l, to_f64(g), ls);
        std::vector<double> db;
        ref_ce_backward(l.x, l.rows, D, l.target, ls, to_f64(g), dt, db);
        check_bounded(kernels::cross_entropy_backward(g, x, targets_tensor(l.target), r.lse, ls), dref, db);
      }
    }
}
