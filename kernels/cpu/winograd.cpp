// Winograd F(4x4, 3x3) convolution on the CPU (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): 3x3, stride 1, dilation 1, one group, f32, both layouts, all three
// directions.
//
// Why: in ResNet-18 nearly every FLOP is a 3x3 stride-1 convolution, and im2col + GEMM spends 9
// multiply-adds per input channel and output. F(4x4, 3x3) computes a 4x4 output tile from a 6x6
// input tile with 36 multiplies per (input channel, output channel), 144 direct: 4x fewer. The
// products of a tile are a pointwise product in the "frequency" domain, so over all tiles of a
// chunk of images they are 36 independent GEMMs, one per frequency xi:
//   M[xi] (T, Cout) = V[xi] (T, Cin) @ U[xi] (Cin, Cout)
// with T the chunk's tiles. Batching the tiles of many images makes each GEMM tall (T = 448 for
// seven 32x32 images, 32 for 32 images of ResNet's 4x4 stage), and the 36 GEMMs spread over the
// pool's threads one GEMM per task (BLAS single-threaded inside, kernels/cpu/matmul.cpp). The 36
// matrices of V, M, Z, U are an odd multiple of 64 bytes apart (freq_stride), not a multiple of
// 4 KiB: the 36 rows one tile's transform writes would otherwise share one L1 set.
//
// Transforms (6x6 tile d, 3x3 filter g, 4x4 output y; B^T 6x6, G 6x3, A^T 4x6 below):
//   V = B^T d B,  U = G g G^T,  y = A^T (U (.) V) A       (forward, summed over input channels)
// Backward input is the forward correlation of grad_out, zero-padded by 2 - pad, with the filter
// flipped in both spatial dims and its channel dims swapped (U[xi] used untransposed).
// Backward weight is the transpose of the forward: with Z = A dy A^T (a 4x4 grad_out tile to 6x6),
// dU[xi] (Cout, Cin) = sum over tiles Z[xi]^T V[xi], a GEMM with the tiles as its inner dimension,
// accumulated over chunks; dg = G^T dU G.
//
// Layouts: V (36, T, Cin), M and Z (36, T, Cout), U and dU (36, Cout_fwd, Cin_fwd) = (36, O, C).
// Tile t of a chunk is (image i, tile row th, tile col tw) = i * TPI + th * TW + tw, TPI = TH * TW
// tiles per image, TH = ceil(Ho / 4), TW = ceil(Wo / 4); a tile's input window starts at
// (4 th - pad_h, 4 tw - pad_w) and reads 0 outside the image, its outputs past (Ho, Wo) are dropped.
// Every transform is vectorized over channels: eight consecutive channels per SIMD vector (GCC/Clang
// vector extension, compiled twice like gemm_blocked.cpp: baseline and x86-64-v3). Channels-last
// operands load and store whole vectors; row-major ones gather and scatter the eight lanes (their
// channels are H * W apart).
//
// Accuracy: F(4x4, 3x3)'s transforms have entries up to 5 and 1/24, so its rounding error is larger
// than direct summation's; tests/kernels/test_conv_winograd.cpp holds it to the same f32 bound as
// the im2col kernels (tests/kernels/test_conv.cpp), and docs/benchmarks.md gives the measured error.
#include <ember/kernels/cpu/winograd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/gemm_blocked.h>
#include <ember/kernels/cpu/loops.h>

