// Pooling kernels (max with indices, average, adaptive average, and their backwards) against
// direct float64 loops, on odd shapes with overlapping windows, padding and ceil_mode; errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/kernels/pool.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

kernels::Pool2dParams pool(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool ceil = false,
                           bool include_pad = true) {
  return {kh, kw, sh, sw, ph, pw, ceil, include_pad};
}

std::string params_str(const kernels::Pool2dParams& p) {
  return "kernel (" + std::to_string(p.kernel_h) + ", " + std::to_string(p.kernel_w) + ") stride (" +
         std::to_string(p.stride_h) + ", " + std::to_string(p.stride_w) + ") pad (" + std::to_string(p.pad_h) + ", " +
         std::to_string(p.pad_w) + ")" + (p.ceil_mode ? " ceil" : "") + (p.count_include_pad ? "" : " exclude_pad");
}

struct Ref {
  std::vector<double> out, grad;
  std::vector<int64_t> idx;
};

Ref max_ref(const std::vector<double>& x, const std::vector<double>& g, int64_t P, int64_t H, int64_t W, int64_t Ho,
            int64_t Wo, const kernels::Pool2dParams& p) {
  Ref r;
  r.out.resize(P * Ho * Wo);
  r.idx.resize(P * Ho * Wo);
  r.grad.assign(P * H * W, 0.0);
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const PoolWindow wh = pool_window_ref(oh, p.kernel_h, p.stride_h, p.pad_h, H);
        const PoolWindow ww = pool_window_ref(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        double best = -INFINITY;
        int64_t arg = -1;
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw)
            if (arg < 0 || x[(pl * H + ih) * W + iw] > best) {
              best = x[(pl * H + ih) * W + iw];
              arg = ih * W + iw;
            }
        const int64_t oi = (pl * Ho + oh) * Wo + ow;
        r.out[oi] = best;
        r.idx[oi] = arg;
        r.grad[pl * H * W + arg] += g[oi];
      }
  return r;
}

/// Average pooling with the windows of avg_pool2d (p given) or adaptive_avg_pool2d (p null).
Ref avg_ref(const std::vector<double>& x, const std::vector<double>& g, int64_t P, int64_t H, int64_t W, int64_t Ho,
            int64_t Wo, const kernels::Pool2dParams* p) {
  Ref r;
  r.out.assign(P * Ho * Wo, 0.0);
  r.grad.assign(P * H * W, 0.0);
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const AvgWindow a = avg_window_ref(p, oh, ow, H, W, Ho, Wo);
        const int64_t oi = (pl * Ho + oh) * Wo + ow;
        for (int64_t ih = a.h.start; ih < a.h.end; ++ih)
          for (int64_t iw = a.w.start; iw < a.w.end; ++iw) {
            r.out[oi] += x[(pl * H + ih) * W + iw] / a.count;
            r.grad[(pl * H + ih) * W + iw] += g[oi] / a.count;
          }
      }
  return r;
}

const std::vector<kernels::Pool2dParams>& pool_cases() {
  static const std::vector<kernels::Pool2dParams> cases = {
      pool(2, 2, 2, 2, 0, 0),  // the MNIST pool
      pool(3, 2, 2, 1, 1, 0),  // overlapping rows, padded
      pool(3, 3, 2, 2, 1, 1, true),  // ceil_mode with padding
      pool(2, 3, 2, 2, 1, 1, true, false),  // ceil_mode, last window past the input, exclude pad
      pool(3, 3, 1, 1, 1, 1, false, false),  // stride 1, every window overlaps
      pool(4, 1, 3, 1, 2, 0, true, true),  // tall kernel, ceil_mode
      pool(1, 1, 2, 3, 0, 0),  // 1x1 window, subsampling
  };
  return cases;
}

/// Bounds of kernels/cpu/pool.cpp's averages against avg_ref for inputs and gradients in [-1, 1]
/// (ua: its accumulation dtype acc_of(dt); us: the store into a 16-bit dt). Forward: a window of at
/// most K elements summed in ua and divided by its count (>= its number of elements), so within
/// gamma_K(ua) sum|x| / count + ua |out| <= gamma_K(ua) + ua; avg_ref divides each term and sums
/// in double, gamma_K(u64); the store us |out|. Backward: each input sums g / count over the at
/// most M windows covering it (a division and at most M - 1 sums, gamma_M, on each side) with
/// sum |g| / count <= M; the store us |grad|. So rtol us and atol the rest.
struct AvgBound {
  double rt, at_out, at_grad;
};
AvgBound avg_bound(DType dt, int64_t K, int64_t M) {
  const double ua = unit_roundoff(acc_of(dt)), u64 = unit_roundoff(DType::f64);
  const double us = dt == DType::f16 || dt == DType::bf16 ? unit_roundoff(dt) : 0.0;
  return {us, kSecondOrder * (gamma_n(K, ua) + ua + gamma_n(K, u64)),
          kSecondOrder * M * (gamma_n(M, ua) + gamma_n(M, u64))};
}
/// Windows along a dim covering one input: ceil(k / s) for strided windows.
int64_t covering(int64_t k, int64_t s) { return (k + s - 1) / s; }

}  // namespace

