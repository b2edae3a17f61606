// CPU 2-D pooling: max (with arg-max indices), average (count_include_pad), adaptive average, and
// their backwards, on NCHW or NHWC (channels-last) operands.
//  * NCHW: every (n, c) plane is independent, so all six run parallel over planes; the backwards
//    scatter into their own plane only, so no two threads ever write the same element.
//  * NHWC: the C values of one position are adjacent, so the loops run over positions with the
//    channels innermost (one vectorisable pass per window element), parallel over output rows
//    (the forwards and the average backwards, which gather) or images (max backward, which scatters).
//    They scan every window in the same order as the NCHW loops, so both layouts give equal
//    results, bit for bit.
// Sums and comparisons run in f32 (f64 for f64); f16 / bf16 are widened per element.
#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/pool.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kGrainElems = int64_t{1} << 14;  // min input elements per parallel_for chunk

template <typename T> using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Runs fn(plane) for every plane in [0, planes), parallel; `per_plane` elements of work each.
template <typename F> void for_planes(int64_t planes, int64_t per_plane, const F& fn) {
  parallel_for(0, planes, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per_plane, 1)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) fn(p);
               });
}

/// Window [start, end) of output index o along one dim for PyTorch's avg/max pooling, clipped
/// to [0, in); `padded` is the window size counted against the padded input (for count_include_pad).
struct Window {
  int64_t start, end, padded;
};
inline Window pool_window(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t in) {
  int64_t s = o * stride - pad;
  int64_t e = std::min(s + kernel, in + pad);
  const int64_t padded = e - s;
  return {std::max<int64_t>(s, 0), std::min(e, in), padded};
}
/// Adaptive window of output index o: [floor(o * in / out), ceil((o + 1) * in / out)).
inline Window adaptive_window(int64_t o, int64_t out, int64_t in) {
  const int64_t s = (o * in) / out;
  const int64_t e = ((o + 1) * in + out - 1) / out;
  return {s, e, e - s};
}

/// Sizes of an (N, C, H, W) -> (N, C, Ho, Wo) pooling, and the NHWC row of position (n, h, w).
struct Nhwc {
  int64_t C, H, W, Ho, Wo;
  int64_t in(int64_t n, int64_t h, int64_t w) const { return ((n * H + h) * W + w) * C; }
  int64_t out(int64_t n, int64_t h, int64_t w) const { return ((n * Ho + h) * Wo + w) * C; }
};
Nhwc nhwc_of(const Tensor& big, const Tensor& small) {
  return {big.size(1), big.size(2), big.size(3), small.size(2), small.size(3)};
}

/// Runs fn(n, oh) for every output row of an NHWC pooling, parallel; `per_row` elements of work each.
template <typename F> void for_rows(int64_t n, int64_t rows, int64_t per_row, const F& fn) {
  for_planes(n * rows, per_row, [&](int64_t r) { fn(r / rows, r % rows); });
}

// ---- max ----
// NaN wins (as in PyTorch): a window holding a NaN yields NaN and points at it.
/// One step of max pooling's scan (row-major over the window): a larger value or the first NaN
/// takes over; once a NaN is held nothing replaces it; ties keep the earlier element.
/// Branch-free, selecting with bit masks: on real activations the comparisons are coin flips,
/// and with branches (which GCC emits even for `take ? v : best`) mispredictions made this the
/// slowest kernel of a CNN step.
template <typename A> inline void take_if_greater(A v, int64_t at, A& best, int64_t& arg) {
  using Bits = std::conditional_t<sizeof(A) == 8, uint64_t, uint32_t>;
  const bool open = !std::isnan(best);  // a held NaN is final
  const bool take = open & ((v > best) | std::isnan(v));
  const Bits vm = Bits(0) - Bits(take);
  best = std::bit_cast<A>((std::bit_cast<Bits>(v) & vm) | (std::bit_cast<Bits>(best) & ~vm));
  const uint64_t im = uint64_t(0) - uint64_t(take);
  arg = static_cast<int64_t>((static_cast<uint64_t>(at) & im) | (static_cast<uint64_t>(arg) & ~im));
}

