// conv2d kernels (forward, backward input, backward weight) against direct float64 loops over
// every (n, o, oh, ow, c, ki, kj) term, on odd shapes with stride, padding, dilation and groups,
// contiguous and non-contiguous operands; shape errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/kernels/conv.h>
#include <ember/kernels/factory.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

struct Case {
  int64_t N, C, H, W, O, kh, kw;
  kernels::Conv2dParams p;
  bool bias;
};

std::string case_str(const Case& c) {
  return "x (" + std::to_string(c.N) + ", " + std::to_string(c.C) + ", " + std::to_string(c.H) + ", " +
         std::to_string(c.W) + "), w (" + std::to_string(c.O) + ", " + std::to_string(c.C / c.p.groups) + ", " +
         std::to_string(c.kh) + ", " + std::to_string(c.kw) + "), stride (" + std::to_string(c.p.stride_h) + ", " +
         std::to_string(c.p.stride_w) + "), pad (" + std::to_string(c.p.pad_h) + ", " + std::to_string(c.p.pad_w) +
         "), dilation (" + std::to_string(c.p.dilation_h) + ", " + std::to_string(c.p.dilation_w) + "), groups " +
         std::to_string(c.p.groups) + (c.bias ? ", bias" : "");
}

/// Everything the three kernels should produce, from one loop over all terms, with the sum of
/// |term| per result element (what the rounding error of a float sum scales with).
struct Reference {
  int64_t Ho, Wo;
  std::vector<double> out, out_mag, gx, gx_mag, gw, gw_mag;
};

Reference reference(const Case& c, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& g) {
  const auto& p = c.p;
  Reference r;
  r.Ho = (c.H + 2 * p.pad_h - p.dilation_h * (c.kh - 1) - 1) / p.stride_h + 1;
  r.Wo = (c.W + 2 * p.pad_w - p.dilation_w * (c.kw - 1) - 1) / p.stride_w + 1;
  const int64_t Cg = c.C / p.groups, Og = c.O / p.groups;
  r.out.assign(c.N * c.O * r.Ho * r.Wo, 0.0);
  r.out_mag = r.out;
  r.gx.assign(x.size(), 0.0);
  r.gx_mag = r.gx;
  r.gw.assign(w.size(), 0.0);
  r.gw_mag = r.gw;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < r.Ho; ++oh)
        for (int64_t ow = 0; ow < r.Wo; ++ow) {
          const int64_t oi = ((n * c.O + o) * r.Ho + oh) * r.Wo + ow;
          if (c.bias) {
            r.out[oi] += b[o];
            r.out_mag[oi] += std::fabs(b[o]);
          }
          const int64_t grp = o / Og;
          for (int64_t ci = 0; ci < Cg; ++ci) {
            const int64_t ch = grp * Cg + ci;
            for (int64_t ki = 0; ki < c.kh; ++ki)
              for (int64_t kj = 0; kj < c.kw; ++kj) {
                const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dilation_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kj * p.dilation_w;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t xi = ((n * c.C + ch) * c.H + ih) * c.W + iw;
                const int64_t wi = ((o * Cg + ci) * c.kh + ki) * c.kw + kj;
                r.out[oi] += x[xi] * w[wi];
                r.out_mag[oi] += std::fabs(x[xi] * w[wi]);
                r.gx[xi] += g[oi] * w[wi];
                r.gx_mag[xi] += std::fabs(g[oi] * w[wi]);
                r.gw[wi] += g[oi] * x[xi];
                r.gw_mag[wi] += std::fabs(g[oi] * x[xi]);
              }
          }
        }
  return r;
}

