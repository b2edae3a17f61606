#pragma once
// Logits holding NaN, +inf and -inf, and what kernels/softmax.h says softmax, log_softmax and
// cross_entropy (forward and backward) give for them, in float64. Shared by the CPU tests
// (tests/kernels/test_softmax.cpp) and their CUDA twins (tests/cuda/test_softmax_cuda.cpp).
//
// The expected values are written from the stated rule, not by repeating the kernels'
// arithmetic: a row with a NaN, a +inf, or only -inf entries is NaN throughout; otherwise -inf
// entries get probability 0 and the rest is the ordinary softmax of the finite entries.
//
// Rows are laid out for the CUDA kernels' thread mapping: a warp handles rows of D <= 1024 (lane
// l reads entries l, l + 32, ...) and a 256-thread block longer rows (thread t reads t, t + 256,
// ...), so "NaN at every entry = 3 mod 32 and = 7 mod 256" leaves one lane (or thread) that has
// seen nothing but NaN: the case whose NaN the old merge dropped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/reference.h"

namespace ember::testing {

/// A (rows, D) matrix of logits with one kind of non-finite pattern per row, and a target per row.
struct NonFiniteLogits {
  int64_t rows = 0, D = 0;
  std::vector<double> x;  // (rows, D) row-major
  std::vector<int64_t> target;  // (rows)
};

/// Row kinds (D >= 3), in this order:
///  0 finite; 1 one NaN; 2 one +inf; 3 one -inf, which is the target; 4 -inf at every entry
///  = 5 mod 32 and = 9 mod 256 (and the last), rest finite: lanes/threads that saw only -inf;
///  5 all -inf; 6 NaN at every entry = 3 mod 32 and = 7 mod 256 (and the last): a lane/thread that
///  saw only NaN; 7 a +inf and a NaN; 8 -inf everywhere but one entry; 9 +inf at every entry
///  = 4 mod 32 (and the first).
inline NonFiniteLogits nonfinite_logits(int64_t D, uint64_t seed) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  NonFiniteLogits r;
  r.rows = 10;
  r.D = D;
  r.x = random_values(r.rows * D, seed, -4.0, 4.0);
  auto at = [&](int64_t row, int64_t d) -> double& { return r.x[static_cast<size_t>(row * D + d)]; };
  at(1, D / 2) = nan;
  at(2, 1) = kInf;
  at(3, 0) = -kInf;
  for (int64_t d = 0; d < D; ++d) {
    if (d % 32 == 5 || d % 256 == 9 || d == D - 1) at(4, d) = -kInf;
    at(5, d) = -kInf;
    if (d % 32 == 3 || d % 256 == 7 || d == D - 1) at(6, d) = nan;
    if (d != D / 3) at(8, d) = -kInf;
    if (d % 32 == 4 || d == 0) at(9, d) = kInf;
  }
  at(7, 0) = kInf;
  at(7, D - 1) = nan;
  r.target = {D - 1, 0, D - 1, 0, 1, 2, 0, 1, D / 3, 1};
  return r;
}

/// Whether kernels/softmax.h leaves the row's normaliser undefined (NaN throughout).
inline bool row_undefined(const double* row, int64_t D) {
  bool all_neg_inf = true;
  for (int64_t d = 0; d < D; ++d) {
    if (std::isnan(row[d]) || row[d] == std::numeric_limits<double>::infinity()) return true;
    if (row[d] != -std::numeric_limits<double>::infinity()) all_neg_inf = false;
  }
  return all_neg_inf;
}

/// (m, log s) of a defined row: the max and the log-sum of exp(x - m) over its finite entries.
inline void row_max_logsum(const double* row, int64_t D, double& m, double& log_s) {
  m = -std::numeric_limits<double>::infinity();
  for (int64_t d = 0; d < D; ++d) m = std::max(m, row[d]);
  double s = 0.0;
  for (int64_t d = 0; d < D; ++d)
    if (std::isfinite(row[d])) s += std::exp(row[d] - m);
  log_s = std::log(s);
}

