// CPU batch norm and dropout (all floating dtypes).
//
// Batch norm: x is a contiguous (N, C, S) view. With S > 1 each task owns whole channels; with
// S == 1 (channels-last, 2-D) tasks take fixed chunks of rows whose partial sums combine in chunk
// order (below), so results do not depend on the thread count. Sums accumulate in double; the
// variance is two-pass (sum of squared
// deviations from the mean), which stays accurate when |mean| >> std, where E[x^2] - E[x]^2
// cancels. The elementwise passes compute in the parameter type (f32 below f64) from per-channel
// factors computed in double and rounded once: y = x * scale + shift, and in the backward
// dx = wi * ((g - mean(g)) - k * (x - mean)) with wi = w * invstd, k = invstd * mean(g * xhat)
// (tests/layers/test_batchnorm.cpp bounds both against float64). f16 / bf16 inputs keep f32
// parameters and statistics (kernels/norm.h); their outputs are computed in f32 and rounded once,
// as cuDNN does. The f32 loops also run compiled for x86-64-v3 where the CPU has it (loops.h).
// On ResNet-18's batch-32 shapes the forward and backward of the four stages went from 14.5 to
// 6.5-6.7 ms (channels-last alone 9.0 to 3.0), against PyTorch 2.15's 10.7-12.9 (channels-last 6.1-6.5)
// on the same machine (docs/benchmarks.md, "Batch norm on the CPU").
// Dropout: one Philox block per 4 consecutive elements (the layout of core/rng.h), the keep test
// in integers (dropout_threshold), so CUDA's kernel reproduces the mask exactly. f32 draws four
// blocks at a time with SSE2 (philox_x4.h): Philox was most of dropout's cost.
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include <ember/core/half.h>
#include <ember/core/rng.h>
#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/loops.h>
#include <ember/kernels/cpu/philox_x4.h>
#include <ember/kernels/norm.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kGrainElems = 32768;

/// Parameter type of input type T: double for double, else float.
template <typename T> using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Per-channel sums accumulate in double (the f64 reference's error bound holds whatever their
// order) in a fixed order that depends on the shape only, never on the thread count:
//
// - S > 1 (row-major): one task per channel walks the channel's planes, kLanes (kShortLanes
//   on planes shorter than that) independent accumulators along each plane (so the loop vectorizes
//   and the adds do not wait on each other), added together in order at the end.
// - S == 1 (channels-last, which the front views as (N*H*W, C, 1), or 2-D): the rows are cut into
//   fixed chunks of rows_per_chunk(C) rows, one task per chunk, which reads its rows whole (all
//   channels, contiguous) and keeps per-channel partials; the chunks' partials are then combined
//   in chunk order. The variance combines each chunk's own two-pass sum of squared deviations
//   (its second pass reads the chunk from cache) with Chan et al.'s term n_q (mean_q - mean)^2.

constexpr int kLanes = 32;
constexpr int kShortLanes = 8;
constexpr int64_t kChunkElems = 65536;  // values per row chunk (S == 1): 256 KiB of f32

int64_t rows_per_chunk(int64_t C) { return std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)); }

/// sums[k] += term k of f(a, b) over the pairs (x[i], y[i]) of channel c's planes (S > 1), in L
/// accumulators per term along each plane.
template <int L, size_t K, typename T, typename F>
[[gnu::always_inline]] inline void plane_sums_in(const T* x, const T* y, int64_t N, int64_t C, int64_t S, int64_t c,
                                                 double (&sums)[K], F&& f) {
  double acc[K][L] = {};
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = (n * C + c) * S;
    const T* a = x + base;
    const T* b = y + base;
    int64_t i = 0;
    for (; i + L <= S; i += L)
      for (int l = 0; l < L; ++l) {
        const std::array<double, K> t = f(static_cast<double>(a[i + l]), static_cast<double>(b[i + l]));
        for (size_t k = 0; k < K; ++k) acc[k][l] += t[k];
      }
    for (; i < S; ++i) {
      const std::array<double, K> t = f(static_cast<double>(a[i]), static_cast<double>(b[i]));
      for (size_t k = 0; k < K; ++k) acc[k][0] += t[k];
    }
  }
  for (size_t k = 0; k < K; ++k)
    for (int l = 0; l < L; ++l) sums[k] += acc[k][l];
}

