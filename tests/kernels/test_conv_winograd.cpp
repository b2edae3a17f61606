// The Winograd F(4x4, 3x3) kernels (kernels/cpu/winograd.cpp) against float64 loops, all three
// directions, both layouts, on shapes whose planes are not whole tiles and whose channel counts are
// not whole SIMD vectors, padding 0 to 2, one image and several chunks of images; and the rule that
// sends convolutions to them (winograd_applies, checked through kernels::conv2d's calls).
// Padding 0 is in the rule for the forward and the weight gradient only.
//
// The bound is the f32 one of tests/kernels/test_conv.cpp: |error| <= gamma_K(u32) * mag, K the
// terms of the element's sum, mag the sum of their magnitudes. On the rule's shapes each element is
// held to its own mag, as the im2col kernels are. Outside the rule (padding 0 or 2) the kernels are
// held to the same gamma_K times the largest mag of the element's tile (its 4x4 output tile, or the
// 9 taps of its filter): a Winograd result is computed from its whole tile's transforms, so its
// rounding scales with the tile's magnitudes, and an edge element left with one tap has a much
// smaller mag of its own (which is why the rule takes padding 1 only).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <ember/kernels/conv.h>
#include <ember/kernels/cpu/winograd.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::cpu::conv_detail::WinogradPass;
namespace wg = ember::kernels::cpu::conv_detail;

namespace {

/// A 3x3, stride-1 convolution: x (N, C, H, W), w (O, C, 3, 3), padding (ph, pw).
struct Shape3 {
  int64_t N, C, H, W, O, ph, pw;
  bool bias;
  int64_t Ho() const { return H + 2 * ph - 2; }
  int64_t Wo() const { return W + 2 * pw - 2; }
};

/// The three results in float64, each with the sum of its terms' magnitudes (what a float sum's
/// rounding error is bounded by), accumulated term by term from every (n, o, c, ki, kj, oh, ow).
struct Exact {
  std::vector<double> y, y_mag, dx, dx_mag, dw, dw_mag;
};

Exact exact(const Shape3& s, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
            const std::vector<double>& dy) {
  const int64_t Ho = s.Ho(), Wo = s.Wo();
  Exact e;
  e.y.assign(s.N * s.O * Ho * Wo, 0.0);
  e.y_mag = e.y;
  e.dx.assign(x.size(), 0.0);
  e.dx_mag = e.dx;
  e.dw.assign(w.size(), 0.0);
  e.dw_mag = e.dw;
  auto y_at = [&](int64_t n, int64_t o, int64_t oh, int64_t ow) { return ((n * s.O + o) * Ho + oh) * Wo + ow; };
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o) {
      if (s.bias)
        for (int64_t q = 0; q < Ho * Wo; ++q) {
          e.y[y_at(n, o, 0, 0) + q] += b[o];
          e.y_mag[y_at(n, o, 0, 0) + q] += std::fabs(b[o]);
        }
      for (int64_t c = 0; c < s.C; ++c)
        for (int64_t k = 0; k < 9; ++k) {
          const int64_t wi = (o * s.C + c) * 9 + k;
          for (int64_t oh = 0; oh < Ho; ++oh)
            for (int64_t ow = 0; ow < Wo; ++ow) {
              const int64_t ih = oh - s.ph + k / 3, iw = ow - s.pw + k % 3;
              if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
              const int64_t xi = ((n * s.C + c) * s.H + ih) * s.W + iw, yi = y_at(n, o, oh, ow);
              const double xw = x[xi] * w[wi], gw = dy[yi] * w[wi], gx = dy[yi] * x[xi];
              e.y[yi] += xw;
              e.y_mag[yi] += std::fabs(xw);
              e.dx[xi] += gw;
              e.dx_mag[xi] += std::fabs(gw);
              e.dw[wi] += gx;
              e.dw_mag[wi] += std::fabs(gx);
            }
        }
    }
  return e;
}

