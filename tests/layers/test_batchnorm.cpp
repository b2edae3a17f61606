// Batch norm: forward against a float64 reference in training and eval mode, running statistics
// (momentum, unbiased variance), num_batches_tracked, gradchecks in both modes, the f32 kernels of
// both layouts (forward and backward) against float64 with their own error bounds, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_norm.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/norm.h>
#include <ember/layers/batchnorm.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::BatchNorm2d;
using ember::testing::check_bounded;
using ember::testing::gamma_n;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::unit_roundoff;

namespace {

struct Stats {
  std::vector<double> mean, var_biased, var_unbiased;
};
// Per-channel statistics of x (N, C, S) given in row-major order, two-pass in double.
Stats channel_stats(const std::vector<double>& x, int64_t N, int64_t C, int64_t S) {
  Stats st;
  const double M = static_cast<double>(N * S);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) s += x[(n * C + c) * S + i];
    const double mean = s / M;
    double q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) q += (x[(n * C + c) * S + i] - mean) * (x[(n * C + c) * S + i] - mean);
    st.mean.push_back(mean);
    st.var_biased.push_back(q / M);
    st.var_unbiased.push_back(q / (M - 1));
  }
  return st;
}

std::vector<double> normalize_ref(const std::vector<double>& x, const std::vector<double>& mean,
                                  const std::vector<double>& var, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t N, int64_t C, int64_t S, double eps) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        y[k] = (x[k] - mean[c]) / std::sqrt(var[c] + eps) * w[c] + b[c];
      }
  return y;
}

/// Per-element bound of kernels/cpu/norm.cpp's f32 output y = fl(fl(x * scale) + shift), scale and
/// shift computed in double and rounded to f32 (s = invstd w, shift = b - mean s), against
/// normalize_ref: u32 for scale's cast and the product (2 |x s|), shift's cast (|b| + |mean s|) and
/// the sum (|y|); the statistics, in double on both sides: each side's mean within dm / 2 of the
/// exact one (moves y by |s| dm), each side's s within ds / 2 relative (moves y by ds |s (x - mean)|);
/// the other double roundings (shift's two, the reference's four): 6 u64 of the magnitudes.
std::vector<double> normalize_bound(const std::vector<double>& x, const std::vector<double>& mean,
                                    const std::vector<double>& var, const std::vector<double>& w,
                                    const std::vector<double>& b, int64_t N, int64_t C, int64_t S, double eps,
                                    const std::vector<double>& dm, const std::vector<double>& ds) {
  const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64);
  const std::vector<double> y = normalize_ref(x, mean, var, w, b, N, C, S, eps);
  std::vector<double> bound(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        const double sc = std::fabs(w[c] / std::sqrt(var[c] + eps));
        const double xs = std::fabs(x[k]) * sc, ms = std::fabs(mean[c]) * sc, ay = std::fabs(y[k]);
        bound[k] = u32 * (2 * xs + std::fabs(b[c]) + ms + ay) + sc * dm[c] + ds[c] * sc * std::fabs(x[k] - mean[c]) +
                   6 * u64 * (xs + ms + std::fabs(b[c]) + ay);
      }
  return bound;
}

}  // namespace