/// plane_sums_in with kLanes accumulators on planes of at least kLanes values, else kShortLanes:
/// each accumulator's additions form one dependency chain, and 8 (two AVX2 vectors of doubles)
/// left the backward's sums waiting on the adds' latency (32: 1.07 -> 0.74 ms on 64 x 32 x 32 at
/// batch 32), while 4x4 planes (16 values) want the 8 that fit them.
template <size_t K, typename T, typename F>
[[gnu::always_inline]] inline void plane_sums(const T* x, const T* y, int64_t N, int64_t C, int64_t S, int64_t c,
                                              double (&sums)[K], F&& f) {
  if (S >= kLanes) plane_sums_in<kLanes>(x, y, N, C, S, c, sums, f);
  else plane_sums_in<kShortLanes>(x, y, N, C, S, c, sums, f);
}

/// out[i] = op(x[i], y[i]) in P over channel c's planes (S > 1).
template <typename T, typename P, typename F>
[[gnu::always_inline]] inline void plane_map(const T* x, const T* y, T* out, int64_t N, int64_t C, int64_t S, int64_t c,
                                             F&& op) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = (n * C + c) * S, e = i + S; i < e; ++i)
      out[i] = static_cast<T>(op(static_cast<P>(x[i]), static_cast<P>(y[i])));
}

/// Channel c's mean and sum of squared deviations from it (two passes over its planes).
template <typename T>
[[gnu::always_inline]] inline void plane_stats(const T* x, int64_t N, int64_t C, int64_t S, int64_t c, double* mean,
                                               double* sq) {
  double sum[1] = {}, dev[1] = {};
  plane_sums(x, x, N, C, S, c, sum, [](double v, double) { return std::array<double, 1>{v}; });
  const double m = sum[0] / static_cast<double>(N * S);
  plane_sums(x, x, N, C, S, c, dev, [m](double v, double) { return std::array<double, 1>{(v - m) * (v - m)}; });
  *mean = m;
  *sq = dev[0];
}

/// Channel c's sum of g and of g * (x - mean).
template <typename T>
[[gnu::always_inline]] inline void plane_grad_sums(const T* g, const T* x, int64_t N, int64_t C, int64_t S, int64_t c,
                                                   double mean, double* sg, double* sgd) {
  double sums[2] = {};
  plane_sums(g, x, N, C, S, c, sums, [mean](double gv, double xv) {
    return std::array<double, 2>{gv, gv * (xv - mean)};
  });
  *sg = sums[0];
  *sgd = sums[1];
}

// ---- the row chunks' loops (S == 1): rows [0, rows) of C values from x, y ----

/// s[c] = the chunk's sum of channel c; m2[c] = its sum of squared deviations from its own mean.
template <typename T>
[[gnu::always_inline]] inline void chunk_stats(const T* x, int64_t rows, int64_t C, double* s, double* m2) {
  std::fill(s, s + C, 0.0);
  std::fill(m2, m2 + C, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) s[c] += static_cast<double>(x[r * C + c]);
  const double inv = 1.0 / static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(x[r * C + c]) - s[c] * inv;
      m2[c] += d * d;
    }
}

/// sg[c] = the chunk's sum of g, sgd[c] = of g * (x - mean[c]).
template <typename T>
[[gnu::always_inline]] inline void chunk_grad_sums(const T* g, const T* x, int64_t rows, int64_t C, const double* mean,
                                                   double* sg, double* sgd) {
  std::fill(sg, sg + C, 0.0);
  std::fill(sgd, sgd + C, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double gv = static_cast<double>(g[r * C + c]);
      sg[c] += gv;
      sgd[c] += gv * (static_cast<double>(x[r * C + c]) - mean[c]);
    }
}

