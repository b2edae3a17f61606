// CPU softmax / log-softmax over the middle dim of (outer, D, inner), their backward, and the fused
// per-row cross-entropy.
//
// Stability: the row maximum is subtracted before exp, so logits of any magnitude give finite
// results; sums accumulate in double. NaN and infinite logits: these loops are the definition
// written down in kernels/softmax.h. std::max(m, x) skips a NaN x, so m is the largest non-NaN
// entry, and the NaN (or inf - inf for a +inf, -inf - -inf for an all -inf row) reaches the sum
// through exp, which makes every output of the row NaN. 16-bit inputs compute in float and round once on store.
// Work splits over outer * inner (each task owns whole softmax columns, so no reduction crosses
// tasks and results do not depend on the thread count).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/softmax.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kGrainElems = 32768;

/// Arithmetic type: double for f64, float otherwise.
template <typename T> using calc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Columns handled together; their running max and sum live in stack arrays of this size.
constexpr int64_t kColBlock = 256;

/// Calls fn(o, i0, i1) for runs of one outer index (at most kColBlock long) covering the flattened
/// (outer, inner) range, split across threads; each run is a set of complete softmax columns.
template <typename Fn> void for_columns(int64_t outer, int64_t D, int64_t inner, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(D, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t b, int64_t e) {
    while (b < e) {
      const int64_t o = b / inner, i0 = b % inner, i1 = std::min({inner, i0 + (e - b), i0 + kColBlock});
      fn(o, i0, i1);
      b += i1 - i0;
    }
  });
}

template <typename T> void softmax_typed(const Tensor& xt, const Tensor& outt, bool log) {
  using C = calc_t<T>;
  const T* x = static_cast<const T*>(xt.data_ptr());
  T* out = static_cast<T*>(outt.data_ptr());
  const int64_t outer = xt.size(0), D = xt.size(1), inner = xt.size(2);
  for_columns(outer, D, inner, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t n = i1 - i0;
    const T* xs = x + o * D * inner + i0;
    T* os = out + o * D * inner + i0;
    C mx[kColBlock];
    double sum[kColBlock];
    std::fill(mx, mx + n, -std::numeric_limits<C>::infinity());
    std::fill(sum, sum + n, 0.0);
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t i = 0; i < n; ++i) mx[i] = std::max(mx[i], static_cast<C>(xs[d * inner + i]));
    }
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t i = 0; i < n; ++i) sum[i] += std::exp(static_cast<C>(xs[d * inner + i]) - mx[i]);
    }
    if (log) {
      // (x - max) - log(sum), never x - (max + log(sum)), which loses log(sum) when max is huge.
      C log_sum[kColBlock];
      for (int64_t i = 0; i < n; ++i) log_sum[i] = static_cast<C>(std::log(sum[i]));
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t i = 0; i < n; ++i) {
          os[d * inner + i] = static_cast<T>((static_cast<C>(xs[d * inner + i]) - mx[i]) - log_sum[i]);
        }
      }
    } else {
      C inv[kColBlock];
      for (int64_t i = 0; i < n; ++i) inv[i] = static_cast<C>(1.0 / sum[i]);
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t i = 0; i < n; ++i) {
          os[d * inner + i] = static_cast<T>(std::exp(static_cast<C>(xs[d * inner + i]) - mx[i]) * inv[i]);
        }
      }
    }
  });
}

void softmax_cpu(const Tensor& x, const Tensor& out, bool log) {
  EMBER_DISPATCH_FLOAT(x.dtype(), "softmax (cpu)", [&]<typename T>() { softmax_typed<T>(x, out, log); });
}

/// softmax:     dx = y * (g - sum_d(g * y))
/// log_softmax: dx = g - exp(y) * sum_d(g)
template <typename T> void softmax_backward_typed(const Tensor& gt, const Tensor& yt, const Tensor& outt, bool log) {
  using C = calc_t<T>;
  const T* g = static_cast<const T*>(gt.data_ptr());
  const T* y = static_cast<const T*>(yt.data_ptr());
  T* out = static_cast<T*>(outt.data_ptr());
  const int64_t outer = yt.size(0), D = yt.size(1), inner = yt.size(2);
  for_columns(outer, D, inner, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t n = i1 - i0, base = o * D * inner + i0;
    double dot[kColBlock];
    std::fill(dot, dot + n, 0.0);
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = base + d * inner + i;
        dot[i] += log ? static_cast<double>(static_cast<C>(g[k]))
                      : static_cast<double>(static_cast<C>(g[k])) * static_cast<double>(static_cast<C>(y[k]));
      }
    }
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = base + d * inner + i;
        const C gv = static_cast<C>(g[k]), yv = static_cast<C>(y[k]), s = static_cast<C>(dot[i]);
        out[k] = static_cast<T>(log ? gv - std::exp(yv) * s : yv * (gv - s));
      }
    }
  });
}

void softmax_backward_cpu(const Tensor& grad, const Tensor& y, const Tensor& out, bool log) {
  EMBER_DISPATCH_FLOAT(y.dtype(), "softmax_backward (cpu)",
                       [&]<typename T>() { softmax_backward_typed<T>(grad, y, out, log); });
}