namespace ember::kernels::cpu::conv_detail {
namespace {

constexpr int64_t kFreq = 36;  // 6x6 frequencies per tile
// Target bytes of a chunk's V and M (or Z) together: the tile GEMMs of a chunk read them while warm.
constexpr int64_t kWinogradChunkBytes = int64_t{8} << 20;

std::atomic<int64_t> g_calls[3];
int64_t g_chunk_override = 0;  // set_winograd_chunk_images
bool g_enabled = true;  // set_winograd_enabled

typedef float Vec8 __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

// ---- lanes: Vec8 (eight channels) or float (the tail); kUnit: the channels are adjacent ----

// Vectors go by reference: a 32-byte vector returned by value changes the ABI between the clones.
// Whole vectors move through Vec8u, an unaligned, aliasing view of eight floats: GCC then emits one
// 32-byte load or store (a memcpy of a spilled vector was copied in 16-byte halves).
typedef float Vec8u __attribute__((vector_size(32), aligned(4), may_alias));

template <typename L, bool kUnit> [[gnu::always_inline]] inline void load(L& v, const float* p, int64_t stride) {
  if constexpr (std::is_same_v<L, float>) {
    v = *p;
  } else if constexpr (kUnit) {
    v = *reinterpret_cast<const Vec8u*>(p);
  } else {
    float lanes[kLanes];
    for (int k = 0; k < kLanes; ++k) lanes[k] = p[k * stride];
    v = *reinterpret_cast<const Vec8u*>(lanes);
  }
}

template <typename L, bool kUnit> [[gnu::always_inline]] inline void store(float* p, int64_t stride, const L& v) {
  if constexpr (std::is_same_v<L, float>) {
    *p = v;
  } else if constexpr (kUnit) {
    *reinterpret_cast<Vec8u*>(p) = v;
  } else {
    for (int k = 0; k < kLanes; ++k) p[k * stride] = v[k];
  }
}

// ---- the 1-D transforms; each 2-D one applies its 1-D transform to the columns, then the rows ----

/// t = B^T d (6 -> 6). B^T rows: [4 0 -5 0 1 0], [0 -4 -4 1 1 0], [0 4 -4 -1 1 0], [0 -2 -1 2 1 0],
/// [0 2 -1 -2 1 0], [0 4 0 -5 0 1].
template <typename L> [[gnu::always_inline]] inline void bt6(const L (&d)[6], L (&t)[6]) {
  t[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  t[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
  t[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
  t[3] = (d[4] - d[2]) + 2.0f * (d[3] - d[1]);
  t[4] = (d[4] - d[2]) + 2.0f * (d[1] - d[3]);
  t[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

/// y = A^T m (6 -> 4). A^T rows: [1 1 1 1 1 0], [0 1 -1 2 -2 0], [0 1 1 4 4 0], [0 1 -1 8 -8 1].
template <typename L> [[gnu::always_inline]] inline void at4(const L (&m)[6], L (&y)[4]) {
  const L s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
  y[0] = m[0] + s12 + s34;
  y[1] = d12 + 2.0f * d34;
  y[2] = s12 + 4.0f * s34;
  y[3] = d12 + 8.0f * d34 + m[5];
}

/// u = G g (3 -> 6). G rows: [1/4 0 0], [-1/6 -1/6 -1/6], [-1/6 1/6 -1/6], [1/24 1/12 1/6],
/// [1/24 -1/12 1/6], [0 0 1].
template <typename L> [[gnu::always_inline]] inline void g6(const L (&g)[3], L (&u)[6]) {
  const L s02 = g[0] + g[2];
  u[0] = g[0] * (1.0f / 4);
  u[1] = (s02 + g[1]) * (-1.0f / 6);
  u[2] = (s02 - g[1]) * (-1.0f / 6);
  const L a = g[0] * (1.0f / 24) + g[2] * (1.0f / 6), b = g[1] * (1.0f / 12);
  u[3] = a + b;
  u[4] = a - b;
  u[5] = g[2];
}

/// z = A y (4 -> 6), the transpose of at4.
template <typename L> [[gnu::always_inline]] inline void a6(const L (&y)[4], L (&z)[6]) {
  const L s02 = y[0] + y[2], s13 = y[1] + y[3];
  const L q02 = y[0] + 4.0f * y[2], q13 = 2.0f * y[1] + 8.0f * y[3];
  z[0] = y[0];
  z[1] = s02 + s13;
  z[2] = s02 - s13;
  z[3] = q02 + q13;
  z[4] = q02 - q13;
  z[5] = y[3];
}

/// g = G^T u (6 -> 3), the transpose of g6.
template <typename L> [[gnu::always_inline]] inline void gt3(const L (&u)[6], L (&g)[3]) {
  const L s12 = u[1] + u[2], d12 = u[2] - u[1], s34 = u[3] + u[4], d34 = u[3] - u[4];
  g[0] = u[0] * (1.0f / 4) - s12 * (1.0f / 6) + s34 * (1.0f / 24);
  g[1] = d12 * (1.0f / 6) + d34 * (1.0f / 12);
  g[2] = (s34 - s12) * (1.0f / 6) + u[5];
}

// ---- operands ----

/// A dense 4-D operand (N, C, H, W) of either layout: element (n, c, h, w) at
/// n * img + c * ch + h * row + w * col.
struct Operand {
  int64_t C, H, W, img, ch, row, col;
  Operand(int64_t C_, int64_t H_, int64_t W_, MemoryFormat f)
      : C(C_),
        H(H_),
        W(W_),
        img(C_ * H_ * W_),
        ch(f == MemoryFormat::channels_last ? 1 : H_ * W_),
        row(f == MemoryFormat::channels_last ? W_ * C_ : W_),
        col(f == MemoryFormat::channels_last ? C_ : 1) {}
};

/// The tile grid over an output plane (Ho, Wo).
struct Tiles {
  int64_t TH, TW, per_image;
  Tiles(int64_t Ho, int64_t Wo) : TH((Ho + 3) / 4), TW((Wo + 3) / 4), per_image(TH * TW) {}
};

// ---- per-tile transforms (one lane group of channels) ----

/// out = T in T^T for the 1-D transform t (N values -> R): t on each column of in, then on each row.
template <typename L, int N, int R, void (*t)(const L (&)[N], L (&)[R])>
[[gnu::always_inline]] inline void sandwich(const L (&in)[N][N], L (&out)[R][R]) {
  L e[R][N];
  for (int j = 0; j < N; ++j) {
    L col[N], tc[R];
    for (int i = 0; i < N; ++i) col[i] = in[i][j];
    t(col, tc);
    for (int i = 0; i < R; ++i) e[i][j] = tc[i];
  }
  for (int i = 0; i < R; ++i) t(e[i], out[i]);
}

/// The 36 frequencies of a tile to or from their matrices, p + xi * fs.
template <typename L> [[gnu::always_inline]] inline void store_freqs(const L (&v)[6][6], float* p, int64_t fs) {
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) store<L, true>(p + (i * 6 + j) * fs, 1, v[i][j]);
}
template <typename L> [[gnu::always_inline]] inline void load_freqs(L (&v)[6][6], const float* p, int64_t fs) {
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) load<L, true>(v[i][j], p + (i * 6 + j) * fs, 1);
}

/// The K x K block of a plane (operand a; img offset to the lanes' first channel) at (h0, w0), 0
/// outside the plane.
template <typename L, bool kUnit, int K>
[[gnu::always_inline]] inline void load_block(L (&d)[K][K], const float* img, const Operand& a, int64_t h0,
                                              int64_t w0) {
  if (h0 >= 0 && w0 >= 0 && h0 + K <= a.H && w0 + K <= a.W) {  // inside: no checks
    for (int r = 0; r < K; ++r)
      for (int s = 0; s < K; ++s) load<L, kUnit>(d[r][s], img + (h0 + r) * a.row + (w0 + s) * a.col, a.ch);
    return;
  }
  for (int r = 0; r < K; ++r)
    for (int s = 0; s < K; ++s) {
      const int64_t ih = h0 + r, iw = w0 + s;
      if (ih >= 0 && ih < a.H && iw >= 0 && iw < a.W) load<L, kUnit>(d[r][s], img + ih * a.row + iw * a.col, a.ch);
      else d[r][s] = L{};
    }
}

/// The 36 frequencies of one tile, at p + xi * fs: the K x K block of img at (h0, w0) (0 outside
/// the plane) under the 1-D transform t (K -> 6) on both sides. V = B^T d B of a 6x6 input window
/// (K = 6, t = bt6), Z = A y A^T of a 4x4 grad_out block (K = 4, t = a6).
template <typename L, bool kUnit, int K, void (*t)(const L (&)[K], L (&)[6])>
[[gnu::always_inline]] inline void tile_freqs(const float* img, const Operand& a, int64_t h0, int64_t w0, float* p,
                                              int64_t fs) {
  L d[K][K], f[6][6];
  load_block<L, kUnit, K>(d, img, a, h0, w0);
  sandwich<L, K, 6, t>(d, f);
  store_freqs(f, p, fs);
}

/// The 4x4 outputs of one tile, A^T M A from M[xi] at m + xi * fs, plus the bias, into img (offset
/// to the lanes' first channel) at (h0, w0), those inside the plane only.
template <typename L, bool kUnit>
[[gnu::always_inline]] inline void output_tile(const float* m, int64_t fs, const float* bias, float* img,
                                               const Operand& a, int64_t h0, int64_t w0) {
  L t[6][6], y[4][4];
  load_freqs(t, m, fs);
  sandwich<L, 6, 4, at4<L>>(t, y);
  L b = L{};
  if (bias != nullptr) load<L, true>(b, bias, 1);
  for (int r = 0; r < 4 && h0 + r < a.H; ++r)
    for (int c = 0; c < 4 && w0 + c < a.W; ++c)
      store<L, kUnit>(img + (h0 + r) * a.row + (w0 + c) * a.col, a.ch, y[r][c] + b);
}

// ---- per-chunk transforms (compiled for the baseline ISA and for x86-64-v3) ----

/// V (36, T, C) rows [t0, t1) of the chunk starting at image x (operand a, padding ph, pw); the
/// frequencies' matrices fs elements apart.
template <bool kUnit>
[[gnu::always_inline]] inline void input_tiles_t(const float* x, const Operand& a, const Tiles& tl, int64_t ph,
                                                 int64_t pw, int64_t t0, int64_t t1, int64_t fs, float* V) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t i = t / tl.per_image, th = (t % tl.per_image) / tl.TW, tw = t % tl.TW;
    const float* img = x + i * a.img;
    const int64_t h0 = 4 * th - ph, w0 = 4 * tw - pw;
    float* v = V + t * a.C;
    int64_t c = 0;
    for (; c + kLanes <= a.C; c += kLanes) tile_freqs<Vec8, kUnit, 6, bt6<Vec8>>(img + c * a.ch, a, h0, w0, v + c, fs);
    for (; c < a.C; ++c) tile_freqs<float, kUnit, 6, bt6<float>>(img + c * a.ch, a, h0, w0, v + c, fs);
  }
}
EMBER_CPU_CLONES void input_tiles(const float* x, const Operand& a, const Tiles& tl, int64_t ph, int64_t pw, int64_t t0,
                                  int64_t t1, int64_t fs, float* V) {
  if (a.ch == 1) input_tiles_t<true>(x, a, tl, ph, pw, t0, t1, fs, V);
  else input_tiles_t<false>(x, a, tl, ph, pw, t0, t1, fs, V);
}

/// Z (36, T, O) rows [t0, t1) of the chunk starting at image g of grad_out (operand a: its plane);
/// the frequencies' matrices fs elements apart.
template <bool kUnit>
[[gnu::always_inline]] inline void gout_tiles_t(const float* g, const Operand& a, const Tiles& tl, int64_t t0,
                                                int64_t t1, int64_t fs, float* Z) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t i = t / tl.per_image, th = (t % tl.per_image) / tl.TW, tw = t % tl.TW;
    const float* img = g + i * a.img;
    float* z = Z + t * a.C;
    int64_t o = 0;
    for (; o + kLanes <= a.C; o += kLanes)
      tile_freqs<Vec8, kUnit, 4, a6<Vec8>>(img + o * a.ch, a, 4 * th, 4 * tw, z + o, fs);
    for (; o < a.C; ++o) tile_freqs<float, kUnit, 4, a6<float>>(img + o * a.ch, a, 4 * th, 4 * tw, z + o, fs);
  }
}
EMBER_CPU_CLONES void gout_tiles(const float* g, const Operand& a, const Tiles& tl, int64_t t0, int64_t t1, int64_t fs,
                                 float* Z) {
  if (a.ch == 1) gout_tiles_t<true>(g, a, tl, t0, t1, fs, Z);
  else gout_tiles_t<false>(g, a, tl, t0, t1, fs, Z);
}

/// Output tiles [t0, t1) of the chunk from M (36, T, Cout), its frequencies' matrices fs elements
/// apart, into the chunk starting at image out.
template <bool kUnit>
[[gnu::always_inline]] inline void output_tiles_t(const float* M, int64_t fs, const float* bias, const Operand& a,
                                                  const Tiles& tl, int64_t t0, int64_t t1, float* out) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t i = t / tl.per_image, th = (t % tl.per_image) / tl.TW, tw = t % tl.TW;
    float* img = out + i * a.img;
    const float* m = M + t * a.C;
    int64_t o = 0;
    for (; o + kLanes <= a.C; o += kLanes)
      output_tile<Vec8, kUnit>(m + o, fs, bias != nullptr ? bias + o : nullptr, img + o * a.ch, a, 4 * th, 4 * tw);
    for (; o < a.C; ++o)
      output_tile<float, kUnit>(m + o, fs, bias != nullptr ? bias + o : nullptr, img + o * a.ch, a, 4 * th, 4 * tw);
  }
}
EMBER_CPU_CLONES void output_tiles(const float* M, int64_t fs, const float* bias, const Operand& a, const Tiles& tl,
                                   int64_t t0, int64_t t1, float* out) {
  if (a.ch == 1) output_tiles_t<true>(M, fs, bias, a, tl, t0, t1, out);
  else output_tiles_t<false>(M, fs, bias, a, tl, t0, t1, out);
}