#if defined(__SSE2__)
/// Four outputs of one f32 output row at a time (the scan of take_if_greater on 4 lanes, window
/// element q = 0..3 in row-major order kept as a lane code); returns the first output left undone.
/// Reads r0/r1[2 * ow .. 2 * ow + 7], inside the rows because 2 * Wo <= W.
inline int64_t max_pool_2x2_sse2(const float* r0, const float* r1, int64_t W, int64_t oh, int64_t Wo, float* o,
                                 int64_t* ix) {
  int64_t ow = 0;
  for (; ow + 4 <= Wo; ow += 4) {
    const __m128 a0 = _mm_loadu_ps(r0 + 2 * ow), a1 = _mm_loadu_ps(r0 + 2 * ow + 4);
    const __m128 b0 = _mm_loadu_ps(r1 + 2 * ow), b1 = _mm_loadu_ps(r1 + 2 * ow + 4);
    const __m128 v[4] = {
        _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)),
        _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1))};
    __m128 best = v[0];
    __m128i code = _mm_setzero_si128();
    for (int q = 1; q < 4; ++q) {
      const __m128 open = _mm_cmpord_ps(best, best);  // a held NaN is final
      const __m128 take = _mm_and_ps(open, _mm_or_ps(_mm_cmpgt_ps(v[q], best), _mm_cmpunord_ps(v[q], v[q])));
      best = _mm_or_ps(_mm_and_ps(take, v[q]), _mm_andnot_ps(take, best));
      const __m128i t = _mm_castps_si128(take);
      code = _mm_or_si128(_mm_and_si128(t, _mm_set1_epi32(q)), _mm_andnot_si128(t, code));
    }
    _mm_storeu_ps(o + ow, best);
    alignas(16) int32_t c[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(c), code);
    for (int j = 0; j < 4; ++j) ix[ow + j] = 2 * oh * W + 2 * (ow + j) + (c[j] & 1) + (c[j] >> 1) * W;
  }
  return ow;
}
#endif

/// One plane of the 2x2, stride-2, unpadded case of every CNN here (the general loop recomputes
/// clipped windows per output and mispredicts its compares): the same scan order, so the same
/// values, indices and NaN handling; f32 four outputs at a time with SSE2.
template <typename T> void max_pool_2x2_plane(const T* xs, int64_t W, int64_t Ho, int64_t Wo, T* op, int64_t* ip) {
  using A = acc_t<T>;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const T* r0 = xs + 2 * oh * W;
    const T* r1 = r0 + W;
    T* o = op + oh * Wo;
    int64_t* ix = ip + oh * Wo;
    int64_t ow = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) ow = max_pool_2x2_sse2(r0, r1, W, oh, Wo, o, ix);
#endif
    for (; ow < Wo; ++ow) {
      const int64_t at = 2 * oh * W + 2 * ow;
      A best = static_cast<A>(r0[2 * ow]);
      int64_t arg = at;
      take_if_greater(static_cast<A>(r0[2 * ow + 1]), at + 1, best, arg);
      take_if_greater(static_cast<A>(r1[2 * ow]), at + W, best, arg);
      take_if_greater(static_cast<A>(r1[2 * ow + 1]), at + W + 1, best, arg);
      o[ow] = static_cast<T>(best);
      ix[ow] = arg;
    }
  }
}