TEST_CASE("pool_out_size follows PyTorch's rule, including ceil_mode's last-window check", "[cpu]") {
  CHECK(kernels::pool_out_size(7, 3, 2, 1, false) == 4);
  CHECK(kernels::pool_out_size(7, 3, 2, 1, true) == 4);
  CHECK(kernels::pool_out_size(6, 3, 2, 0, false) == 2);
  CHECK(kernels::pool_out_size(6, 3, 2, 0, true) == 3);
  CHECK(kernels::pool_out_size(5, 2, 2, 1, false) == 3);
  CHECK(kernels::pool_out_size(5, 2, 2, 1, true) == 3);  // a 4th window would start in the right padding
  CHECK(kernels::pool_out_size(24, 2, 2, 0, false) == 12);
  CHECK(kernels::pool_out_size(1, 2, 2, 0, false) == 0);
  CHECK(kernels::pool_out_size(9, 4, 3, 2, true) == 4);
}

TEST_CASE("max_pool2d values, indices and backward match float64 loops", "[cpu]") {
  uint64_t seed = 1;
  for (const auto& p : pool_cases()) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        INFO(params_str(p) << " " << dtype_name(dt));
        const int64_t N = 2, C = 3, H = 7, W = 9;
        Tensor x = random_tensor({N, C, H, W}, dt, seed++, -1, 1, layout);
        auto r = kernels::max_pool2d(x, p);
        const int64_t Ho = kernels::pool_out_size(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
        const int64_t Wo = kernels::pool_out_size(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
        REQUIRE(r.out.sizes() == Shape{N, C, Ho, Wo});
        REQUIRE(r.indices.sizes() == Shape{N, C, Ho, Wo});
        REQUIRE(r.indices.dtype() == DType::i64);
        Tensor g = random_tensor({N, C, Ho, Wo}, dt, seed++);
        const Ref ref = max_ref(to_f64(x), to_f64(g), N * C, H, W, Ho, Wo, p);
        // The max is one of the inputs: exact. Ties are impossible with random values... in f32/f64;
        // in f16/bf16 two inputs may round to one value, so compare the value at the index instead.
        check_close(r.out, ref.out, 0.0);
        const std::vector<double> idx = to_f64(r.indices), xv = to_f64(x);
        int bad = 0;
        for (size_t i = 0; i < idx.size(); ++i) {
          const int64_t plane = int64_t(i) / (Ho * Wo);
          if (xv[plane * H * W + int64_t(idx[i])] != ref.out[i]) ++bad;
          if (dt == DType::f32 || dt == DType::f64) bad += idx[i] != double(ref.idx[i]);
        }
        CHECK(bad == 0);
        if (dt == DType::f32 || dt == DType::f64) {
          // Overlapping windows add the gradients (|g| < 1) of at most M windows into one input, in
          // dt: within gamma_M(u) M of the exact sum, the float64 loop within gamma_M(u64) M.
          const int64_t M = covering(p.kernel_h, p.stride_h) * covering(p.kernel_w, p.stride_w);
          const double at = M * (gamma_n(M, unit_roundoff(dt)) + gamma_n(M, unit_roundoff(DType::f64)));
          check_close(kernels::max_pool2d_backward(g, r.indices, x.sizes(), MemoryFormat::contiguous), ref.grad, 0.0,
                      kSecondOrder * at);
        }
      }
    }
  }
}

TEST_CASE("max_pool2d propagates NaN and handles -inf", "[cpu]") {
  std::vector<double> v(1 * 1 * 4 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i);
  v[5] = NAN;
  v[10] = -INFINITY;
  v[11] = -INFINITY;
  v[14] = -INFINITY;
  v[15] = -INFINITY;
  Tensor x = from_vector(v, {1, 1, 4, 4}, {.dtype = DType::f32});
  auto r = kernels::max_pool2d(x, pool(2, 2, 2, 2, 0, 0));
  const std::vector<double> out = to_f64(r.out), idx = to_f64(r.indices);
  CHECK(std::isnan(out[0]));
  CHECK(idx[0] == 5);
  CHECK(out[1] == 7);
  CHECK(out[2] == 13);
  CHECK(out[3] == -INFINITY);
  CHECK((idx[3] == 10 || idx[3] == 11 || idx[3] == 14 || idx[3] == 15));
}