TEST_CASE("BatchNorm2d: training forward and running statistics vs float64 reference", "[cpu][layers]") {
  const int64_t N = 3, C = 5, H = 4, W = 7, S = H * W;
  BatchNorm2d bn(C);
  CHECK(bn.named_parameters().size() == 2);
  auto bufs = bn.named_buffers();
  REQUIRE(bufs.size() == 3);
  CHECK(bufs[0].first == "running_mean");
  CHECK(bufs[1].first == "running_var");
  CHECK(bufs[2].first == "num_batches_tracked");
  {
    NoGradGuard no_grad;
    bn.weight().copy_(random_tensor({C}, DType::f32, 1, 0.5, 2.0));
    bn.bias().copy_(random_tensor({C}, DType::f32, 2));
  }
  const auto w = to_f64(bn.weight()), b = to_f64(bn.bias());
  std::vector<double> rm(C, 0.0), rv(C, 1.0);
  std::vector<double> e_rm(C, 0.0), e_rv(C, 0.0);  // running error bounds of rm and rv
  const double momentum = 0.1, eps = 1e-5;
  const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64);
  for (int step = 0; step < 2; ++step) {
    // Non-contiguous input with a channel offset so mean and variance differ per channel.
    Tensor x = random_tensor({N, C, H, W}, DType::f32, 10 + step, -2.0, 3.0, Layout::Transposed);
    const auto xv = to_f64(x);
    Tensor y = bn.forward(x);
    const Stats st = channel_stats(xv, N, C, S);
    const auto ref = normalize_ref(xv, st.mean, st.var_biased, w, b, N, C, S, eps);
    // The statistics, both sides in double over M = N S values: the mean's sum within
    // gamma_M(u64) sum |x| and its division u64 |mean|; the variance sums M squares of deviations
    // (the deviation, square and sum: gamma_{M+2}(u64) relative; the mean's error cancels to first
    // order), then /M, + eps, sqrt, 1 / and * w: 5 u64 more on s. Doubled: two sides.
    const int64_t M = N * S;
    std::vector<double> dm(C), ds(C, 2 * (gamma_n(M + 2, u64) + 5 * u64)), dv(C);
    for (int64_t c = 0; c < C; ++c) {
      double sum_abs = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) sum_abs += std::fabs(xv[(n * C + c) * S + i]);
      dm[c] = 2 * (gamma_n(M, u64) * sum_abs / M + u64 * std::fabs(st.mean[c]));
      dv[c] = 2 * (gamma_n(M + 2, u64) + u64) * st.var_unbiased[c];
    }
    check_bounded(y, ref, normalize_bound(xv, st.mean, st.var_biased, w, b, N, C, S, eps, dm, ds));
    // running = (1 - momentum) running + momentum batch in double (four roundings each side), then
    // rounded to f32 (u32); the stored f32 running value carries its previous error.
    for (int64_t c = 0; c < C; ++c) {
      const double a_rm = (1 - momentum) * std::fabs(rm[c]) + momentum * std::fabs(st.mean[c]);
      const double a_rv = (1 - momentum) * std::fabs(rv[c]) + momentum * st.var_unbiased[c];
      rm[c] = (1 - momentum) * rm[c] + momentum * st.mean[c];
      rv[c] = (1 - momentum) * rv[c] + momentum * st.var_unbiased[c];
      e_rm[c] = (1 - momentum) * e_rm[c] + momentum * dm[c] + u32 * std::fabs(rm[c]) + 8 * u64 * a_rm;
      e_rv[c] = (1 - momentum) * e_rv[c] + momentum * dv[c] + u32 * std::fabs(rv[c]) + 8 * u64 * a_rv;
    }
    check_bounded(bn.running_mean(), rm, e_rm);
    check_bounded(bn.running_var(), rv, e_rv);
    CHECK(bn.num_batches_tracked().item<int64_t>() == step + 1);
  }
}