/// NHWC max pooling: per output position, the window's positions in row-major order, each one a
/// pass over the C channels doing take_if_greater's step (so the same scan as the NCHW loops). The
/// pass keeps the running maximum and the window element it came from (q) in two same-width arrays
/// and selects with masks, so the compiler vectorises it; q becomes the index h * W + w at the end.
template <typename T>
void max_pool_nhwc(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  using A = acc_t<T>;
  using Q = std::conditional_t<sizeof(A) == 8, int64_t, int32_t>;
  const Nhwc d = nhwc_of(x, out);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_rows(x.size(0), d.Ho, d.Wo * d.C * p.kernel_h * p.kernel_w, [&](int64_t n, int64_t oh) {
    std::vector<A> best(static_cast<size_t>(d.C));
    std::vector<Q> from(static_cast<size_t>(d.C));
    const Window wh = pool_window(oh, p.kernel_h, p.stride_h, p.pad_h, d.H);
    for (int64_t ow = 0; ow < d.Wo; ++ow) {
      const Window ww = pool_window(ow, p.kernel_w, p.stride_w, p.pad_w, d.W);
      std::fill(best.begin(), best.end(), -std::numeric_limits<A>::infinity());
      std::fill(from.begin(), from.end(), Q(0));
      Q q = 0;
      for (int64_t ih = wh.start; ih < wh.end; ++ih) {
        for (int64_t iw = ww.start; iw < ww.end; ++iw, ++q) {
          const T* xr = xp + d.in(n, ih, iw);
          A* b = best.data();
          Q* f = from.data();
          for (int64_t c = 0; c < d.C; ++c) {
            const A v = static_cast<A>(xr[c]);
            const bool take = (b[c] == b[c]) & ((v > b[c]) | (v != v));  // a held NaN is final
            b[c] = take ? v : b[c];
            f[c] = take ? q : f[c];
          }
        }
      }
      T* o = op + d.out(n, oh, ow);
      int64_t* ix = ip + d.out(n, oh, ow);
      const int64_t span = ww.end - ww.start;
      for (int64_t c = 0; c < d.C; ++c) {
        o[c] = static_cast<T>(best[c]);
        ix[c] = (wh.start + from[c] / span) * d.W + ww.start + from[c] % span;
      }
    }
  });
}

template <typename T>
void max_pool_impl(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  using A = acc_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  // Every window whole (ceil_mode can add a clipped last one): the 2x2 fast path.
  const bool whole_2x2 = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
                         p.pad_w == 0 && 2 * Ho <= H && 2 * Wo <= W;
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_planes(x.size(0) * x.size(1), H * W, [&](int64_t pl) {
    const T* xs = xp + pl * H * W;
    if (whole_2x2) return max_pool_2x2_plane<T>(xs, W, Ho, Wo, op + pl * Ho * Wo, ip + pl * Ho * Wo);
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = pool_window(oh, p.kernel_h, p.stride_h, p.pad_h, H);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = pool_window(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        A best = -std::numeric_limits<A>::infinity();
        int64_t arg = wh.start * W + ww.start;
        for (int64_t ih = wh.start; ih < wh.end && !std::isnan(best); ++ih) {
          for (int64_t iw = ww.start; iw < ww.end; ++iw) {
            const A v = static_cast<A>(xs[ih * W + iw]);
            if (v > best || std::isnan(v)) {
              best = v;
              arg = ih * W + iw;
              if (std::isnan(v)) break;
            }
          }
        }
        op[(pl * Ho + oh) * Wo + ow] = static_cast<T>(best);
        ip[(pl * Ho + oh) * Wo + ow] = arg;
      }
    }
  });
}

/// NHWC max backward: each image's gradient is its own region, so images run in parallel and
/// every output position scatters its C gradients to C adjacent rows of its arg-max positions.
template <typename T> void max_pool_backward_nhwc(const Tensor& gout, const Tensor& indices, const Tensor& gx) {
  const Nhwc d = nhwc_of(gx, gout);
  const int64_t HW = d.H * d.W, L = d.Ho * d.Wo;
  const T* gp = gout.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* xp = gx.data<T>();
  for_planes(gx.size(0), (HW + L) * d.C, [&](int64_t n) {
    T* dst = xp + n * HW * d.C;
    std::fill(dst, dst + HW * d.C, T(0));
    for (int64_t pos = n * L; pos < (n + 1) * L; ++pos) {
      const int64_t* k = ip + pos * d.C;
      const T* g = gp + pos * d.C;
      for (int64_t c = 0; c < d.C; ++c) {
        EMBER_CHECK(k[c] >= 0 && k[c] < HW, "max_pool2d_backward: index ", k[c], " at position ", pos * d.C + c,
                    " is outside its plane of ", HW, " elements");
        T& e = dst[k[c] * d.C + c];
        e = static_cast<T>(static_cast<acc_t<T>>(e) + static_cast<acc_t<T>>(g[c]));
      }
    }
  });
}