/// The filter's strides: element (o, c, ki, kj) of w (O, C, 3, 3) at o * so + c * sc + ki * sk + kj * sj.
struct Filter {
  int64_t so, sc, sk, sj;
  Filter(int64_t C, MemoryFormat f)
      : so(9 * C),
        sc(f == MemoryFormat::channels_last ? 1 : 9),
        sk(f == MemoryFormat::channels_last ? 3 * C : 3),
        sj(f == MemoryFormat::channels_last ? C : 1) {}
};

/// U[xi][o][c..] = (G g G^T)[xi] for the lanes' filters g = w[o][c..] at wp (flipped in both
/// spatial dims when flip); U rows (o, c) at u + xi * fs.
template <typename L, bool kUnit>
[[gnu::always_inline]] inline void filter_lane(const float* wp, const Filter& fl, bool flip, float* u, int64_t fs) {
  L g[3][3], t[6][6];
  for (int ki = 0; ki < 3; ++ki)
    for (int kj = 0; kj < 3; ++kj)
      load<L, kUnit>(g[ki][kj], wp + (flip ? 2 - ki : ki) * fl.sk + (flip ? 2 - kj : kj) * fl.sj, fl.sc);
  sandwich<L, 3, 6, g6<L>>(g, t);
  store_freqs(t, u, fs);
}

