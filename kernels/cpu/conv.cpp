// CPU 2-D convolution: im2col + GEMM, with groups, stride, padding and dilation. Row-major (NCHW)
// operands here; channels-last ones in kernels/cpu/conv_nhwc.cpp.
// The f32 3x3 stride-1 convolutions that winograd_applies() picks (kernels/cpu/winograd.h: padding
// 1, at least 16 channels each way) go to Winograd F(4x4, 3x3) instead, in either layout.
//
// Why it is shaped like this: the GEMMs carry nearly all the FLOPs. Images go through in chunks
// whose column buffer stays near kChunkBytes, so the buffers are reused while warm in cache and
// are never batch-sized allocations; they are kept per thread across calls because fresh
// allocations are page-faulted in again on every call (see docs/benchmarks.md). A chunk's GEMMs
// come in one of two shapes:
//  - per image: one GEMM per image, one image per pool task (each GEMM single-threaded inside its
//    task), straight into the output; the weight gradient's GEMMs accumulate over the images from
//    the calling thread and split themselves over the pool. Each packs the (Og, Kg) weight once,
//    a cost of 1/L of the GEMM's.
//  - batched, when Kg >= kBatchedMinRatio * L (small planes under a large weight, e.g. the 3x3
//    convolutions of ResNet-18's 8x8 and 4x4 stages and of its 16x16 stage after the first):
//    ONE GEMM per group for the chunk. The column buffer holds the images side by side,
//    (G, Kg, nb * L), and the output planes are scattered from (for the gradients, gathered into)
//    a (G, Og, nb * L) buffer: copies that cost 1/Kg of the GEMM's. One GEMM with nb times the
//    columns packs the weight once instead of nb times and keeps the pool's threads on one large
//    product; where the planes are large next to the weight (Kg below kBatchedMinRatio * L: MNIST's convolutions,
//    ResNet's 1x1 projections), the extra copies cost more than that saves, so those stay per
//    image. kBatchedMinRatio is where the measurements (docs/benchmarks.md, bench_cpu_resnet)
//    put the switch.
// im2col, col2im and the copies run on the pool over (image, channel) pairs.
//
// Layouts (all contiguous, groups G, Cg = C / G, Og = O / G, L = Ho * Wo, Kg = Cg * kh * kw):
//   x (N, C, H, W) = N images of (G, Cg, H, W); w (O, Cg, kh, kw) = (G, Og, Kg);
//   out (N, O, Ho, Wo) = N images of (G, Og, L). Column buffer rows (c, ki, kj) hold
//   x[c, oh * sh - ph + ki * dh, ow * sw - pw + kj * dw] (0 outside) for one image: per image, a
//   (G, Kg, L) block per image; batched, image i in columns [i * L, (i + 1) * L) of (G, Kg, nb * L).
// Forward:         out (G, Og, L | nb*L) = w (G, Og, Kg) @ col  [+ bias]
// Backward input:  col = w^T (G, Kg, Og) @ gout (G, Og, L | nb*L), then col2im (adds)
// Backward weight: gw (G, Og, Kg) += gout @ col^T, over every image or chunk
// A 1x1 kernel with stride 1 and no padding uses x itself as the column matrix, per image.
// f16 / bf16 are computed in f32 and rounded once at the end.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/cpu/conv_common.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/winograd.h>
#include <ember/kernels/matmul.h>

namespace ember::kernels::cpu {
namespace {

using namespace conv_detail;

/// The (G, rows, cols) view of image n of a contiguous (N, G * rows, ...) tensor.
Tensor image_view(const Tensor& t, int64_t n, int64_t G, int64_t rows, int64_t cols) {
  const Shape s{G, rows, cols};
  return as_strided_raw(t, s, contiguous_strides(s), t.offset() + n * G * rows * cols);
}

/// The kh * kw rows (each L long, ld apart) of one input channel plane x (H, W) in the column
/// buffer.
template <typename T> void im2col_channel(const T* x, const Geometry& g, T* col, int64_t ld) {
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      T* row = col + (ki * g.kw + kj) * ld;
      const int64_t xoff = kj * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(xoff, g.sw, g.W, g.Wo, lo, hi);
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* d = row + oh * g.Wo;
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        if (ih < 0 || ih >= g.H) {
          std::fill(d, d + g.Wo, T(0));
          continue;
        }
        const T* s = x + ih * g.W + xoff;
        std::fill(d, d + lo, T(0));
        if (g.sw == 1) {
          std::memcpy(d + lo, s + lo, static_cast<size_t>(hi - lo) * sizeof(T));
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) d[ow] = s[ow * g.sw];
        }
        std::fill(d + hi, d + g.Wo, T(0));
      }
    }
  }
}