/// out = x * scale[c] + shift[c], in P.
template <typename T, typename P>
[[gnu::always_inline]] inline void chunk_affine(const T* x, T* out, int64_t rows, int64_t C, const P* scale,
                                                const P* shift) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = static_cast<T>(static_cast<P>(x[r * C + c]) * scale[c] + shift[c]);
}

/// gx = wi[c] * ((g - mg[c]) - k[c] * (x - mean[c])), in P.
template <typename T, typename P>
[[gnu::always_inline]] inline void chunk_grad(const T* g, const T* x, T* gx, int64_t rows, int64_t C, const P* wi,
                                              const P* mg, const P* k, const P* mean) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      gx[i] = static_cast<T>(wi[c] * ((static_cast<P>(g[i]) - mg[c]) - k[c] * (static_cast<P>(x[i]) - mean[c])));
    }
}

/// out = x * scale + shift over channel c's planes, in P.
template <typename T, typename P>
[[gnu::always_inline]] inline void plane_affine(const T* x, T* out, int64_t N, int64_t C, int64_t S, int64_t c, P scale,
                                                P shift) {
  plane_map<T, P>(x, x, out, N, C, S, c, [=](P v, P) { return v * scale + shift; });
}

/// gx = wi * ((g - mg) - k * (x - mean)) over channel c's planes, in P.
template <typename T, typename P>
[[gnu::always_inline]] inline void plane_grad(const T* g, const T* x, T* gx, int64_t N, int64_t C, int64_t S, int64_t c,
                                              P wi, P mg, P k, P mean) {
  plane_map<T, P>(g, x, gx, N, C, S, c, [=](P gv, P xv) { return wi * ((gv - mg) - k * (xv - mean)); });
}

// f32 (the training dtype) runs copies of the loops above compiled for x86-64-v3 where the CPU has
// it (loops.h): these overloads, which the callers' f32 calls pick over the templates.
EMBER_CPU_CLONES void plane_stats(const float* x, int64_t N, int64_t C, int64_t S, int64_t c, double* mean,
                                  double* sq) {
  plane_stats<float>(x, N, C, S, c, mean, sq);
}
EMBER_CPU_CLONES void plane_grad_sums(const float* g, const float* x, int64_t N, int64_t C, int64_t S, int64_t c,
                                      double mean, double* sg, double* sgd) {
  plane_grad_sums<float>(g, x, N, C, S, c, mean, sg, sgd);
}
EMBER_CPU_CLONES void plane_affine(const float* x, float* out, int64_t N, int64_t C, int64_t S, int64_t c, float scale,
                                   float shift) {
  plane_affine<float, float>(x, out, N, C, S, c, scale, shift);
}
EMBER_CPU_CLONES void plane_grad(const float* g, const float* x, float* gx, int64_t N, int64_t C, int64_t S, int64_t c,
                                 float wi, float mg, float k, float mean) {
  plane_grad<float, float>(g, x, gx, N, C, S, c, wi, mg, k, mean);
}
EMBER_CPU_CLONES void chunk_stats(const float* x, int64_t rows, int64_t C, double* s, double* m2) {
  chunk_stats<float>(x, rows, C, s, m2);
}
EMBER_CPU_CLONES void chunk_grad_sums(const float* g, const float* x, int64_t rows, int64_t C, const double* mean,
                                      double* sg, double* sgd) {
  chunk_grad_sums<float>(g, x, rows, C, mean, sg, sgd);
}
EMBER_CPU_CLONES void chunk_affine(const float* x, float* out, int64_t rows, int64_t C, const float* scale,
                                   const float* shift) {
  chunk_affine<float, float>(x, out, rows, C, scale, shift);
}
EMBER_CPU_CLONES void chunk_grad(const float* g, const float* x, float* gx, int64_t rows, int64_t C, const float* wi,
                                 const float* mg, const float* k, const float* mean) {
  chunk_grad<float, float>(g, x, gx, rows, C, wi, mg, k, mean);
}