/// The f32 bound of tests/kernels/test_conv.cpp (sum_rtol for f32): a sum of K terms, each rounded
/// at most K times in f32, is within gamma_K(u32) * mag of the exact sum, the float64 loop within
/// gamma_K(u64) * mag. Winograd's result is held to the same bound as the im2col kernels'.
double f32_rtol(int64_t K) { return gamma_n(K, unit_roundoff(DType::f32)) + gamma_n(K, unit_roundoff(DType::f64)); }

/// Checks every element within rtol * mag and returns the worst |error| / (rtol * mag).
double check_within(const Tensor& got_t, const std::vector<double>& want, const std::vector<double>& mag, double rtol,
                    const std::string& what) {
  const std::vector<double> got = to_f64(got_t);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = rtol * (mag[i] + 1e-30), err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err / allowed);
    if (!(err <= allowed) && bad++ < 3)
      first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  INFO(what << ": " << bad << " outside the bound; worst error / bound " << worst << first);
  CHECK(bad == 0);
  return worst;
}

std::string shape_str(const Shape3& s) {
  return "x (" + std::to_string(s.N) + ", " + std::to_string(s.C) + ", " + std::to_string(s.H) + ", " +
         std::to_string(s.W) + "), " + std::to_string(s.O) + " outputs, pad (" + std::to_string(s.ph) + ", " +
         std::to_string(s.pw) + ")" + (s.bias ? ", bias" : "");
}

/// mag (planes of (Hp, Wp)) with each element replaced by the largest of its 4x4 tile's.
std::vector<double> tile_max(const std::vector<double>& mag, int64_t Hp, int64_t Wp) {
  std::vector<double> out(mag.size(), 0.0);
  const int64_t TW = (Wp + 3) / 4, per_tile_plane = ((Hp + 3) / 4) * TW;
  for (size_t plane = 0; plane < mag.size() / static_cast<size_t>(Hp * Wp); ++plane) {
    std::vector<double> m(static_cast<size_t>(per_tile_plane), 0.0);
    const size_t base = plane * static_cast<size_t>(Hp * Wp);
    for (int64_t h = 0; h < Hp; ++h)
      for (int64_t w = 0; w < Wp; ++w)
        m[(h / 4) * TW + w / 4] = std::max(m[(h / 4) * TW + w / 4], mag[base + h * Wp + w]);
    for (int64_t h = 0; h < Hp; ++h)
      for (int64_t w = 0; w < Wp; ++w) out[base + h * Wp + w] = m[(h / 4) * TW + w / 4];
  }
  return out;
}

/// How an element's allowed error scales (see the top of the file).
enum class Mag { own, tile };

/// Runs the three Winograd kernels directly in layout f and checks them against the float64 loops;
/// returns the worst error / bound over the three.
/// dx_mag: the input gradient's (padding 0 puts it outside the rule while the other two are in).
double run_winograd(const Shape3& s, MemoryFormat f, uint64_t seed, Mag mag, Mag dx_mag_mode) {
  INFO(shape_str(s) << (f == MemoryFormat::channels_last ? ", channels-last" : ", row-major"));
  const kernels::Conv2dParams p{1, 1, s.ph, s.pw, 1, 1, 1};
  const Shape xs{s.N, s.C, s.H, s.W}, ws{s.O, s.C, 3, 3}, ys{s.N, s.O, s.Ho(), s.Wo()};
  const Tensor x = random_tensor(xs, DType::f32, seed), w = random_tensor(ws, DType::f32, seed + 1);
  const Tensor dy = random_tensor(ys, DType::f32, seed + 2);
  const Tensor b = s.bias ? random_tensor({s.O}, DType::f32, seed + 3) : Tensor();
  const Exact e = exact(s, to_f64(x), to_f64(w), s.bias ? to_f64(b) : std::vector<double>(), to_f64(dy));

  const Tensor xf = x.contiguous(f), wf = w.contiguous(f), dyf = dy.contiguous(f);
  const Tensor y = empty(ys, {.dtype = DType::f32}, f), dx = empty(xs, {.dtype = DType::f32}, f),
               dw = empty(ws, {.dtype = DType::f32}, f);
  wg::winograd_forward(xf, wf, b, p, y, f);
  wg::winograd_backward_input(dyf, wf, p, dx, f);
  wg::winograd_backward_weight(dyf, xf, p, dw, f);
  const bool tile = mag == Mag::tile;
  const std::vector<double> y_mag = tile ? tile_max(e.y_mag, s.Ho(), s.Wo()) : e.y_mag;
  const std::vector<double> dx_mag = dx_mag_mode == Mag::tile ? tile_max(e.dx_mag, s.H, s.W) : e.dx_mag;
  std::vector<double> dw_mag = e.dw_mag;
  if (tile)  // the 9 taps of a filter come from one 6x6 transform
    for (size_t k = 0; k < dw_mag.size(); k += 9)
      std::fill_n(dw_mag.begin() + static_cast<std::ptrdiff_t>(k), 9,
                  *std::max_element(e.dw_mag.begin() + static_cast<std::ptrdiff_t>(k),
                                    e.dw_mag.begin() + static_cast<std::ptrdiff_t>(k + 9)));
  // Forward: C * 9 products and the bias; backward input: O * 9; backward weight: N * Ho * Wo.
  double worst = check_within(y, e.y, y_mag, f32_rtol(s.C * 9 + 1), "forward");
  worst = std::max(worst, check_within(dx, e.dx, dx_mag, f32_rtol(s.O * 9), "backward input"));
  worst = std::max(worst, check_within(dw, e.dw, dw_mag, f32_rtol(s.N * s.Ho() * s.Wo()), "backward weight"));
  return worst;
}