/// U (36, O, C) rows [o0, o1) from w; the frequencies' matrices fs elements apart.
template <bool kUnit>
[[gnu::always_inline]] inline void filter_rows_t(const float* w, const Filter& fl, int64_t C, bool flip, int64_t o0,
                                                 int64_t o1, int64_t fs, float* U) {
  for (int64_t o = o0; o < o1; ++o) {
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes)
      filter_lane<Vec8, kUnit>(w + o * fl.so + c * fl.sc, fl, flip, U + o * C + c, fs);
    for (; c < C; ++c) filter_lane<float, kUnit>(w + o * fl.so + c * fl.sc, fl, flip, U + o * C + c, fs);
  }
}
EMBER_CPU_CLONES void filter_rows(const float* w, const Filter& fl, int64_t C, bool flip, int64_t o0, int64_t o1,
                                  int64_t fs, float* U) {
  if (fl.sc == 1) filter_rows_t<true>(w, fl, C, flip, o0, o1, fs, U);
  else filter_rows_t<false>(w, fl, C, flip, o0, o1, fs, U);
}

/// The lanes' filter gradients gw[o][c..] (at gp, overwritten) = G^T dU[:, o, c..] G, dU rows
/// (o, c) at du + xi * fs.
template <typename L, bool kUnit>
[[gnu::always_inline]] inline void filter_grad_lane(const float* du, int64_t fs, const Filter& fl, float* gp) {
  L t[6][6], g[3][3];
  load_freqs(t, du, fs);
  sandwich<L, 6, 3, gt3<L>>(t, g);
  for (int ki = 0; ki < 3; ++ki)
    for (int kj = 0; kj < 3; ++kj) store<L, kUnit>(gp + ki * fl.sk + kj * fl.sj, fl.sc, g[ki][kj]);
}