/// Adds the kh * kw column rows (ld apart) of one channel back into its plane gx (H, W)
/// (overwritten first).
template <typename T> void col2im_channel(const T* col, const Geometry& g, T* gx, int64_t ld) {
  std::fill(gx, gx + g.H * g.W, T(0));
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const T* row = col + (ki * g.kw + kj) * ld;
      const int64_t xoff = kj * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(xoff, g.sw, g.W, g.Wo, lo, hi);
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        const T* s = row + oh * g.Wo;
        T* d = gx + ih * g.W + xoff;
        if (g.sw == 1) {
          for (int64_t ow = lo; ow < hi; ++ow) d[ow] += s[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) d[ow * g.sw] += s[ow];
        }
      }
    }
  }
}

/// Batched GEMMs from Kg >= kBatchedMinRatio * L on (see the top of the file).
constexpr int64_t kBatchedMinRatio = 4;

/// How a chunk of nb images lies in the column buffer: image i's rows start at col + i * step,
/// ld apart.
struct ChunkLayout {
  int64_t ld, step;
  ChunkLayout(const Geometry& g, int64_t nb, bool batched)
      : ld(batched ? nb * g.L : g.L), step(batched ? g.L : g.col_per_image()) {}
};

/// Calls fn(i, c) for every (image, channel) pair of a chunk of nb images, on the pool, about
/// `per` elements of work each.
template <typename F> void for_image_channels(const Geometry& g, int64_t nb, int64_t per, F&& fn) {
  parallel_for(0, nb * g.C, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per, 1)), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) fn(u / g.C, u % g.C);
  });
}

/// im2col of images [n0, n0 + nb) of x into the column buffer, laid out as `lay`.
template <typename T>
void im2col_chunk(const T* x, const Geometry& g, int64_t n0, int64_t nb, ChunkLayout lay, T* col) {
  const int64_t rows = g.kh * g.kw;
  for_image_channels(g, nb, rows * g.L, [&](int64_t i, int64_t c) {
    im2col_channel(x + ((n0 + i) * g.C + c) * g.H * g.W, g, col + i * lay.step + c * rows * lay.ld, lay.ld);
  });
}

/// gx of images [n0, n0 + nb) from the column buffer, laid out as `lay`.
template <typename T>
void col2im_chunk(const T* col, const Geometry& g, int64_t n0, int64_t nb, ChunkLayout lay, T* gx) {
  const int64_t rows = g.kh * g.kw;
  for_image_channels(g, nb, rows * g.L, [&](int64_t i, int64_t c) {
    col2im_channel(col + i * lay.step + c * rows * lay.ld, g, gx + ((n0 + i) * g.C + c) * g.H * g.W, lay.ld);
  });
}

/// The chunk's buffers: the column buffer (none when x is its own) and, batched, the planes.
template <typename T> ChunkBuffers<T> chunk_buffers(const Geometry& g, int64_t chunk, bool batched) {
  return ChunkBuffers<T>(g.direct ? 0 : chunk * g.col_per_image(), batched ? chunk * g.O * g.L : 0);
}
/// Views of a batched chunk's column buffer (G, Kg, nb * L) and planes (G, Og, nb * L).
template <typename T> Tensor col_view(const ChunkBuffers<T>& buf, const Geometry& g, int64_t nb) {
  return wrap(buf.col.data(), {g.G, g.Kg, nb * g.L});
}
template <typename T> Tensor planes_view(const ChunkBuffers<T>& buf, const Geometry& g, int64_t nb) {
  return wrap(buf.planes.data(), {g.G, g.Og, nb * g.L});
}
/// Image i's (G, Kg, L) block of a per-image chunk's column buffer.
template <typename T> Tensor image_block(const ChunkBuffers<T>& buf, const Geometry& g, int64_t i) {
  return wrap(buf.col.data() + i * g.col_per_image(), {g.G, g.Kg, g.L});
}

/// rows (rows, len) each = bias[r % channels]: outputs start at the bias and the GEMMs add onto it.
template <typename T> void fill_bias_rows(T* dst, int64_t rows, int64_t len, const T* bias, int64_t channels) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / len), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::fill(dst + r * len, dst + (r + 1) * len, bias[r % channels]);
  });
}