/// |got - expected| <= rtol * (mag + tiny) per element: a float sum of K terms whose magnitudes add
/// up to mag, in any order, is within gamma_K(u) * mag of the exact sum (sum_rtol).
void check_scaled(const Tensor& got_t, const std::vector<double>& expected, const std::vector<double>& mag, double rtol,
                  const std::string& what) {
  const std::vector<double> got = to_f64(got_t);
  REQUIRE(got.size() == expected.size());
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = rtol * (mag[i] + 1e-30);
    if (!(std::fabs(got[i] - expected[i]) <= allowed)) {
      if (bad++ < 4)
        first += "  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " expected " +
                 std::to_string(expected[i]) + " allowed " + std::to_string(allowed) + "\n";
    }
  }
  INFO(what << ": " << bad << " mismatches (rtol " << rtol << ")\n" << first);
  CHECK(bad == 0);
}

/// rtol (check_scaled) of a result that sums K terms, products or the bias: each term rounds at
/// most K times in the kernel's accumulation dtype acc_of(dt) (its product, then at most K - 1
/// sums, whatever the order or blocking of the GEMM), so the kernel is within gamma_K(u_acc) * mag
/// of the exact sum and the float64 loop within gamma_K(u64) * mag; a 16-bit dt adds the final
/// rounding of a result of at most (1 + gamma_K(u_acc)) mag: u_dt (1 + gamma_K(u_acc)).
double sum_rtol(DType dt, int64_t K) {
  const double ua = unit_roundoff(acc_of(dt)), u64 = unit_roundoff(DType::f64);
  const double ud = dt == DType::f16 || dt == DType::bf16 ? unit_roundoff(dt) : 0.0;
  return gamma_n(K, ua) * (1 + ud) + ud + gamma_n(K, u64);
}

/// Runs the three directions against the float64 loops; with `channels_last` also with every 4-D
/// operand channels-last (the same references: the layout must not change a value beyond the
/// dtype's rounding).
void run_case(const Case& c, DType dt, Layout x_layout, Layout w_layout, uint64_t seed, bool channels_last = false) {
  INFO(case_str(c) << " dtype " << dtype_name(dt));
  const int64_t Cg = c.C / c.p.groups;
  const Shape xs{c.N, c.C, c.H, c.W}, ws{c.O, Cg, c.kh, c.kw};
  Tensor x = random_tensor(xs, dt, seed, -1, 1, x_layout);
  Tensor w = random_tensor(ws, dt, seed + 1, -1, 1, w_layout);
  Tensor b = c.bias ? random_tensor({c.O}, dt, seed + 2) : Tensor();
  // Reference inputs are the values the tensors actually hold (rounded to dt).
  const std::vector<double> xv = to_f64(x), wv = to_f64(w);
  const std::vector<double> bv = c.bias ? to_f64(b) : std::vector<double>();

  const int64_t Ho = kernels::conv_out_size(c.H, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
  const int64_t Wo = kernels::conv_out_size(c.W, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
  Tensor g = random_tensor({c.N, c.O, Ho, Wo}, dt, seed + 3, -1, 1, Layout::Transposed);
  const Reference r = reference(c, xv, wv, bv, to_f64(g));
  REQUIRE(Ho == r.Ho);
  REQUIRE(Wo == r.Wo);

  // Forward: Cg kh kw products and the bias; backward input: Og kh kw; weight: N Ho Wo.
  const double rtol_f = sum_rtol(dt, Cg * c.kh * c.kw + 1);
  Tensor out = kernels::conv2d(x, w, b, c.p);
  REQUIRE(out.sizes() == Shape{c.N, c.O, Ho, Wo});
  REQUIRE(out.dtype() == dt);
  check_scaled(out, r.out, r.out_mag, rtol_f, "forward");

  const double rtol_x = sum_rtol(dt, (c.O / c.p.groups) * c.kh * c.kw);
  Tensor gx = kernels::conv2d_backward_input(g, w, xs, MemoryFormat::contiguous, c.p);
  REQUIRE(gx.sizes() == xs);
  check_scaled(gx, r.gx, r.gx_mag, rtol_x, "backward input");

  const double rtol_w = sum_rtol(dt, c.N * Ho * Wo);
  Tensor gw = kernels::conv2d_backward_weight(g, x, ws, c.p);
  REQUIRE(gw.sizes() == ws);
  check_scaled(gw, r.gw, r.gw_mag, rtol_w, "backward weight");

  if (!channels_last) return;
  const MemoryFormat cl = MemoryFormat::channels_last;
  const Tensor xc = x.contiguous(cl), wc = w.contiguous(cl), gc = g.contiguous(cl);
  Tensor out_cl = kernels::conv2d(xc, wc, b, c.p);
  CHECK(out_cl.is_contiguous(cl));
  check_scaled(out_cl, r.out, r.out_mag, rtol_f, "forward, channels-last");
  Tensor gx_cl = kernels::conv2d_backward_input(gc, wc, xs, cl, c.p);
  CHECK(gx_cl.is_contiguous(cl));
  check_scaled(gx_cl, r.gx, r.gx_mag, rtol_x, "backward input, channels-last");
  Tensor gw_cl = kernels::conv2d_backward_weight(gc, xc, ws, c.p);
  CHECK(gw_cl.is_contiguous(cl));
  check_scaled(gw_cl, r.gw, r.gw_mag, rtol_w, "backward weight, channels-last");
}

kernels::Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g) {
  return {sh, sw, ph, pw, dh, dw, g};
}

}  // namespace