double run_winograd(const Shape3& s, MemoryFormat f, uint64_t seed, Mag mag) {
  return run_winograd(s, f, seed, mag, mag);
}

/// Restores the automatic chunk size when a test ends, however it ends.
struct ChunkImages {
  explicit ChunkImages(int64_t n) { wg::set_winograd_chunk_images(n); }
  ~ChunkImages() { wg::set_winograd_chunk_images(0); }
  ChunkImages(const ChunkImages&) = delete;
  ChunkImages& operator=(const ChunkImages&) = delete;
};

}  // namespace

TEST_CASE("winograd kernels match float64 loops on the rule's shapes, both layouts", "[cpu][conv]") {
  // Padding 1, at least 16 channels and 144 terms per weight-gradient element (the rule); planes
  // not a multiple of the 4x4 tile, channels not a multiple of the 8-lane vectors.
  const std::vector<Shape3> shapes = {
      {1, 19, 13, 14, 17, 1, 1, true},  // one image
      {2, 17, 9, 13, 21, 1, 1, false},
      {9, 16, 4, 4, 24, 1, 1, true},  // ResNet's 4x4 stage in small: one tile per image
      {4, 23, 7, 6, 16, 1, 1, false},
  };
  uint64_t seed = 300;
  double worst = 0;
  for (const Shape3& s : shapes)
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      worst = std::max(worst, run_winograd(s, f, seed, Mag::own));
      seed += 10;
    }
  // Padding 0 (mnist_cnn's second convolution in small): the forward and the weight gradient are
  // in the rule and held to their own magnitudes; the input gradient is not (its corners keep one
  // tap) and is held to its tile's.
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    worst = std::max(worst, run_winograd({3, 19, 11, 10, 17, 0, 0, true}, f, seed, Mag::own, Mag::tile));
    seed += 10;
  }
  INFO("worst error / bound over every case: " << worst);
  CHECK(worst <= 1.0);
}

TEST_CASE("winograd kernels with padding 0 and 2 (outside the rule) match float64 loops", "[cpu][conv]") {
  const std::vector<Shape3> shapes = {
      {3, 19, 9, 11, 17, 0, 0, true},
      {3, 21, 6, 10, 19, 2, 2, true},
      {4, 23, 7, 6, 16, 2, 0, false},  // unequal padding
  };
  uint64_t seed = 500;
  for (const Shape3& s : shapes)
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      run_winograd(s, f, seed, Mag::tile);
      seed += 10;
    }
}

TEST_CASE("winograd kernels over several chunks of images, the last one partial", "[cpu][conv]") {
  // 2 images per chunk: 5 images are 3 chunks; the weight gradient accumulates across them.
  const ChunkImages two(2);
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
    run_winograd({5, 18, 7, 9, 20, 1, 1, true}, f, 400, Mag::own);
}