TEST_CASE("avg_pool2d and its backward match float64 loops (count_include_pad both ways)", "[cpu]") {
  uint64_t seed = 500;
  for (const auto& p : pool_cases()) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      INFO(params_str(p) << " " << dtype_name(dt));
      const int64_t N = 2, C = 3, H = 7, W = 9;
      Tensor x = random_tensor({N, C, H, W}, dt, seed++, -1, 1, Layout::Strided);
      const int64_t Ho = kernels::pool_out_size(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
      const int64_t Wo = kernels::pool_out_size(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
      Tensor g = random_tensor({N, C, Ho, Wo}, dt, seed++, -1, 1, Layout::Transposed);
      const Ref ref = avg_ref(to_f64(x), to_f64(g), N * C, H, W, Ho, Wo, &p);
      Tensor out = kernels::avg_pool2d(x, p);
      REQUIRE(out.sizes() == Shape{N, C, Ho, Wo});
      // avg_bound: windows of at most kh kw elements, at most covering(k, s) windows per dim.
      const AvgBound b =
          avg_bound(dt, p.kernel_h * p.kernel_w, covering(p.kernel_h, p.stride_h) * covering(p.kernel_w, p.stride_w));
      check_close(out, ref.out, b.rt, b.at_out);
      check_close(kernels::avg_pool2d_backward(g, x.sizes(), MemoryFormat::contiguous, p), ref.grad, b.rt, b.at_grad);
    }
  }
}

TEST_CASE("adaptive_avg_pool2d and its backward match float64 loops", "[cpu]") {
  uint64_t seed = 900;
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{3, 4}, {1, 1}, {7, 9}, {5, 2}, {10, 13}, {2, 7}};
  for (auto [oh, ow] : sizes) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      INFO("out " << oh << "x" << ow << " " << dtype_name(dt));
      const int64_t N = 2, C = 3, H = 7, W = 9;
      Tensor x = random_tensor({N, C, H, W}, dt, seed++, -1, 1, Layout::Transposed);
      Tensor g = random_tensor({N, C, oh, ow}, dt, seed++);
      const Ref ref = avg_ref(to_f64(x), to_f64(g), N * C, H, W, oh, ow, nullptr);
      Tensor out = kernels::adaptive_avg_pool2d(x, oh, ow);
      REQUIRE(out.sizes() == Shape{N, C, oh, ow});
      // avg_bound: an adaptive window spans at most ceil(in / out) + 1 inputs per dim, and at most
      // ceil(out / in) + 1 windows cover an input.
      const AvgBound b =
          avg_bound(dt, (covering(H, oh) + 1) * (covering(W, ow) + 1), (covering(oh, H) + 1) * (covering(ow, W) + 1));
      check_close(out, ref.out, b.rt, b.at_out);
      check_close(kernels::adaptive_avg_pool2d_backward(g, x.sizes(), MemoryFormat::contiguous), ref.grad, b.rt,
                  b.at_grad);
    }
  }
}