template <typename T> void max_pool_backward_impl(const Tensor& gout, const Tensor& indices, const Tensor& gx) {
  const int64_t HW = gx.size(2) * gx.size(3), L = gout.size(2) * gout.size(3);
  const T* gp = gout.data<T>();
  const int64_t* ip = indices.data<int64_t>();
  T* xp = gx.data<T>();
  for_planes(gx.size(0) * gx.size(1), HW + L, [&](int64_t pl) {
    T* d = xp + pl * HW;
    std::fill(d, d + HW, T(0));
    for (int64_t i = 0; i < L; ++i) {
      const int64_t k = ip[pl * L + i];
      EMBER_CHECK(k >= 0 && k < HW, "max_pool2d_backward: index ", k, " at position ", pl * L + i,
                  " is outside its plane of ", HW, " elements");
      d[k] = static_cast<T>(static_cast<acc_t<T>>(d[k]) + static_cast<acc_t<T>>(gp[pl * L + i]));
    }
  });
}

// ---- average and adaptive average ----
// The two share their loops; a window policy says which input window output (oh, ow) averages
// and what it divides by: rows(oh) and cols(ow) give the windows, count(wh, ww) the divisor.

/// avg_pool2d: PyTorch's strided windows; the count includes the padding or not.
struct AvgWindows {
  const Pool2dParams& p;
  int64_t H, W, Ho, Wo;
  Window rows(int64_t oh) const { return pool_window(oh, p.kernel_h, p.stride_h, p.pad_h, H); }
  Window cols(int64_t ow) const { return pool_window(ow, p.kernel_w, p.stride_w, p.pad_w, W); }
  int64_t count(const Window& wh, const Window& ww) const {
    return p.count_include_pad ? wh.padded * ww.padded : (wh.end - wh.start) * (ww.end - ww.start);
  }
  // Outputs [first, last) whose windows may cover input row ih / column iw (a superset: callers
  // test the window). Window o starts at o * stride - pad, so o <= (i + pad) / stride.
  std::pair<int64_t, int64_t> cover_rows(int64_t ih) const { return cover(ih, p.kernel_h, p.stride_h, p.pad_h, Ho); }
  std::pair<int64_t, int64_t> cover_cols(int64_t iw) const { return cover(iw, p.kernel_w, p.stride_w, p.pad_w, Wo); }
  static std::pair<int64_t, int64_t> cover(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t out) {
    const int64_t ip = i + pad;
    return {ip < k ? 0 : (ip - k) / s + 1, std::min(ip / s + 1, out)};
  }
};

/// adaptive_avg_pool2d: windows [floor(o * in / out), ceil((o + 1) * in / out)), count = their size.
struct AdaptiveWindows {
  int64_t H, W, Ho, Wo;
  Window rows(int64_t oh) const { return adaptive_window(oh, Ho, H); }
  Window cols(int64_t ow) const { return adaptive_window(ow, Wo, W); }
  int64_t count(const Window& wh, const Window& ww) const { return wh.padded * ww.padded; }
  // A superset of the outputs covering input i: floor(o*in/out) <= i < ceil((o+1)*in/out) implies
  // floor(i*out/in) <= o < ceil((i+1)*out/in).
  std::pair<int64_t, int64_t> cover_rows(int64_t ih) const { return cover(ih, H, Ho); }
  std::pair<int64_t, int64_t> cover_cols(int64_t iw) const { return cover(iw, W, Wo); }
  static std::pair<int64_t, int64_t> cover(int64_t i, int64_t in, int64_t out) {
    return {(i * out) / in, std::min(((i + 1) * out + in - 1) / in, out)};
  }
};

/// out (N, C, Ho, Wo) = the average of x (N, C, H, W) over each output's window.
template <typename T, typename Windows> void avg_pool_impl(const Tensor& x, const Tensor& out, const Windows& win) {
  using A = acc_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  for_planes(x.size(0) * x.size(1), H * W, [&](int64_t pl) {
    const T* xs = xp + pl * H * W;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = win.rows(oh);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = win.cols(ow);
        A s = 0;
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) s += static_cast<A>(xs[ih * W + iw]);
        op[(pl * Ho + oh) * Wo + ow] = static_cast<T>(s / static_cast<A>(win.count(wh, ww)));
      }
    }
  });
}