/// Runs fn(q, r0, rows) for every row chunk q of M rows of C values, parallel.
template <typename F> void for_row_chunks(int64_t M, int64_t C, F&& fn) {
  const int64_t R = rows_per_chunk(C), chunks = (M + R - 1) / R;
  parallel_for(0, chunks, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) fn(q, q * R, std::min(R, M - q * R));
  });
}

/// Runs fn(c) for every channel (S > 1), parallel.
template <typename F> void for_channels(int64_t C, int64_t M, F&& fn) {
  parallel_for(0, C, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(M, 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(c);
  });
}

template <typename T>
void batch_norm_typed(const Tensor& xt, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps, const BatchNormResult& r) {
  using P = param_t<T>;
  const int64_t N = xt.size(0), C = xt.size(1), S = xt.size(2), M = N * S;
  const T* x = static_cast<const T*>(xt.data_ptr());
  T* out = static_cast<T*>(r.out.data_ptr());
  const P* w = weight.defined() ? weight.data<P>() : nullptr;
  const P* b = bias.defined() ? bias.data<P>() : nullptr;
  P* rm = running_mean.defined() ? running_mean.data<P>() : nullptr;
  P* rv = running_var.defined() ? running_var.data<P>() : nullptr;
  std::vector<double> mean(C), invstd(C);
  if (training) {
    std::vector<double> sq(C);  // sum of squared deviations from the mean
    if (S > 1) {
      for_channels(C, M, [&](int64_t c) { plane_stats(x, N, C, S, c, &mean[c], &sq[c]); });
    } else {
      const int64_t R = rows_per_chunk(C), chunks = (M + R - 1) / R;
      std::vector<double> s(chunks * C), m2(chunks * C);
      for_row_chunks(M, C, [&](int64_t q, int64_t r0, int64_t rows) {
        chunk_stats(x + r0 * C, rows, C, s.data() + q * C, m2.data() + q * C);
      });
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0;
        for (int64_t q = 0; q < chunks; ++q) sum += s[q * C + c];
        mean[c] = sum / static_cast<double>(M);
        double dev = 0;
        for (int64_t q = 0; q < chunks; ++q) {
          const double n = static_cast<double>(std::min(R, M - q * R)), d = s[q * C + c] / n - mean[c];
          dev += m2[q * C + c] + n * d * d;
        }
        sq[c] = dev;
      }
    }
    P* save_mean = r.save_mean.data<P>();
    P* save_invstd = r.save_invstd.data<P>();
    for (int64_t c = 0; c < C; ++c) {
      const double var = sq[c] / static_cast<double>(M);  // biased: what normalizes the batch
      invstd[c] = 1.0 / std::sqrt(var + eps);
      save_mean[c] = static_cast<P>(mean[c]);
      save_invstd[c] = static_cast<P>(invstd[c]);
      if (rm != nullptr) {
        const double unbiased = sq[c] / static_cast<double>(M - 1);
        rm[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(rm[c]) + momentum * mean[c]);
        rv[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(rv[c]) + momentum * unbiased);
      }
    }
  } else {
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = static_cast<double>(rm[c]);
      invstd[c] = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
    }
  }
  // y = (x - mean) * invstd * w + b = x * scale + shift
  std::vector<P> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    const double scale_d = invstd[c] * (w ? static_cast<double>(w[c]) : 1.0);
    scale[c] = static_cast<P>(scale_d);
    shift[c] = static_cast<P>((b ? static_cast<double>(b[c]) : 0.0) - mean[c] * scale_d);
  }
  if (S > 1) {
    for_channels(C, M, [&](int64_t c) { plane_affine(x, out, N, C, S, c, scale[c], shift[c]); });
  } else {
    for_row_chunks(M, C, [&](int64_t, int64_t r0, int64_t rows) {
      chunk_affine(x + r0 * C, out + r0 * C, rows, C, scale.data(), shift.data());
    });
  }
}