TEST_CASE("conv_out_size follows floor((in + 2p - d(k-1) - 1) / s) + 1", "[cpu]") {
  CHECK(kernels::conv_out_size(7, 3, 2, 1, 2) == 3);
  CHECK(kernels::conv_out_size(9, 2, 2, 1, 2) == 5);
  CHECK(kernels::conv_out_size(28, 3, 1, 0, 1) == 26);
  CHECK(kernels::conv_out_size(5, 5, 1, 0, 1) == 1);
  CHECK(kernels::conv_out_size(4, 5, 1, 0, 1) == 0);  // does not fit
  CHECK(kernels::conv_out_size(3, 3, 1, 0, 2) < 1);  // dilated kernel spans 5
  CHECK_THROWS(kernels::conv_out_size(5, 3, 0, 0, 1));
}

TEST_CASE("conv2d kernels match float64 loops on odd shapes", "[cpu]") {
  const std::vector<Case> cases = {
      // The odd case of the brief: kernel 3x2, stride 2, pad 1, dilation 2, groups 3.
      {2, 3, 7, 9, 6, 3, 2, params(2, 2, 1, 1, 2, 2, 3), true},
      {2, 3, 7, 9, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true},
      // 1x1, stride 1, no padding: the direct path (x is its own column buffer), with groups.
      {3, 4, 5, 6, 6, 1, 1, params(1, 1, 0, 0, 1, 1, 2), false},
      {2, 5, 4, 7, 3, 1, 1, params(1, 1, 0, 0, 1, 1, 1), true},
      // 1x1 with stride 2 goes through im2col.
      {2, 3, 7, 6, 2, 1, 1, params(2, 2, 0, 0, 1, 1, 1), true},
      // Asymmetric everything.
      {1, 2, 8, 5, 3, 2, 3, params(3, 1, 0, 2, 1, 3, 1), true},
      // Depthwise.
      {2, 6, 6, 6, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 6), true},
      // Kernel as large as the padded input: a 1x1 output.
      {2, 2, 3, 4, 3, 5, 6, params(1, 1, 1, 1, 1, 1, 1), true},
      // Padding wider than the kernel reach: whole rows and columns of the column buffer are zero.
      {1, 1, 3, 3, 2, 2, 2, params(2, 3, 3, 3, 1, 1, 1), false},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (DType dt : {DType::f32, DType::f64}) {
      run_case(c, dt, Layout::Contiguous, Layout::Contiguous, seed, /*channels_last=*/true);
      run_case(c, dt, Layout::Transposed, Layout::Strided, seed + 10);
      seed += 20;
    }
  }
}