/// softmax (or log_softmax) of every row of l.x over its D entries.
inline std::vector<double> nonfinite_softmax_ref(const NonFiniteLogits& l, bool log) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> y(l.x.size(), nan);
  for (int64_t n = 0; n < l.rows; ++n) {
    const double* row = l.x.data() + n * l.D;
    if (row_undefined(row, l.D)) continue;
    double m, log_s;
    row_max_logsum(row, l.D, m, log_s);
    for (int64_t d = 0; d < l.D; ++d) {
      const bool gone = row[d] == -inf;
      y[static_cast<size_t>(n * l.D + d)] =
          log ? (gone ? -inf : (row[d] - m) - log_s) : (gone ? 0.0 : std::exp((row[d] - m) - log_s));
    }
  }
  return y;
}

/// softmax_backward's formula applied in float64 to the y and g given (kernels/softmax.h).
inline std::vector<double> nonfinite_softmax_backward_ref(const std::vector<double>& g, const std::vector<double>& y,
                                                          int64_t rows, int64_t D, bool log) {
  std::vector<double> dx(y.size());
  for (int64_t n = 0; n < rows; ++n) {
    double acc = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = static_cast<size_t>(n * D + d);
      acc += log ? g[k] : g[k] * y[k];
    }
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = static_cast<size_t>(n * D + d);
      dx[k] = log ? g[k] - std::exp(y[k]) * acc : y[k] * (g[k] - acc);
    }
  }
  return dx;
}

/// cross_entropy's per-row loss and lse (label smoothing ls) of l.x against l.target.
inline void nonfinite_cross_entropy_ref(const NonFiniteLogits& l, double ls, std::vector<double>& loss,
                                        std::vector<double>& lse) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  loss.assign(static_cast<size_t>(l.rows), nan);
  lse.assign(static_cast<size_t>(l.rows), nan);
  for (int64_t n = 0; n < l.rows; ++n) {
    const double* row = l.x.data() + n * l.D;
    if (row_undefined(row, l.D)) continue;
    double m, log_s;
    row_max_logsum(row, l.D, m, log_s);
    bool any_neg_inf = false;
    double gap = 0.0;  // sum of (m - x) over the finite entries
    for (int64_t d = 0; d < l.D; ++d) {
      if (row[d] == -inf) any_neg_inf = true;
      else gap += m - row[d];
    }
    const double xt = row[l.target[static_cast<size_t>(n)]];
    const bool infinite = xt == -inf || (ls > 0.0 && any_neg_inf);
    loss[static_cast<size_t>(n)] = infinite ? inf : log_s + (1.0 - ls) * (m - xt) + ls * gap / l.D;
    lse[static_cast<size_t>(n)] = m + log_s;
  }
}

/// cross_entropy_backward of l.x with per-row gradients g (label smoothing ls).
inline std::vector<double> nonfinite_cross_entropy_backward_ref(const NonFiniteLogits& l, const std::vector<double>& g,
                                                                double ls) {
  const std::vector<double> p = nonfinite_softmax_ref(l, false);
  std::vector<double> dx(p.size());
  for (int64_t n = 0; n < l.rows; ++n)
    for (int64_t d = 0; d < l.D; ++d) {
      const size_t k = static_cast<size_t>(n * l.D + d);
      const double hit = d == l.target[static_cast<size_t>(n)] ? 1.0 - ls : 0.0;
      dx[k] = g[static_cast<size_t>(n)] * (p[k] - hit - ls / l.D);
    }
  return dx;
}

/// The (D, rows) transpose of l.x, row-major: the same softmax columns laid along dim 0.
inline std::vector<double> transposed(const NonFiniteLogits& l, const std::vector<double>& v) {
  std::vector<double> t(v.size());
  for (int64_t n = 0; n < l.rows; ++n)
    for (int64_t d = 0; d < l.D; ++d) t[static_cast<size_t>(d * l.rows + n)] = v[static_cast<size_t>(n * l.D + d)];
  return t;
}

}  // namespace ember::testing