TEST_CASE("batch_norm f32 kernels, row-major and channels-last, forward and backward vs float64", "[cpu][layers]") {
  // 40 x 9 x 11 = 3960 values per channel: channels-last runs 2 row chunks of 2730 rows (the last
  // one shorter), row-major a plane of 99 (12 lanes of 8, and a tail of 3) per image.
  const int64_t N = 40, C = 24, H = 9, W = 11, S = H * W, M = N * S;
  const double u32 = unit_roundoff(DType::f32), u64 = unit_roundoff(DType::f64), eps = 1e-5;
  const Tensor w = random_tensor({C}, DType::f32, 31, 0.5, 2.0), b = random_tensor({C}, DType::f32, 32);
  const auto wv = to_f64(w), bv = to_f64(b);
  for (const MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    INFO((f == MemoryFormat::channels_last ? "channels-last" : "row-major"));
    // An offset per channel (the variance's conditioning) and gradients of both signs.
    const Tensor x = random_tensor({N, C, H, W}, DType::f32, 33, 1.0, 3.0).contiguous(f);
    const Tensor g = random_tensor({N, C, H, W}, DType::f32, 34, -1.0, 1.0).contiguous(f);
    const auto xv = to_f64(x), gv = to_f64(g);  // logical (N, C, H, W) order
    const Stats st = channel_stats(xv, N, C, S);
    const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, eps);
    CHECK(r.out.is_contiguous(f));
    // The forward: the statistics' error model of the row-major test above (sums in double in any
    // order: gamma_M(u64); the chunks' combined squared deviations are positive terms, within
    // gamma_{M+2}(u64) relative).
    std::vector<double> dm(C), ds(C, 2 * (gamma_n(M + 2, u64) + 5 * u64));
    for (int64_t c = 0; c < C; ++c) {
      double sum_abs = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) sum_abs += std::fabs(xv[(n * C + c) * S + i]);
      dm[c] = 2 * (gamma_n(M, u64) * sum_abs / M + u64 * std::fabs(st.mean[c]));
    }
    check_bounded(r.out, normalize_ref(xv, st.mean, st.var_biased, wv, bv, N, C, S, eps),
                  normalize_bound(xv, st.mean, st.var_biased, wv, bv, N, C, S, eps, dm, ds));
    // The backward, from the saved f32 statistics as given: per channel in double, wi = w invstd,
    // mg = mean(g), k = invstd^2 mean(g (x - mean)); then dx = wi ((g - mg) - k (x - mean)) in f32,
    // each factor rounded once (u32), the difference x - mean, its product with k, the two
    // subtractions and the last product one rounding each. The sums' double error: gamma_M(u64).
    for (const bool training : {true, false}) {
      INFO((training ? "training" : "eval"));
      const auto mean = to_f64(r.save_mean), invstd = to_f64(r.save_invstd);
      const kernels::BatchNormGrads gr =
          kernels::batch_norm_backward(g, x, w, r.save_mean, r.save_invstd, training, eps);
      std::vector<double> ex(N * C * S), bx(N * C * S), ew(C), bw(C), eb(C), bb(C);
      for (int64_t c = 0; c < C; ++c) {
        double sg = 0, sgd = 0, sga = 0, sgda = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) {
            const int64_t k = (n * C + c) * S + i;
            const double d = xv[k] - mean[c];
            sg += gv[k], sga += std::fabs(gv[k]), sgd += gv[k] * d, sgda += std::fabs(gv[k] * d);
          }
        const double is = invstd[c], wi = wv[c] * is;
        eb[c] = sg;
        bb[c] = u32 * std::fabs(sg) + 2 * gamma_n(M, u64) * sga;
        ew[c] = sgd * is;
        bw[c] = u32 * std::fabs(ew[c]) + 2 * (gamma_n(M + 1, u64) + u64) * sgda * is;
        const double mg = training ? sg / M : 0.0, kk = training ? sgd * is * is / M : 0.0;
        const double e_mg =
            training ? u32 * std::fabs(mg) + 2 * (gamma_n(M, u64) * sga + u64 * std::fabs(sg)) / M : 0.0;
        const double e_k =
            training ? u32 * std::fabs(kk) + 2 * (gamma_n(M + 1, u64) * sgda + 4 * u64 * std::fabs(sgd)) * is * is / M
                     : 0.0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) {
            const int64_t k = (n * C + c) * S + i;
            const double d = xv[k] - mean[c], inner = (gv[k] - mg) - kk * d, gx = wi * inner;
            ex[k] = gx;
            bx[k] = std::fabs(wi) * (u32 * std::fabs(gv[k] - mg) + e_mg + gamma_n(3, u32) * std::fabs(kk * d) +
                                     e_k * std::fabs(d) + u32 * std::fabs(inner)) +
                    2 * (u32 + 2 * u64) * std::fabs(gx);
          }
      }
      check_bounded(gr.grad_x, ex, bx);
      check_bounded(gr.grad_weight, ew, bw);
      check_bounded(gr.grad_bias, eb, bb);
    }
  }
}