/// NHWC out = the average over each output's window: a C-wide sum per window position.
template <typename T, typename Windows> void avg_pool_nhwc(const Tensor& x, const Tensor& out, const Windows& win) {
  using A = acc_t<T>;
  const Nhwc d = nhwc_of(x, out);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  for_rows(x.size(0), d.Ho, d.Wo * d.C * 4, [&](int64_t n, int64_t oh) {
    std::vector<A> s(static_cast<size_t>(d.C));
    const Window wh = win.rows(oh);
    for (int64_t ow = 0; ow < d.Wo; ++ow) {
      const Window ww = win.cols(ow);
      std::fill(s.begin(), s.end(), A(0));
      for (int64_t ih = wh.start; ih < wh.end; ++ih) {
        for (int64_t iw = ww.start; iw < ww.end; ++iw) {
          const T* xr = xp + d.in(n, ih, iw);
          for (int64_t c = 0; c < d.C; ++c) s[c] += static_cast<A>(xr[c]);
        }
      }
      const A count = static_cast<A>(win.count(wh, ww));
      T* o = op + d.out(n, oh, ow);
      for (int64_t c = 0; c < d.C; ++c) o[c] = static_cast<T>(s[c] / count);
    }
  });
}

/// NHWC backward: each input position gathers gout / count from the windows covering it, in
/// ascending (oh, ow) order: the additions of the NCHW scatter, in its order, so equal results.
template <typename T, typename Windows>
void avg_pool_backward_nhwc(const Tensor& gout, const Tensor& gx, const Windows& win) {
  using A = acc_t<T>;
  const Nhwc d = nhwc_of(gx, gout);
  const T* gp = gout.data<T>();
  T* xp = gx.data<T>();
  for_rows(gx.size(0), d.H, d.W * d.C * 4, [&](int64_t n, int64_t ih) {
    std::vector<A> s(static_cast<size_t>(d.C));
    const auto [oh0, oh1] = win.cover_rows(ih);
    for (int64_t iw = 0; iw < d.W; ++iw) {
      const auto [ow0, ow1] = win.cover_cols(iw);
      std::fill(s.begin(), s.end(), A(0));
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        const Window wh = win.rows(oh);
        if (ih < wh.start || ih >= wh.end) continue;
        for (int64_t ow = ow0; ow < ow1; ++ow) {
          const Window ww = win.cols(ow);
          if (iw < ww.start || iw >= ww.end) continue;
          const A count = static_cast<A>(win.count(wh, ww));
          const T* g = gp + d.out(n, oh, ow);
          for (int64_t c = 0; c < d.C; ++c) s[c] += static_cast<A>(g[c]) / count;
        }
      }
      T* dst = xp + d.in(n, ih, iw);
      for (int64_t c = 0; c < d.C; ++c) dst[c] = static_cast<T>(s[c]);
    }
  });
}

/// gx (N, C, H, W): each output's gradient gout (N, C, Ho, Wo) / count, added over its window.
/// The sums run in A and f16 / bf16 round once per element at the end, as the CUDA kernel (which
/// gathers each element's sum in f32) does.
template <typename T, typename Windows>
void avg_pool_backward_impl(const Tensor& gout, const Tensor& gx, const Windows& win) {
  using A = acc_t<T>;
  const int64_t H = gx.size(2), W = gx.size(3), Ho = gout.size(2), Wo = gout.size(3);
  const T* gp = gout.data<T>();
  T* xp = gx.data<T>();
  for_planes(gx.size(0) * gx.size(1), H * W, [&](int64_t pl) {
    T* d = xp + pl * H * W;
    std::vector<A> scratch(std::is_same_v<T, A> ? 0 : static_cast<size_t>(H * W), A(0));
    A* acc;
    if constexpr (std::is_same_v<T, A>) {
      std::fill(d, d + H * W, T(0));
      acc = d;
    } else {
      acc = scratch.data();
    }
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const Window wh = win.rows(oh);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const Window ww = win.cols(ow);
        const A g = static_cast<A>(gp[(pl * Ho + oh) * Wo + ow]) / static_cast<A>(win.count(wh, ww));
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) acc[ih * W + iw] += g;
      }
    }
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < H * W; ++i) d[i] = static_cast<T>(acc[i]);
  });
}