/// Row statistics of logits row x (C values): max and log(sum(exp(x - max))).
template <typename T> void row_stats(const T* x, int64_t C, double& mx, double& log_sum) {
  using Cm = calc_t<T>;
  Cm m = -std::numeric_limits<Cm>::infinity();
  for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<Cm>(x[c]));
  double s = 0.0;
  for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<Cm>(x[c]) - m);
  mx = m;
  log_sum = std::log(s);
}

// The fronts (kernels/softmax.cpp: cross_entropy_rows, cross_entropy_backward) check every CPU
// target on the host (check_targets) before dispatching: debug-only.
inline void assert_target(int64_t t, int64_t n, int64_t C) {
  EMBER_DEBUG_ASSERT(t >= 0 && t < C, "cross_entropy: target ", t, " at row ", n,
                     " is out of range; expected a class in [0, ", C, ")");
}

// loss_n = lse - (1 - ls) x_t - ls * mean(x), evaluated as
//          log(sum) + (1 - ls) (max - x_t) + ls * mean(max - x)
// so that huge logits cancel before they are added to small terms.
template <typename T>
void cross_entropy_typed(const Tensor& logits, const Tensor& target, double ls, const Tensor& loss_t,
                         const Tensor& lse_t) {
  using R = calc_t<T>;  // kernels::cross_entropy_row_dtype
  const T* x = static_cast<const T*>(logits.data_ptr());
  const int64_t* tgt = target.data<int64_t>();
  R* loss = loss_t.data<R>();
  R* lse = lse_t.data<R>();
  const int64_t N = logits.size(0), C = logits.size(1);
  parallel_for(0, N, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* row = x + n * C;
      const int64_t t = tgt[n];
      assert_target(t, n, C);
      double mx, log_sum;
      row_stats(row, C, mx, log_sum);
      double gap_sum = 0.0;  // sum_c (max - x_c)
      if (ls != 0.0) {
        for (int64_t c = 0; c < C; ++c) gap_sum += mx - static_cast<double>(row[c]);
      }
      // ls = 1 leaves the target out altogether (0 * inf would make a -inf target's loss NaN).
      const double gap_t = ls != 1.0 ? (1.0 - ls) * (mx - static_cast<double>(row[t])) : 0.0;
      loss[n] = static_cast<R>(log_sum + gap_t + (ls != 0.0 ? ls * gap_sum / C : 0.0));
      lse[n] = static_cast<R>(mx + log_sum);
    }
  });
}

void cross_entropy_cpu(const Tensor& logits, const Tensor& target, double ls, const Tensor& loss, const Tensor& lse) {
  EMBER_DISPATCH_FLOAT(logits.dtype(), "cross_entropy (cpu)",
                       [&]<typename T>() { cross_entropy_typed<T>(logits, target, ls, loss, lse); });
}

// d[n, c] = g_n * (exp(x - lse) - (1 - ls) [c == t] - ls / C). The lse handed in is rounded to
// its dtype, and exp would amplify that rounding when logits are huge (|x| ~ 1e4 loses 1e-3 of
// every f32 probability); so the row's max and log-sum are recomputed here (one extra pass over
// the row) and the lse input is not read.
template <typename T>
void cross_entropy_backward_typed(const Tensor& grad_rows, const Tensor& logits, const Tensor& target,
                                  const Tensor& lse_t, double ls, const Tensor& dlogits) {
  using Cm = calc_t<T>;
  const T* x = static_cast<const T*>(logits.data_ptr());
  const int64_t* tgt = target.data<int64_t>();
  const Cm* g = grad_rows.data<Cm>();  // kernels::cross_entropy_row_dtype
  T* d = static_cast<T*>(dlogits.data_ptr());
  const int64_t N = logits.size(0), C = logits.size(1);
  parallel_for(0, N, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* row = x + n * C;
      const int64_t t = tgt[n];
      assert_target(t, n, C);
      double mx, log_sum;
      row_stats(row, C, mx, log_sum);
      const Cm m = static_cast<Cm>(mx), ls_row = static_cast<Cm>(log_sum);
      const Cm gn = static_cast<Cm>(g[n]), smooth = static_cast<Cm>(ls / static_cast<double>(C));
      const Cm hit = static_cast<Cm>(1.0 - ls);
      for (int64_t c = 0; c < C; ++c) {
        const Cm p = std::exp((static_cast<Cm>(row[c]) - m) - ls_row);
        d[n * C + c] = static_cast<T>(gn * (p - (c == t ? hit : Cm(0)) - smooth));
      }
    }
  });
}

void cross_entropy_backward_cpu(const Tensor& grad_rows, const Tensor& logits, const Tensor& target, const Tensor& lse,
                                double ls, const Tensor& dlogits) {
  EMBER_DISPATCH_FLOAT(logits.dtype(), "cross_entropy_backward (cpu)", [&]<typename T>() {
    cross_entropy_backward_typed<T>(grad_rows, logits, target, lse, ls, dlogits);
  });
}

}  // namespace

void register_softmax() {
  softmax_table.set(DeviceType::CPU, &softmax_cpu);
  softmax_backward_table.set(DeviceType::CPU, &softmax_backward_cpu);
  cross_entropy_table.set(DeviceType::CPU, &cross_entropy_cpu);
  cross_entropy_backward_table.set(DeviceType::CPU, &cross_entropy_backward_cpu);
}

}  // namespace ember::kernels::cpu