bool batched_gemms(const Geometry& g) { return !g.direct && g.Kg >= kBatchedMinRatio * g.L; }

template <typename T>
void forward_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  const Geometry g(x.sizes(), w.sizes(), out.sizes(), p);
  const Tensor w3 = as_strided_raw(w, {g.G, g.Og, g.Kg}, contiguous_strides({g.G, g.Og, g.Kg}), w.offset());
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  T* op = out.data<T>();
  const bool batched = batched_gemms(g);
  const double beta = bp != nullptr ? 1.0 : 0.0;  // outputs start at the bias (out[n, o, :] = bias[o])
  if (!batched && bp != nullptr) fill_bias_rows(op, g.N * g.O, g.L, bp, g.O);
  const int64_t chunk = g.direct ? g.N : g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk, batched);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    if (!g.direct) im2col_chunk(x.data<T>(), g, n0, nb, ChunkLayout(g, nb, batched), buf.col.data());
    if (batched) {  // planes (O, nb, L) -> out (nb, O, L)
      if (bp != nullptr) fill_bias_rows(buf.planes.data(), g.O, nb * g.L, bp, g.O);
      gemm(w3, col_view(buf, g, nb), planes_view(buf, g, nb), false, false, 1.0, beta);
      swap_outer(buf.planes.data(), g.O, nb, g.L, op + n0 * g.O * g.L);
      continue;
    }
    parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {  // one image per task, its GEMM single-threaded
      for (int64_t i = i0; i < i1; ++i)
        gemm(w3, g.direct ? image_view(x, n0 + i, g.G, g.Kg, g.L) : image_block(buf, g, i),
             image_view(out, n0 + i, g.G, g.Og, g.L), false, false, 1.0, beta);
    });
  }
}

template <typename T>
void backward_input_impl(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx) {
  const Geometry g(gx.sizes(), w.sizes(), gout.sizes(), p);
  const Tensor w3 = as_strided_raw(w, {g.G, g.Og, g.Kg}, contiguous_strides({g.G, g.Og, g.Kg}), w.offset());
  if (g.direct) {
    // gx_n (G, Cg, L) = w^T (G, Cg, Og) @ gout_n (G, Og, L), written in place, one image per task.
    parallel_for(0, g.N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        gemm(w3, image_view(gout, n, g.G, g.Og, g.L), image_view(gx, n, g.G, g.Kg, g.L), true, false, 1.0, 0.0);
    });
    return;
  }
  const bool batched = batched_gemms(g);
  const int64_t chunk = g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk, batched);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    if (batched) {  // gout (nb, O, L) -> planes (O, nb, L)
      swap_outer(gout.data<T>() + n0 * g.O * g.L, nb, g.O, g.L, buf.planes.data());
      gemm(w3, planes_view(buf, g, nb), col_view(buf, g, nb), true, false, 1.0, 0.0);
    } else {
      parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          gemm(w3, image_view(gout, n0 + i, g.G, g.Og, g.L), image_block(buf, g, i), true, false, 1.0, 0.0);
      });
    }
    col2im_chunk(buf.col.data(), g, n0, nb, ChunkLayout(g, nb, batched), gx.data<T>());
  }
}

template <typename T>
void backward_weight_impl(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw) {
  const Geometry g(x.sizes(), gw.sizes(), gout.sizes(), p);
  const Tensor gw3 = as_strided_raw(gw, {g.G, g.Og, g.Kg}, contiguous_strides({g.G, g.Og, g.Kg}), gw.offset());
  const bool batched = batched_gemms(g);
  const int64_t chunk = g.direct ? g.N : g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk, batched);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    if (!g.direct) im2col_chunk(x.data<T>(), g, n0, nb, ChunkLayout(g, nb, batched), buf.col.data());
    if (batched) {  // gout (nb, O, L) -> planes (O, nb, L)
      swap_outer(gout.data<T>() + n0 * g.O * g.L, nb, g.O, g.L, buf.planes.data());
      gemm(planes_view(buf, g, nb), col_view(buf, g, nb), gw3, false, true, 1.0, n0 == 0 ? 0.0 : 1.0);
      continue;
    }
    for (int64_t i = 0; i < nb; ++i)  // accumulates over the images: the GEMM splits itself over the pool
      gemm(image_view(gout, n0 + i, g.G, g.Og, g.L),
           g.direct ? image_view(x, n0 + i, g.G, g.Kg, g.L) : image_block(buf, g, i), gw3, false, true, 1.0,
           n0 + i == 0 ? 0.0 : 1.0);
  }
}

