// CPU batch norm and dropout (all floating dtypes).
//
// Batch norm: x is a contiguous (N, C, S) view; each task owns whole channels (a block of them
// when S == 1, see kChannelBlock), so per-channel sums never cross tasks and results do not depend
// on the thread count. Sums accumulate in double;
// the variance is two-pass (sum of squared deviations from the mean), which stays accurate when
// |mean| >> std, where E[x^2] - E[x]^2 cancels. f16 / bf16 inputs keep f32 parameters and
// statistics (kernels/norm.h); their outputs are computed in f32 and rounded once, as cuDNN does.
// Dropout: one Philox block per 4 consecutive elements (the layout of core/rng.h), the keep test
// in integers (dropout_threshold), so CUDA's kernel reproduces the mask exactly. f32 draws four
// blocks at a time with SSE2 (philox_x4.h): Philox was most of dropout's cost.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/core/rng.h>
#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/philox_x4.h>
#include <ember/kernels/norm.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kGrainElems = 32768;

/// Channels per task: one when each (n, c) holds a plane of S > 1 values (the task walks the
/// channel's planes), kChannelBlock when S == 1 (a channels-last input, which the front views as
/// (N*H*W, C, 1), or a 2-D one): a channel's values are then C apart, so a task takes a block of
/// adjacent channels and walks the rows, using whole cache lines. Each channel's sums still run
/// over n, then s, in order: the same results for any block size and thread count.
constexpr int64_t kChannelBlock = 16;

/// Runs fn(c0, c1) over blocks of channels, parallel; M values per channel.
void for_channel_blocks(int64_t C, int64_t S, int64_t M, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t block = S == 1 ? kChannelBlock : 1;
  const int64_t blocks = (C + block - 1) / block;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(M * block, 1));
  parallel_for(0, blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i * block, std::min(C, (i + 1) * block));
  });
}

/// Calls f(j, i) for every value of channels [c0, c0 + nc) of an (N, C, S) array: j the channel
/// within the block, i the element's offset; per channel in (n, s) order. S == 1 gets its own loop
/// (no inner loop of one), which the compiler vectorises over the block.
template <typename F> inline void for_block_values(int64_t N, int64_t C, int64_t S, int64_t c0, int64_t nc, F&& f) {
  if (S == 1) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < nc; ++j) f(j, n * C + c0 + j);
    return;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < nc; ++j)
      for (int64_t i = (n * C + c0 + j) * S, e = i + S; i < e; ++i) f(j, i);
}