TEST_CASE("conv2d kernels over several column-buffer chunks (MNIST-like conv)", "[cpu]") {
  // One image's column buffer is 32*9*22*22*4 bytes = 557 KiB; 13 images take several 4 MiB chunks,
  // the last one partial.
  run_case({13, 32, 24, 24, 16, 3, 3, params(1, 1, 0, 0, 1, 1, 1), true}, DType::f32, Layout::Contiguous,
           Layout::Contiguous, 7);
  // One image bigger than a chunk on its own.
  run_case({3, 16, 96, 100, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 2), true}, DType::f32, Layout::Strided,
           Layout::Contiguous, 8);
}

TEST_CASE("conv2d with small planes under a large weight: batched GEMMs over several chunks", "[cpu]") {
  // Kg = 1152 >= 4 L = 64: the NCHW kernels take one GEMM per group per chunk (gathered and
  // scattered planes), the NHWC ones one GEMM per chunk. One image's column buffer is
  // 256*9*16*4 bytes = 144 KiB: 60 images take three 4 MiB chunks (28, 28, 4), so the weight
  // gradient accumulates across chunks. Groups 1 and 2, each also channels-last (with groups, the
  // NHWC kernels gather and scatter each group's output columns).
  for (int64_t groups : {1, 2})
    run_case({60, 256, 4, 4, 16, 3, 3, params(1, 1, 1, 1, 1, 1, groups), true}, DType::f32, Layout::Contiguous,
             Layout::Contiguous, 11 + static_cast<uint64_t>(groups), /*channels_last=*/true);
  // Stride 2 into 3x3 planes (Kg = 72 >= 4 L = 36), f64, strided operands.
  run_case({5, 8, 5, 5, 6, 3, 3, params(2, 2, 1, 1, 1, 1, 1), true}, DType::f64, Layout::Transposed, Layout::Strided,
           14, /*channels_last=*/true);
  // A direct 1x1 (x is its own column matrix) over two chunks (64 KiB of columns per image).
  run_case({70, 256, 8, 8, 16, 1, 1, params(1, 1, 0, 0, 1, 1, 1), true}, DType::f32, Layout::Contiguous,
           Layout::Contiguous, 15, /*channels_last=*/true);
}

TEST_CASE("conv2d with one image's column buffer above the per-thread cap", "[cpu][slow]") {
  // One image's column buffer (64*9*170*173*4 bytes = 64.6 MiB) above the 64 MiB a
  // thread keeps between calls: a buffer of its own, freed on return.
  run_case({1, 64, 172, 175, 2, 3, 3, params(1, 1, 0, 0, 1, 1, 1), false}, DType::f32, Layout::Contiguous,
           Layout::Contiguous, 9);
}

TEST_CASE("conv2d in f16 and bf16 (computed in f32, rounded once)", "[cpu]") {
  const Case c{2, 4, 6, 7, 4, 3, 3, params(1, 2, 1, 0, 1, 1, 2), true};
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Shape xs{2, 4, 6, 7}, ws{4, 2, 3, 3};
    Tensor x = random_tensor(xs, dt, 1), w = random_tensor(ws, dt, 2), b = random_tensor({4}, dt, 3);
    const int64_t Ho = kernels::conv_out_size(6, 3, 1, 1, 1), Wo = kernels::conv_out_size(7, 3, 2, 0, 1);
    Tensor g = random_tensor({2, 4, Ho, Wo}, dt, 4);
    const Reference r = reference(c, to_f64(x), to_f64(w), to_f64(b), to_f64(g));
    // Computed in f32 from exactly widened operands (products of 16-bit values are exact in f32,
    // counted anyway) and rounded once to dt: sum_rtol, whose u_dt dominates.
    check_scaled(kernels::conv2d(x, w, b, c.p), r.out, r.out_mag, sum_rtol(dt, 2 * 3 * 3 + 1), "forward");
    check_scaled(kernels::conv2d_backward_input(g, w, xs, MemoryFormat::contiguous, c.p), r.gx, r.gx_mag,
                 sum_rtol(dt, 2 * 3 * 3), "backward input");
    check_scaled(kernels::conv2d_backward_weight(g, x, ws, c.p), r.gw, r.gw_mag, sum_rtol(dt, 2 * Ho * Wo),
                 "backward weight");
  }
}