void batch_norm_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps, const BatchNormResult& out) {
  switch (x.dtype()) {
    case DType::f32:
      return batch_norm_typed<float>(x, weight, bias, running_mean, running_var, training, momentum, eps, out);
    case DType::f64:
      return batch_norm_typed<double>(x, weight, bias, running_mean, running_var, training, momentum, eps, out);
    case DType::f16:
      return batch_norm_typed<Half>(x, weight, bias, running_mean, running_var, training, momentum, eps, out);
    case DType::bf16:
      return batch_norm_typed<BFloat16>(x, weight, bias, running_mean, running_var, training, momentum, eps, out);
    default:
      EMBER_FAIL("batch_norm (CPU): expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(x.dtype()),
                 " for input ", x.shape_str());
  }
}

template <typename T>
void batch_norm_backward_typed(const Tensor& got, const Tensor& xt, const Tensor& weight, const Tensor& save_mean,
                               const Tensor& save_invstd, bool training, const BatchNormGrads& r) {
  using P = param_t<T>;
  const int64_t N = xt.size(0), C = xt.size(1), S = xt.size(2), M = N * S;
  const T* x = static_cast<const T*>(xt.data_ptr());
  const T* g = static_cast<const T*>(got.data_ptr());
  const P* w = weight.defined() ? weight.data<P>() : nullptr;
  const P* sm = save_mean.data<P>();
  const P* si = save_invstd.data<P>();
  T* gx = static_cast<T*>(r.grad_x.data_ptr());
  P* gw = r.grad_weight.data<P>();
  P* gb = r.grad_bias.data<P>();
  std::vector<double> mean(C), sum_g(C), sum_gd(C);  // sum(g), sum(g * (x - mean))
  for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<double>(sm[c]);
  if (S > 1) {
    for_channels(C, M, [&](int64_t c) { plane_grad_sums(g, x, N, C, S, c, mean[c], &sum_g[c], &sum_gd[c]); });
  } else {
    const int64_t R = rows_per_chunk(C), chunks = (M + R - 1) / R;
    std::vector<double> sg(chunks * C), sgd(chunks * C);
    for_row_chunks(M, C, [&](int64_t q, int64_t r0, int64_t rows) {
      chunk_grad_sums(g + r0 * C, x + r0 * C, rows, C, mean.data(), sg.data() + q * C, sgd.data() + q * C);
    });
    for (int64_t q = 0; q < chunks; ++q)
      for (int64_t c = 0; c < C; ++c) {
        sum_g[c] += sg[q * C + c];
        sum_gd[c] += sgd[q * C + c];
      }
  }
  // training: dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)); eval: dx = w * invstd * g.
  // Per channel in double, rounded once to P: wi = w * invstd, mg = mean(g), k = invstd * mean(g * xhat)
  // (per unit of x - mean).
  std::vector<P> mean_p(C), wi(C), mg(C), k(C);
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = static_cast<double>(si[c]);
    const double sum_g_xhat = sum_gd[c] * invstd;
    gb[c] = static_cast<P>(sum_g[c]);
    gw[c] = static_cast<P>(sum_g_xhat);
    mean_p[c] = sm[c];
    wi[c] = static_cast<P>((w ? static_cast<double>(w[c]) : 1.0) * invstd);
    k[c] = static_cast<P>(training ? sum_g_xhat * invstd / static_cast<double>(M) : 0.0);
    mg[c] = static_cast<P>(training ? sum_g[c] / static_cast<double>(M) : 0.0);
  }
  if (S > 1) {
    for_channels(C, M, [&](int64_t c) { plane_grad(g, x, gx, N, C, S, c, wi[c], mg[c], k[c], mean_p[c]); });
  } else {
    for_row_chunks(M, C, [&](int64_t, int64_t r0, int64_t rows) {
      chunk_grad(g + r0 * C, x + r0 * C, gx + r0 * C, rows, C, wi.data(), mg.data(), k.data(), mean_p.data());
    });
  }
}