/// gw rows [o0, o1) (overwritten) from dU (36, O, C), its frequencies' matrices fs elements apart.
template <bool kUnit>
[[gnu::always_inline]] inline void filter_grad_rows_t(const float* dU, int64_t fs, const Filter& fl, int64_t C,
                                                      int64_t o0, int64_t o1, float* gw) {
  for (int64_t o = o0; o < o1; ++o) {
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes)
      filter_grad_lane<Vec8, kUnit>(dU + o * C + c, fs, fl, gw + o * fl.so + c * fl.sc);
    for (; c < C; ++c) filter_grad_lane<float, kUnit>(dU + o * C + c, fs, fl, gw + o * fl.so + c * fl.sc);
  }
}
EMBER_CPU_CLONES void filter_grad_rows(const float* dU, int64_t fs, const Filter& fl, int64_t C, int64_t o0, int64_t o1,
                                       float* gw) {
  if (fl.sc == 1) filter_grad_rows_t<true>(dU, fs, fl, C, o0, o1, gw);
  else filter_grad_rows_t<false>(dU, fs, fl, C, o0, o1, gw);
}

// ---- drivers ----

/// Images per chunk: V and M (or Z) of the chunk near kWinogradChunkBytes, at least one image.
int64_t chunk_images(int64_t N, const Tiles& tl, int64_t cin, int64_t cout) {
  if (g_chunk_override > 0) return std::min<int64_t>(g_chunk_override, std::max<int64_t>(N, 1));
  const int64_t per = kFreq * tl.per_image * (cin + cout) * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>(kWinogradChunkBytes / std::max<int64_t>(per, 1), 1, std::max<int64_t>(N, 1));
}