TEST_CASE("conv2d with an empty batch", "[cpu]") {
  Tensor x = zeros({0, 3, 5, 5}), w = random_tensor({4, 3, 3, 3}, DType::f32, 1);
  Tensor out = kernels::conv2d(x, w, Tensor(), {});
  CHECK(out.sizes() == Shape{0, 4, 3, 3});
  Tensor gw = kernels::conv2d_backward_weight(zeros({0, 4, 3, 3}), x, w.sizes(), {});
  CHECK(gw.sizes() == w.sizes());
  for (double v : to_f64(gw)) CHECK(v == 0.0);
}

TEST_CASE("conv2d shape errors name both shapes", "[cpu]") {
  Tensor x = random_tensor({2, 3, 7, 9}, DType::f32, 1);
  using Catch::Matchers::Contains;
  // Channels: 3 in x, weight expects 4.
  std::string m = error_of([&] { kernels::conv2d(x, random_tensor({5, 4, 3, 3}, DType::f32, 2), Tensor(), {}); });
  CHECK_THAT(m, Contains("[2, 3, 7, 9]") && Contains("[5, 4, 3, 3]"));
  // Groups that do not divide the output channels.
  m = error_of([&] {
    kernels::conv2d(x, random_tensor({5, 1, 3, 3}, DType::f32, 2), Tensor(), params(1, 1, 0, 0, 1, 1, 3));
  });
  CHECK_THAT(m, Contains("[5, 1, 3, 3]") && Contains("groups"));
  // Bias of the wrong length.
  m = error_of([&] {
    kernels::conv2d(x, random_tensor({4, 3, 3, 3}, DType::f32, 2), random_tensor({3}, DType::f32, 3), {});
  });
  CHECK_THAT(m, Contains("bias") && Contains("[3]"));
  // Kernel larger than the padded input.
  m = error_of([&] { kernels::conv2d(x, random_tensor({4, 3, 8, 3}, DType::f32, 2), Tensor(), {}); });
  CHECK_THAT(m, Contains("[2, 3, 7, 9]") && Contains("[4, 3, 8, 3]") && Contains("too small"));
  // Not 4-D.
  m = error_of([&] {
    kernels::conv2d(random_tensor({3, 7, 9}, DType::f32, 1), random_tensor({4, 3, 3, 3}, DType::f32, 2), Tensor(), {});
  });
  CHECK_THAT(m, Contains("[3, 7, 9]"));
  // Mixed dtypes.
  m = error_of([&] { kernels::conv2d(x, random_tensor({4, 3, 3, 3}, DType::f64, 2), Tensor(), {}); });
  CHECK_THAT(m, Contains("f32") && Contains("f64"));
  // Integer input.
  CHECK_THROWS(kernels::conv2d(random_tensor({2, 3, 7, 9}, DType::i32, 1), random_tensor({4, 3, 3, 3}, DType::i32, 2),
                               Tensor(), {}));
  // Bad parameters.
  m = error_of([&] {
    kernels::conv2d(x, random_tensor({4, 3, 3, 3}, DType::f32, 2), Tensor(), params(0, 1, 0, 0, 1, 1, 1));
  });
  CHECK_THAT(m, Contains("stride"));
  // Backward: grad_out of the wrong shape.
  Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 2);
  m = error_of([&] {
    kernels::conv2d_backward_input(random_tensor({2, 4, 5, 6}, DType::f32, 4), w, x.sizes(), MemoryFormat::contiguous,
                                   {});
  });
  CHECK_THAT(m, Contains("[2, 4, 5, 6]") && Contains("[2, 4, 5, 7]"));
  m = error_of([&] { kernels::conv2d_backward_weight(random_tensor({2, 4, 5, 6}, DType::f32, 4), x, w.sizes(), {}); });
  CHECK_THAT(m, Contains("[2, 4, 5, 6]") && Contains("[2, 4, 5, 7]"));
}