TEST_CASE("pooling errors name the shapes and parameters", "[cpu]") {
  using Catch::Matchers::Contains;
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f32, 1);
  CHECK_THAT(error_of([&] { kernels::max_pool2d(x, pool(2, 2, 2, 2, 2, 0)); }),
             Contains("padding") && Contains("half"));
  CHECK_THAT(error_of([&] { kernels::max_pool2d(x, pool(9, 2, 1, 1, 0, 0)); }),
             Contains("[2, 3, 7, 9]") && Contains("too small"));
  CHECK_THAT(error_of([&] {
               kernels::avg_pool2d(random_tensor({3, 7, 9}, DType::f32, 1), pool(2, 2, 2, 2, 0, 0));
             }),
             Contains("[3, 7, 9]"));
  CHECK_THAT(error_of([&] { kernels::avg_pool2d(x, pool(2, 2, 0, 2, 0, 0)); }), Contains("stride"));
  // An empty plane is refused even where padding would make the output non-empty (kernel 2, pad 1:
  // one window of padding alone); an empty batch is not.
  for (const Shape& empty_plane : {Shape{2, 3, 0, 9}, Shape{2, 3, 7, 0}}) {
    const Tensor e = zeros(empty_plane, {.dtype = DType::f32});
    CHECK_THAT(error_of([&] { kernels::max_pool2d(e, pool(2, 2, 2, 2, 1, 1)); }),
               Contains(shape_str(empty_plane)) && Contains("1 x 1"));
    CHECK_THAT(error_of([&] { kernels::avg_pool2d(e, pool(2, 2, 2, 2, 1, 1)); }), Contains("1 x 1"));
  }
  CHECK(kernels::max_pool2d(zeros({0, 3, 7, 9}, {.dtype = DType::f32}), pool(2, 2, 2, 2, 0, 0)).out.sizes() ==
        Shape{0, 3, 3, 4});
  CHECK_THROWS(kernels::max_pool2d(random_tensor({2, 3, 7, 9}, DType::i64, 1), pool(2, 2, 2, 2, 0, 0)));
  CHECK_THAT(error_of([&] { kernels::adaptive_avg_pool2d(x, 0, 3); }), Contains("[2, 3, 7, 9]"));
  CHECK_THAT(error_of([&] {
               kernels::avg_pool2d_backward(random_tensor({2, 3, 3, 3}, DType::f32, 2), x.sizes(),
                                            MemoryFormat::contiguous, pool(2, 2, 2, 2, 0, 0));
             }),
             Contains("[2, 3, 3, 3]") && Contains("[2, 3, 3, 4]"));
  auto r = kernels::max_pool2d(x, pool(2, 2, 2, 2, 0, 0));
  CHECK_THAT(error_of([&] {
               kernels::max_pool2d_backward(r.out, r.indices, {2, 4, 7, 9}, MemoryFormat::contiguous);
             }),
             Contains("[2, 3, 3, 4]") && Contains("[2, 4, 7, 9]"));
  CHECK_THAT(error_of([&] { kernels::max_pool2d_backward(r.out, r.out, x.sizes(), MemoryFormat::contiguous); }),
             Contains("i64"));
  // Corrupted indices are caught, not written out of bounds.
  Tensor bad = from_vector(std::vector<double>(24, 63.0), {2, 3, 2, 2}, {.dtype = DType::i64});
  CHECK_THAT(error_of([&] {
               kernels::max_pool2d_backward(
                   from_vector(std::vector<double>(24, 1.0), {2, 3, 2, 2}, {.dtype = DType::f32}), bad, {2, 3, 7, 9},
                   MemoryFormat::contiguous);
             }),
             Contains("63"));
  CHECK_THAT(error_of([&] {
               kernels::adaptive_avg_pool2d_backward(random_tensor({2, 4, 3, 3}, DType::f32, 2), x.sizes(),
                                                     MemoryFormat::contiguous);
             }),
             Contains("[2, 4, 3, 3]"));
}

TEST_CASE("max_pool2d's 2x2 fast path and its general loop agree on ties, NaN and -inf", "[cpu]") {
  // A 2x2 / stride-2 pool without ceil_mode takes the fast path (f32: 4 outputs per SSE2 round,
  // then single ones); with ceil_mode on an odd-sized input the last window is clipped, so the
  // general loop runs. Their common windows must give the same values and the same indices: ties
  // keep the first element in row-major order, the first NaN wins, an all -inf window points at
  // its first element. W = 9 and 19 give 4 and 9 outputs per row (whole rounds, and a tail).
  for (int64_t W : {int64_t{9}, int64_t{19}}) {
    const int64_t N = 2, C = 3, H = 7, Ho = 3, Wo = (W - 1) / 2;
    std::vector<double> v(N * C * H * W);
    for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7919) % 3);  // many ties
    for (size_t i = 5; i < v.size(); i += 17) v[i] = NAN;
    for (size_t i : {size_t(0), size_t(1), size_t(W), size_t(W + 1)}) v[i] = -INFINITY;  // window (0, 0) of plane 0
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      INFO(dtype_name(dt) << " W " << W);
      Tensor x = from_vector(v, {N, C, H, W}, {.dtype = dt});
      auto fast = kernels::max_pool2d(x, pool(2, 2, 2, 2, 0, 0));
      auto general = kernels::max_pool2d(x, pool(2, 2, 2, 2, 0, 0, true));
      REQUIRE(fast.out.sizes() == Shape{N, C, Ho, Wo});
      REQUIRE(general.out.sizes() == Shape{N, C, Ho + 1, Wo + 1});
      const std::vector<double> fo = to_f64(fast.out), fi = to_f64(fast.indices);
      const std::vector<double> go = to_f64(general.out), gi = to_f64(general.indices);
      int mismatches = 0, nans = 0;
      for (int64_t pl = 0; pl < N * C; ++pl)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const double a = fo[(pl * Ho + oh) * Wo + ow], b = go[(pl * (Ho + 1) + oh) * (Wo + 1) + ow];
            nans += std::isnan(a);
            mismatches += fi[(pl * Ho + oh) * Wo + ow] != gi[(pl * (Ho + 1) + oh) * (Wo + 1) + ow];
            mismatches += std::isnan(a) ? !std::isnan(b) : a != b;
          }
      CHECK(mismatches == 0);
      CHECK(nans > 0);  // the NaN rule was exercised
      CHECK(fo[0] == -INFINITY);  // the all -inf window ...
      CHECK(fi[0] == 0);  // ... points at its first element
    }
  }
}