/// Elements from one frequency's matrix of `elems` elements to the next: rounded up to an odd
/// multiple of 16 floats (64 bytes). A multiple of 4 KiB would put the 36 rows a tile's transform
/// writes (or reads) in one L1 set, evicting each other.
int64_t freq_stride(int64_t elems) {
  const int64_t s = (elems + 15) / 16 * 16;
  return (s / 16) % 2 == 0 ? s + 16 : s;
}

/// Grain (tiles per task) for transforms of `per_tile` elements each.
int64_t tile_grain(int64_t per_tile) { return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per_tile, 1)); }

/// The 36 products C[xi] (m, n) = op(A[xi]) @ op(B[xi]) + beta C[xi]; A[xi] stored (ar, ac), B[xi]
/// (br, bc), the frequencies' matrices sa, sb, sc elements apart. One frequency per pool task, each
/// product one unsplit call (gemm_serial): the result does not depend on the thread count.
void freq_gemms(const float* a, int64_t sa, int64_t ar, int64_t ac, bool ta, const float* b, int64_t sb, int64_t br,
                int64_t bc, bool tb, float* c, int64_t sc, double beta) {
  const int64_t m = ta ? ac : ar, n = tb ? br : bc;
  parallel_for(0, kFreq, 1, [&](int64_t x0, int64_t x1) {
    for (int64_t xi = x0; xi < x1; ++xi)
      gemm_serial(ta, tb, m, n, ta ? ar : ac, 1.0f, a + xi * sa, ac, b + xi * sb, bc, static_cast<float>(beta),
                  c + xi * sc);
  });
}