void batch_norm_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                             const Tensor& save_invstd, bool training, double eps, const BatchNormGrads& out) {
  switch (x.dtype()) {
    case DType::f32:
      return batch_norm_backward_typed<float>(grad_out, x, weight, save_mean, save_invstd, training, out);
    case DType::f64:
      return batch_norm_backward_typed<double>(grad_out, x, weight, save_mean, save_invstd, training, out);
    case DType::f16:
      return batch_norm_backward_typed<Half>(grad_out, x, weight, save_mean, save_invstd, training, out);
    case DType::bf16:
      return batch_norm_backward_typed<BFloat16>(grad_out, x, weight, save_mean, save_invstd, training, out);
    default:
      EMBER_FAIL("batch_norm_backward (CPU): expected a floating dtype (f32, f64, f16, bf16), got ",
                 dtype_name(x.dtype()), " for input ", x.shape_str());
  }
}

template <typename T>
void dropout_typed(const Tensor& xt, double p, uint64_t seed, uint64_t offset, const Tensor& outt) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* x = static_cast<const T*>(xt.data_ptr());
  T* out = static_cast<T*>(outt.data_ptr());
  const int64_t n = xt.numel();
  const uint32_t thr = dropout_threshold(p);
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  const int64_t blocks = (n + 3) / 4;
  parallel_for(0, blocks, kGrainElems / 4, [&](int64_t b0, int64_t b1) {
    int64_t blk = b0;
#if EMBER_HAVE_PHILOX_X4
    if constexpr (std::is_same_v<T, float>) {
      // Four whole blocks (16 elements) per round; the rest (and a partial last block) below.
      const __m128i thr_minus_1 =
          _mm_set1_epi32(static_cast<int>(thr) - 1);  // (u >> 8) < 2^24: signed compare is exact
      const __m128 sc = _mm_set1_ps(scale);
      for (; blk + 4 <= b1 && (blk + 4) * 4 <= n; blk += 4) {
        __m128i w[4];
        philox4x32_x4(seed, offset + static_cast<uint64_t>(blk), w);
        // w[l] holds word l of blocks blk..blk+3; transpose so that row j is block blk + j.
        __m128 r0 = _mm_castsi128_ps(w[0]), r1 = _mm_castsi128_ps(w[1]);
        __m128 r2 = _mm_castsi128_ps(w[2]), r3 = _mm_castsi128_ps(w[3]);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        const __m128 rows[4] = {r0, r1, r2, r3};
        for (int j = 0; j < 4; ++j) {
          const __m128i bits = _mm_srli_epi32(_mm_castps_si128(rows[j]), 8);
          const __m128 keep = _mm_castsi128_ps(_mm_cmpgt_epi32(bits, thr_minus_1));
          const int64_t e = (blk + j) * 4;
          _mm_storeu_ps(out + e, _mm_and_ps(_mm_mul_ps(_mm_loadu_ps(x + e), sc), keep));
        }
      }
    }
#endif
    for (; blk < b1; ++blk) {
      const Philox4 r = philox4x32(seed, offset + static_cast<uint64_t>(blk));
      const int64_t base = blk * 4, lanes = std::min<int64_t>(4, n - base);
      for (int64_t l = 0; l < lanes; ++l) {
        const bool keep = (r.v[l] >> 8) >= thr;
        out[base + l] = keep ? static_cast<T>(static_cast<C>(x[base + l]) * scale) : static_cast<T>(C(0));
      }
    }
  });
}

void dropout_cpu(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
  EMBER_DISPATCH_FLOAT(x.dtype(), "dropout (CPU)", [&]<typename T>() { dropout_typed<T>(x, p, seed, offset, out); });
}

}  // namespace

void register_norm() {
  batch_norm_table.set(DeviceType::CPU, &batch_norm_cpu);
  batch_norm_backward_table.set(DeviceType::CPU, &batch_norm_backward_cpu);
  dropout_table.set(DeviceType::CPU, &dropout_cpu);
}

}  // namespace ember::kernels::cpu