/// Parameter type of input type T: double for double, else float.
template <typename T> using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void batch_norm_typed(const Tensor& xt, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps, const BatchNormResult& r) {
  const int64_t N = xt.size(0), C = xt.size(1), S = xt.size(2), M = N * S;
  const T* x = static_cast<const T*>(xt.data_ptr());
  T* out = static_cast<T*>(r.out.data_ptr());
  using P = param_t<T>;
  const P* w = weight.defined() ? weight.data<P>() : nullptr;
  const P* b = bias.defined() ? bias.data<P>() : nullptr;
  P* rm = running_mean.defined() ? running_mean.data<P>() : nullptr;
  P* rv = running_var.defined() ? running_var.data<P>() : nullptr;
  P* save_mean = training ? r.save_mean.data<P>() : nullptr;
  P* save_invstd = training ? r.save_invstd.data<P>() : nullptr;
  for_channel_blocks(C, S, M, [&](int64_t c0, int64_t c1) {
    const int64_t nc = c1 - c0;
    double mean[kChannelBlock], invstd[kChannelBlock];
    P scale[kChannelBlock], shift[kChannelBlock];
    if (training) {
      double sum[kChannelBlock] = {}, sq[kChannelBlock] = {};
      for_block_values(N, C, S, c0, nc, [&](int64_t j, int64_t i) { sum[j] += static_cast<double>(x[i]); });
      for (int64_t j = 0; j < nc; ++j) mean[j] = sum[j] / static_cast<double>(M);
      for_block_values(N, C, S, c0, nc, [&](int64_t j, int64_t i) {
        const double d = static_cast<double>(x[i]) - mean[j];
        sq[j] += d * d;
      });
      for (int64_t j = 0; j < nc; ++j) {
        const int64_t c = c0 + j;
        const double var = sq[j] / static_cast<double>(M);  // biased: what normalizes the batch
        invstd[j] = 1.0 / std::sqrt(var + eps);
        save_mean[c] = static_cast<P>(mean[j]);
        save_invstd[c] = static_cast<P>(invstd[j]);
        if (rm != nullptr) {
          const double unbiased = sq[j] / static_cast<double>(M - 1);
          rm[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(rm[c]) + momentum * mean[j]);
          rv[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(rv[c]) + momentum * unbiased);
        }
      }
    } else {
      for (int64_t j = 0; j < nc; ++j) {
        mean[j] = static_cast<double>(rm[c0 + j]);
        invstd[j] = 1.0 / std::sqrt(static_cast<double>(rv[c0 + j]) + eps);
      }
    }
    // y = (x - mean) * invstd * w + b = x * scale + shift
    for (int64_t j = 0; j < nc; ++j) {
      const double scale_d = invstd[j] * (w ? static_cast<double>(w[c0 + j]) : 1.0);
      scale[j] = static_cast<P>(scale_d);
      shift[j] = static_cast<P>((b ? static_cast<double>(b[c0 + j]) : 0.0) - mean[j] * scale_d);
    }
    for_block_values(N, C, S, c0, nc, [&](int64_t j, int64_t i) {
      out[i] = static_cast<T>(static_cast<P>(x[i]) * scale[j] + shift[j]);
    });
  });
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
  const int64_t N = xt.size(0), C = xt.size(1), S = xt.size(2), M = N * S;
  const T* x = static_cast<const T*>(xt.data_ptr());
  const T* g = static_cast<const T*>(got.data_ptr());
  using P = param_t<T>;
  const P* w = weight.defined() ? weight.data<P>() : nullptr;
  const P* sm = save_mean.data<P>();
  const P* si = save_invstd.data<P>();
  T* gx = static_cast<T*>(r.grad_x.data_ptr());
  P* gw = r.grad_weight.data<P>();
  P* gb = r.grad_bias.data<P>();
  for_channel_blocks(C, S, M, [&](int64_t c0, int64_t c1) {
    const int64_t nc = c1 - c0;
    double sum_g[kChannelBlock] = {}, sum_gd[kChannelBlock] = {};  // sum(g), sum(g * (x - mean))
    double mean[kChannelBlock], wi[kChannelBlock], k[kChannelBlock], mg[kChannelBlock];
    for (int64_t j = 0; j < nc; ++j) mean[j] = static_cast<double>(sm[c0 + j]);
    for_block_values(N, C, S, c0, nc, [&](int64_t j, int64_t i) {
      const double gv = static_cast<double>(g[i]);
      sum_g[j] += gv;
      sum_gd[j] += gv * (static_cast<double>(x[i]) - mean[j]);
    });
    for (int64_t j = 0; j < nc; ++j) {
      const int64_t c = c0 + j;
      const double invstd = static_cast<double>(si[c]);
      const double sum_g_xhat = sum_gd[j] * invstd;
      gb[c] = static_cast<P>(sum_g[j]);
      gw[c] = static_cast<P>(sum_g_xhat);
      wi[j] = (w ? static_cast<double>(w[c]) : 1.0) * invstd;
      // training: dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)); eval: dx = w * invstd * g
      k[j] = training ? sum_g_xhat * invstd / static_cast<double>(M) : 0.0;  // per (x - mean)
      mg[j] = training ? sum_g[j] / static_cast<double>(M) : 0.0;
    }
    for_block_values(N, C, S, c0, nc, [&](int64_t j, int64_t i) {
      const double d = static_cast<double>(x[i]) - mean[j];
      gx[i] = static_cast<T>(wi[j] * (static_cast<double>(g[i]) - mg[j] - d * k[j]));
    });
  });
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