/// U (36, O, C), its frequencies' matrices fs elements apart, of w (O, C, 3, 3) laid out as f, on
/// the pool.
void transform_filter(const Tensor& w, MemoryFormat f, bool flip, int64_t fs, float* U) {
  const int64_t O = w.size(0), C = w.size(1);
  const Filter fl(C, f);
  const float* wp = w.data<float>();
  parallel_for(0, O, std::max<int64_t>(1, kGrainElems / (kFreq * C)),
               [&](int64_t o0, int64_t o1) { filter_rows(wp, fl, C, flip, o0, o1, fs, U); });
}

/// out (N, Cout, Ho, Wo) = the 3x3 correlation of x (N, Cin, H, W), zero-padded by (ph, pw), with
/// the filters whose transforms are U (matrices su elements apart): (36, Cout, Cin) when trans_u
/// (forward), (36, Cin, Cout) otherwise (backward input); plus bias (Cout) when not null.
void winograd_conv(const float* x, const Operand& xa, int64_t N, const float* U, int64_t su, bool trans_u, int64_t ph,
                   int64_t pw, float* out, const Operand& oa, const float* bias) {
  const Tiles tl(oa.H, oa.W);
  const int64_t Cin = xa.C, Cout = oa.C;
  const int64_t chunk = chunk_images(N, tl, Cin, Cout);
  const int64_t Tmax = chunk * tl.per_image;
  const ColumnBuffer<float, 2> vbuf(kFreq * freq_stride(Tmax * Cin));
  const ColumnBuffer<float, 3> mbuf(kFreq * freq_stride(Tmax * Cout));
  float* V = vbuf.data();
  float* M = mbuf.data();
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0), T = nb * tl.per_image;
    const int64_t sv = freq_stride(T * Cin), sm = freq_stride(T * Cout);
    const float* xc = x + n0 * xa.img;
    parallel_for(0, T, tile_grain(kFreq * Cin),
                 [&](int64_t t0, int64_t t1) { input_tiles(xc, xa, tl, ph, pw, t0, t1, sv, V); });
    // M[xi] (T, Cout) = V[xi] (T, Cin) @ U[xi] (Cin, Cout)
    freq_gemms(V, sv, T, Cin, false, U, su, trans_u ? Cout : Cin, trans_u ? Cin : Cout, trans_u, M, sm, 0.0);
    float* oc = out + n0 * oa.img;
    parallel_for(0, T, tile_grain(kFreq * Cout),
                 [&](int64_t t0, int64_t t1) { output_tiles(M, sm, bias, oa, tl, t0, t1, oc); });
  }
}

}  // namespace

bool winograd_applies(const Geometry& g, DType dt, WinogradPass pass) {
  // Padding 1; or 0 for the forward and the weight gradient, whose every sum keeps all 9 taps
  // (the input gradient of a padding-0 convolution has corners with one: winograd.h).
  const bool pad = (g.ph == 1 && g.pw == 1) || (pass != WinogradPass::backward_input && g.ph == 0 && g.pw == 0);
  const bool kernel = g_enabled && dt == DType::f32 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
                      g.dw == 1 && g.G == 1 && pad;
  const bool size = g.C >= kWinogradMinChannels && g.O >= kWinogradMinChannels && g.Ho >= 4 && g.Wo >= 4 &&
                    g.N * Tiles(g.Ho, g.Wo).per_image >= kWinogradMinTiles;
  return kernel && size && (pass != WinogradPass::backward_weight || g.N * g.Ho * g.Wo >= kWinogradMinTerms);
}

void set_winograd_enabled(bool on) { g_enabled = on; }

void set_winograd_chunk_images(int64_t n) { g_chunk_override = std::max<int64_t>(n, 0); }

int64_t winograd_calls(WinogradPass pass) { return g_calls[static_cast<int>(pass)].load(std::memory_order_relaxed); }