// ---- dtype dispatch ----
// The front (kernels/pool.cpp) passes operands dense in f: debug-only.
void check_layout(const char* op, MemoryFormat f, std::initializer_list<const Tensor*> ts) {
  for ([[maybe_unused]] const Tensor* t : ts)
    EMBER_DEBUG_ASSERT(t->dim() == 4 && t->is_contiguous(f), op, ": expected an operand dense in ",
                       memory_format_name(f), ", got shape ", t->shape_str(), " strides ", shape_str(t->strides()));
}
constexpr bool nhwc(MemoryFormat f) { return f == MemoryFormat::channels_last; }

void max_pool_cpu(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices, MemoryFormat f) {
  check_layout("max_pool2d (cpu)", f, {&x, &out, &indices});
  EMBER_DISPATCH_FLOAT(x.dtype(), "max_pool2d (cpu)", [&]<typename T>() {
    if (nhwc(f)) max_pool_nhwc<T>(x, p, out, indices);
    else max_pool_impl<T>(x, p, out, indices);
  });
}
void max_pool_backward_cpu(const Tensor& gout, const Tensor& indices, const Tensor& gx, MemoryFormat f) {
  check_layout("max_pool2d_backward (cpu)", f, {&gout, &indices, &gx});
  EMBER_DISPATCH_FLOAT(gx.dtype(), "max_pool2d_backward (cpu)", [&]<typename T>() {
    if (nhwc(f)) max_pool_backward_nhwc<T>(gout, indices, gx);
    else max_pool_backward_impl<T>(gout, indices, gx);
  });
}
/// The forward of either average pooling in layout f, with window policy win.
template <typename Windows>
void avg_forward(const char* op, const Tensor& x, const Tensor& out, const Windows& win, MemoryFormat f) {
  check_layout(op, f, {&x, &out});
  EMBER_DISPATCH_FLOAT(x.dtype(), op, [&]<typename T>() {
    if (nhwc(f)) avg_pool_nhwc<T>(x, out, win);
    else avg_pool_impl<T>(x, out, win);
  });
}
/// The backward of either average pooling in layout f, with window policy win.
template <typename Windows>
void avg_backward(const char* op, const Tensor& gout, const Tensor& gx, const Windows& win, MemoryFormat f) {
  check_layout(op, f, {&gout, &gx});
  EMBER_DISPATCH_FLOAT(gx.dtype(), op, [&]<typename T>() {
    if (nhwc(f)) avg_pool_backward_nhwc<T>(gout, gx, win);
    else avg_pool_backward_impl<T>(gout, gx, win);
  });
}
void avg_pool_cpu(const Tensor& x, const Pool2dParams& p, const Tensor& out, MemoryFormat f) {
  avg_forward("avg_pool2d (cpu)", x, out, AvgWindows{p, x.size(2), x.size(3), out.size(2), out.size(3)}, f);
}
void avg_pool_backward_cpu(const Tensor& gout, const Pool2dParams& p, const Tensor& gx, MemoryFormat f) {
  avg_backward("avg_pool2d_backward (cpu)", gout, gx, AvgWindows{p, gx.size(2), gx.size(3), gout.size(2), gout.size(3)},
               f);
}
void adaptive_avg_cpu(const Tensor& x, const Tensor& out, MemoryFormat f) {
  avg_forward("adaptive_avg_pool2d (cpu)", x, out, AdaptiveWindows{x.size(2), x.size(3), out.size(2), out.size(3)}, f);
}
void adaptive_avg_backward_cpu(const Tensor& gout, const Tensor& gx, MemoryFormat f) {
  avg_backward("adaptive_avg_pool2d_backward (cpu)", gout, gx,
               AdaptiveWindows{gx.size(2), gx.size(3), gout.size(2), gout.size(3)}, f);
}

}  // namespace

void register_pool() {
  max_pool2d_table.set(DeviceType::CPU, &max_pool_cpu);
  max_pool2d_backward_table.set(DeviceType::CPU, &max_pool_backward_cpu);
  avg_pool2d_table.set(DeviceType::CPU, &avg_pool_cpu);
  avg_pool2d_backward_table.set(DeviceType::CPU, &avg_pool_backward_cpu);
  adaptive_avg_pool2d_table.set(DeviceType::CPU, &adaptive_avg_cpu);
  adaptive_avg_pool2d_backward_table.set(DeviceType::CPU, &adaptive_avg_backward_cpu);
}

}  // namespace ember::kernels::cpu