TEST_CASE("BatchNorm2d: eval mode normalizes with the running statistics and leaves them alone", "[cpu][layers]") {
  const int64_t N = 2, C = 3, H = 5, W = 3, S = H * W;
  BatchNorm2d bn(C, 1e-3, 0.2);
  {
    NoGradGuard no_grad;
    bn.running_mean().copy_(random_tensor({C}, DType::f32, 3));
    bn.running_var().copy_(random_tensor({C}, DType::f32, 4, 0.5, 2.0));
    bn.weight().copy_(random_tensor({C}, DType::f32, 5));
    bn.bias().copy_(random_tensor({C}, DType::f32, 6));
  }
  const auto rm = to_f64(bn.running_mean()), rv = to_f64(bn.running_var());
  bn.eval();
  Tensor x = random_tensor({N, C, H, W}, DType::f32, 7);
  Tensor y = bn.forward(x);
  const auto xv = to_f64(x), wv = to_f64(bn.weight()), bv = to_f64(bn.bias());
  const auto ref = normalize_ref(xv, rm, rv, wv, bv, N, C, S, 1e-3);
  // normalize_bound with the running statistics as given (exact: dm = 0) and s from rv + eps, the
  // sqrt, 1 / and * w in double on each side (4 u64, doubled).
  const double u64 = unit_roundoff(DType::f64);
  check_bounded(
      y, ref,
      normalize_bound(xv, rm, rv, wv, bv, N, C, S, 1e-3, std::vector<double>(C, 0.0), std::vector<double>(C, 8 * u64)));
  CHECK(to_f64(bn.running_mean()) == rm);
  CHECK(to_f64(bn.running_var()) == rv);
  CHECK(bn.num_batches_tracked().item<int64_t>() == 0);
}

TEST_CASE("batch_norm: gradcheck in training mode (x, weight, bias, non-contiguous x)", "[cpu][layers]") {
  const int64_t C = 3;
  Tensor rm = zeros({C}, {.dtype = DType::f64}), rv = ones({C}, {.dtype = DType::f64});
  auto fn = [&](const std::vector<Tensor>& v) { return batch_norm(v[0], v[1], v[2], rm, rv, true, 0.1, 1e-5); };
  EMBER_CHECK_GRADIENTS(fn, {random_tensor({4, C, 3, 5}, DType::f64, 21, -1, 2, Layout::Transposed),
                             random_tensor({C}, DType::f64, 22, 0.5, 1.5), random_tensor({C}, DType::f64, 23)});
  // Without affine parameters, and (N, C) input.
  auto fn2 = [](const std::vector<Tensor>& v) {
    return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  };
  EMBER_CHECK_GRADIENTS(fn2, {random_tensor({6, C}, DType::f64, 24, -1, 1, Layout::Strided)});
}

TEST_CASE("batch_norm: gradcheck in eval mode", "[cpu][layers]") {
  const int64_t C = 4;
  Tensor rm = random_tensor({C}, DType::f64, 31), rv = random_tensor({C}, DType::f64, 32, 0.5, 2.0);
  auto fn = [&](const std::vector<Tensor>& v) { return batch_norm(v[0], v[1], v[2], rm, rv, false, 0.1, 1e-5); };
  EMBER_CHECK_GRADIENTS(fn, {random_tensor({3, C, 2, 3}, DType::f64, 33, -1, 1, Layout::Transposed),
                             random_tensor({C}, DType::f64, 34), random_tensor({C}, DType::f64, 35)});
}

TEST_CASE("BatchNorm2d: layer gradients in f64 match the functional gradcheck", "[cpu][layers]") {
  BatchNorm2d bn(2);
  bn.to(DType::f64);
  CHECK(bn.running_mean().dtype() == DType::f64);
  CHECK(bn.num_batches_tracked().dtype() == DType::i64);
  auto fn = [&](const std::vector<Tensor>& v) { return bn.forward(v[0]); };
  EMBER_CHECK_GRADIENTS(fn, {random_tensor({3, 2, 3, 3}, DType::f64, 41)});
  bn.eval();
  EMBER_CHECK_GRADIENTS(fn, {random_tensor({3, 2, 3, 3}, DType::f64, 42)});
}

TEST_CASE("BatchNorm2d: errors name the shapes", "[cpu][layers]") {
  BatchNorm2d bn(3);
  CHECK_THROWS_WITH(bn.forward(zeros({2, 4, 3, 3})),
                    Catch::Contains("[2, 4, 3, 3]") && Catch::Contains("(N, 3, H, W)"));
  CHECK_THROWS_WITH(bn.forward(zeros({1, 3, 1, 1})), Catch::Contains("more than 1 value per channel"));
  CHECK(bn.num_batches_tracked().item<int64_t>() == 0);
  CHECK_THROWS_WITH(bn.forward(zeros({2, 3, 2, 2}, {.dtype = DType::f64})), Catch::Contains("dtype f64"));
}