TEST_CASE("conv2d takes the Winograd path exactly where the rule says", "[cpu][conv]") {
  struct Probe {
    Shape xs, ws;
    kernels::Conv2dParams p;
    DType dt;
    bool forward, input, weight;  // Winograd expected for each direction
  };
  // 32x32 planes are 64 tiles per image: each probe outside the rule misses exactly one condition.
  const kernels::Conv2dParams pad1{1, 1, 1, 1, 1, 1, 1};
  const Shape w64{64, 64, 3, 3};
  const std::vector<Probe> probes = {
      {{1, 64, 32, 32}, w64, pad1, DType::f32, true, true, true},  // ResNet-18's first stage, one image
      {{6, 16, 8, 8}, {16, 16, 3, 3}, pad1, DType::f32, true, true, true},  // 24 tiles, 16 channels
      {{5, 16, 8, 8}, {16, 16, 3, 3}, pad1, DType::f32, false, false, false},  // 20 tiles
      {{2, 32, 32, 32}, {16, 32, 3, 3}, {1, 1, 0, 0, 1, 1, 1}, DType::f32, true, false, true},  // padding 0
      {{2, 32, 32, 32}, {16, 32, 3, 3}, {1, 1, 0, 1, 1, 1, 1}, DType::f32, false, false, false},  // padding (0, 1)
      {{2, 32, 32, 32}, {16, 32, 3, 3}, {1, 1, 2, 2, 1, 1, 1}, DType::f32, false, false, false},  // padding 2
      {{2, 64, 32, 32}, w64, {2, 2, 1, 1, 1, 1, 1}, DType::f32, false, false, false},  // stride 2
      {{2, 3, 32, 32}, {64, 3, 3, 3}, pad1, DType::f32, false, false, false},  // 3 input channels
      {{2, 64, 32, 32}, {8, 64, 3, 3}, pad1, DType::f32, false, false, false},  // 8 output channels
      {{2, 64, 32, 32}, {64, 32, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, DType::f32, false, false, false},  // groups
      {{2, 64, 32, 32}, w64, {1, 1, 1, 1, 2, 2, 1}, DType::f32, false, false, false},  // dilation
      {{64, 64, 3, 3}, w64, pad1, DType::f32, false, false, false},  // 3x3 plane: less than a tile
      {{2, 64, 32, 32}, {64, 64, 1, 1}, {}, DType::f32, false, false, false},  // 1x1
      {{4, 16, 16, 16}, {16, 16, 3, 3}, pad1, DType::f64, false, false, false},  // f64 stays on im2col
  };
  for (const Probe& pr : probes) {
    INFO("x " << ember::shape_str(pr.xs) << " w " << ember::shape_str(pr.ws) << " stride " << pr.p.stride_h << " pad "
              << pr.p.pad_h << " groups " << pr.p.groups << " dilation " << pr.p.dilation_h << " "
              << dtype_name(pr.dt));
    const Tensor x = random_tensor(pr.xs, pr.dt, 1), w = random_tensor(pr.ws, pr.dt, 2);
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Tensor xf = x.contiguous(f), wf = w.contiguous(f);
      const int64_t f0 = wg::winograd_calls(WinogradPass::forward);
      const int64_t i0 = wg::winograd_calls(WinogradPass::backward_input);
      const int64_t w0 = wg::winograd_calls(WinogradPass::backward_weight);
      const Tensor y = kernels::conv2d(xf, wf, Tensor(), pr.p);
      kernels::conv2d_backward_input(y, wf, pr.xs, f, pr.p);
      kernels::conv2d_backward_weight(y, xf, pr.ws, pr.p);
      CHECK(wg::winograd_calls(WinogradPass::forward) - f0 == (pr.forward ? 1 : 0));
      CHECK(wg::winograd_calls(WinogradPass::backward_input) - i0 == (pr.input ? 1 : 0));
      CHECK(wg::winograd_calls(WinogradPass::backward_weight) - w0 == (pr.weight ? 1 : 0));
    }
  }
}