bool is_half(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

// The front (kernels/conv.cpp) passes the 4-D operands dense in f: debug-only.
void assert_layout(const char* what, MemoryFormat f, std::initializer_list<const Tensor*> ts) {
  for ([[maybe_unused]] const Tensor* t : ts)
    EMBER_DEBUG_ASSERT(t->is_contiguous(f), what, " (cpu): operand ", t->shape_str(), " with strides ",
                       shape_str(t->strides()), " is not dense ", memory_format_name(f));
}

// The fronts (kernels/conv.cpp: conv2d and its backwards, check_pair) refuse non-floating dtypes: debug-only.
void assert_float(const char* what, DType dt) {
  EMBER_DEBUG_ASSERT(is_floating(dt), what, " (cpu): expected a floating dtype (f32, f64, f16, bf16), got ",
                     dtype_name(dt));
}

// f16 / bf16 are computed in f32 (operands widened in their layout) and rounded once at the end.

void conv2d_forward_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                        MemoryFormat f) {
  assert_float("conv2d", x.dtype());
  assert_layout("conv2d", f, {&x, &w, &out});
  if (is_half(x.dtype())) {
    const Tensor of = empty(out.sizes(), {.dtype = DType::f32}, f);
    conv2d_forward_cpu(cast(x, DType::f32, f), cast(w, DType::f32, f),
                       bias.defined() ? cast(bias, DType::f32) : Tensor(), p, of, f);
    return copy(out, of);
  }
  if (winograd_applies(Geometry(x.sizes(), w.sizes(), out.sizes(), p), x.dtype(), WinogradPass::forward))
    return winograd_forward(x, w, bias, p, out, f);
  if (f == MemoryFormat::channels_last) return forward_nhwc(x, w, bias, p, out);
  if (x.dtype() == DType::f64) return forward_impl<double>(x, w, bias, p, out);
  forward_impl<float>(x, w, bias, p, out);
}

void conv2d_backward_input_cpu(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx,
                               MemoryFormat f) {
  assert_float("conv2d_backward_input", w.dtype());
  assert_layout("conv2d_backward_input", f, {&gout, &w, &gx});
  if (is_half(w.dtype())) {
    const Tensor gf = empty(gx.sizes(), {.dtype = DType::f32}, f);
    conv2d_backward_input_cpu(cast(gout, DType::f32, f), cast(w, DType::f32, f), p, gf, f);
    return copy(gx, gf);
  }
  if (winograd_applies(Geometry(gx.sizes(), w.sizes(), gout.sizes(), p), w.dtype(), WinogradPass::backward_input))
    return winograd_backward_input(gout, w, p, gx, f);
  if (f == MemoryFormat::channels_last) return backward_input_nhwc(gout, w, p, gx);
  if (w.dtype() == DType::f64) return backward_input_impl<double>(gout, w, p, gx);
  backward_input_impl<float>(gout, w, p, gx);
}

void conv2d_backward_weight_cpu(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw,
                                MemoryFormat f) {
  assert_float("conv2d_backward_weight", x.dtype());
  assert_layout("conv2d_backward_weight", f, {&gout, &x, &gw});
  if (is_half(x.dtype())) {
    const Tensor gf = empty(gw.sizes(), {.dtype = DType::f32}, f);
    conv2d_backward_weight_cpu(cast(gout, DType::f32, f), cast(x, DType::f32, f), p, gf, f);
    return copy(gw, gf);
  }
  if (winograd_applies(Geometry(x.sizes(), gw.sizes(), gout.sizes(), p), x.dtype(), WinogradPass::backward_weight))
    return winograd_backward_weight(gout, x, p, gw, f);
  if (f == MemoryFormat::channels_last) return backward_weight_nhwc(gout, x, p, gw);
  if (x.dtype() == DType::f64) return backward_weight_impl<double>(gout, x, p, gw);
  backward_weight_impl<float>(gout, x, p, gw);
}

}  // namespace

void register_conv() {
  conv2d_forward_table.set(DeviceType::CPU, &conv2d_forward_cpu);
  conv2d_backward_input_table.set(DeviceType::CPU, &conv2d_backward_input_cpu);
  conv2d_backward_weight_table.set(DeviceType::CPU, &conv2d_backward_weight_cpu);
}

}  // namespace ember::kernels::cpu