void winograd_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                      MemoryFormat f) {
  g_calls[static_cast<int>(WinogradPass::forward)].fetch_add(1, std::memory_order_relaxed);
  const Geometry g(x.sizes(), w.sizes(), out.sizes(), p);
  const int64_t su = freq_stride(g.O * g.C);
  const ColumnBuffer<float, 4> ubuf(kFreq * su);
  transform_filter(w, f, false, su, ubuf.data());
  winograd_conv(x.data<float>(), Operand(g.C, g.H, g.W, f), g.N, ubuf.data(), su, true, g.ph, g.pw, out.data<float>(),
                Operand(g.O, g.Ho, g.Wo, f), bias.defined() ? bias.data<float>() : nullptr);
}

void winograd_backward_input(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx,
                             MemoryFormat f) {
  g_calls[static_cast<int>(WinogradPass::backward_input)].fetch_add(1, std::memory_order_relaxed);
  const Geometry g(gx.sizes(), w.sizes(), gout.sizes(), p);
  const int64_t su = freq_stride(g.O * g.C);
  const ColumnBuffer<float, 4> ubuf(kFreq * su);
  transform_filter(w, f, true, su, ubuf.data());
  // gx[c, h, w] = sum over o, ki, kj of gout[o, h + ph - ki, w + pw - kj] w[o, c, ki, kj]: the
  // correlation of gout padded by 2 - p with w flipped, U read as (36, O, C) = (Cin, Cout).
  winograd_conv(gout.data<float>(), Operand(g.O, g.Ho, g.Wo, f), g.N, ubuf.data(), su, false, 2 - g.ph, 2 - g.pw,
                gx.data<float>(), Operand(g.C, g.H, g.W, f), nullptr);
}

void winograd_backward_weight(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw,
                              MemoryFormat f) {
  g_calls[static_cast<int>(WinogradPass::backward_weight)].fetch_add(1, std::memory_order_relaxed);
  const Geometry g(x.sizes(), gw.sizes(), gout.sizes(), p);
  const Operand xa(g.C, g.H, g.W, f), ga(g.O, g.Ho, g.Wo, f);
  const Tiles tl(g.Ho, g.Wo);
  const int64_t chunk = chunk_images(g.N, tl, g.C, g.O);
  const int64_t Tmax = chunk * tl.per_image, su = freq_stride(g.O * g.C);
  const ColumnBuffer<float, 2> vbuf(kFreq * freq_stride(Tmax * g.C));
  const ColumnBuffer<float, 3> zbuf(kFreq * freq_stride(Tmax * g.O));
  const ColumnBuffer<float, 4> ubuf(kFreq * su);
  float* V = vbuf.data();
  float* Z = zbuf.data();
  float* dU = ubuf.data();
  if (g.N == 0) std::fill(dU, dU + kFreq * su, 0.0f);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), T = nb * tl.per_image;
    const int64_t sv = freq_stride(T * g.C), sz = freq_stride(T * g.O);
    const float* xc = x.data<float>() + n0 * xa.img;
    const float* gc = gout.data<float>() + n0 * ga.img;
    parallel_for(0, T, tile_grain(kFreq * (g.C + g.O)), [&](int64_t t0, int64_t t1) {
      input_tiles(xc, xa, tl, g.ph, g.pw, t0, t1, sv, V);
      gout_tiles(gc, ga, tl, t0, t1, sz, Z);
    });
    // dU[xi] (O, C) (+)= Z[xi]^T (O, T) @ V[xi] (T, C)
    freq_gemms(Z, sz, T, g.O, true, V, sv, T, g.C, false, dU, su, n0 == 0 ? 0.0 : 1.0);
  }
  const Filter fl(g.C, f);
  float* gwp = gw.data<float>();
  parallel_for(0, g.O, std::max<int64_t>(1, kGrainElems / (kFreq * g.C)),
               [&](int64_t o0, int64_t o1) { filter_grad_rows(dU, su, fl, g.C, o0, o1, gwp); });
}

}  // namespace ember::kernels::cpu::conv_detail
