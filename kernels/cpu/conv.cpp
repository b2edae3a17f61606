// CPU 2-D convolution: im2col + GEMM, with groups, stride, padding and dilation. Row-major (NCHW)
// operands here; channels-last ones (groups == 1) in kernels/cpu/conv_nhwc.cpp.
//
// Why it is shaped like this: the GEMMs carry nearly all the FLOPs. The forward and input-gradient
// GEMMs run one image per pool task (each GEMM single-threaded inside its task), straight into the
// output (no transpose pass); the weight gradient accumulates over the images, so its GEMMs are
// issued from the calling thread one image at a time and split over the pool by the GEMM itself
// (kernels/cpu/matmul.cpp). What the GEMM cannot parallelize (im2col, col2im, the bias fill) runs
// on the thread pool over (image, channel) pairs. Images go through in chunks whose column buffer
// stays near kChunkBytes, so the buffer is reused while warm in cache and is never a batch-sized
// allocation; it is kept per thread across calls because fresh allocations are page-faulted in
// again on every call (see docs/benchmarks.md).
//
// Layouts (all contiguous, groups G, Cg = C / G, Og = O / G, L = Ho * Wo, Kg = Cg * kh * kw):
//   x (N, C, H, W) = N images of (G, Cg, H, W); w (O, Cg, kh, kw) = (G, Og, Kg);
//   out (N, O, Ho, Wo) = N images of (G, Og, L); the column buffer of one image is (G, Kg, L) with
//   row (c, ki, kj) holding x[c, oh * sh - ph + ki * dh, ow * sw - pw + kj * dw] (0 outside).
// Forward:         out_n (G, Og, L)  = w (G, Og, Kg) @ col_n (G, Kg, L)  [+ bias]
// Backward input:  gcol_n (G, Kg, L) = w^T (G, Kg, Og) @ gout_n (G, Og, L), then col2im (adds)
// Backward weight: gw (G, Og, Kg)   += gout_n (G, Og, L) @ col_n^T (G, L, Kg), over every n
// A 1x1 kernel with stride 1 and no padding uses x itself as the column buffer.
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
#include <ember/kernels/matmul.h>

namespace ember::kernels::cpu {
namespace {

using namespace conv_detail;

/// The (G, rows, cols) view of image n of a contiguous (N, G * rows, ...) tensor.
Tensor image_view(const Tensor& t, int64_t n, int64_t G, int64_t rows, int64_t cols) {
  const Shape s{G, rows, cols};
  return as_strided_raw(t, s, contiguous_strides(s), t.offset() + n * G * rows * cols);
}

/// The kh * kw rows (each L long) of one input channel plane x (H, W) in the column buffer.
template <typename T> void im2col_channel(const T* x, const Geometry& g, T* col) {
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      T* row = col + (ki * g.kw + kj) * g.L;
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

/// Adds the kh * kw column rows of one channel back into its plane gx (H, W) (overwritten first).
template <typename T> void col2im_channel(const T* col, const Geometry& g, T* gx) {
  std::fill(gx, gx + g.H * g.W, T(0));
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const T* row = col + (ki * g.kw + kj) * g.L;
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

/// im2col of images [n0, n0 + nb) of x into col (nb, C * kh * kw, L), parallel over (image, channel).
template <typename T> void im2col_chunk(const T* x, const Geometry& g, int64_t n0, int64_t nb, T* col) {
  const int64_t per = g.kh * g.kw * g.L;
  parallel_for(0, nb * g.C, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per, 1)), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t i = u / g.C, c = u % g.C;
      im2col_channel(x + ((n0 + i) * g.C + c) * g.H * g.W, g, col + u * per);
    }
  });
}

template <typename T>
void forward_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  const Geometry g(x.sizes(), w.sizes(), out.sizes(), p);
  const Tensor w3 = as_strided_raw(w, {g.G, g.Og, g.Kg}, contiguous_strides({g.G, g.Og, g.Kg}), w.offset());
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  if (bias.defined()) {
    // out[n, o, :] = bias[o]; the GEMMs then accumulate onto it (beta = 1).
    const T* bp = bias.data<T>();
    parallel_for(0, g.N * g.O, std::max<int64_t>(1, kGrainElems / g.L), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::fill(op + r * g.L, op + (r + 1) * g.L, bp[r % g.O]);
    });
  }
  const double beta = bias.defined() ? 1.0 : 0.0;
  const int64_t chunk = g.chunk(sizeof(T));
  const ColumnBuffer<T> buf(g.direct ? 0 : chunk * g.col_per_image());
  T* col = buf.data();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    Tensor colt;
    if (!g.direct) {
      im2col_chunk(xp, g, n0, nb, col);
      colt = wrap(col, {nb * g.G, g.Kg, g.L});
    }
    // One image per task, its GEMM single-threaded inside it (each writes its own output).
    parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const Tensor ci = g.direct ? image_view(x, n0 + i, g.G, g.Kg, g.L) : image_view(colt, i, g.G, g.Kg, g.L);
        gemm(w3, ci, image_view(out, n0 + i, g.G, g.Og, g.L), false, false, 1.0, beta);
      }
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
  const int64_t chunk = g.chunk(sizeof(T));
  const ColumnBuffer<T> buf(chunk * g.col_per_image());
  T* col = buf.data();
  T* gxp = gx.data<T>();
  const int64_t per = g.kh * g.kw * g.L;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const Tensor colt = wrap(col, {nb * g.G, g.Kg, g.L});
    parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        gemm(w3, image_view(gout, n0 + i, g.G, g.Og, g.L), image_view(colt, i, g.G, g.Kg, g.L), true, false, 1.0, 0.0);
    });
    parallel_for(0, nb * g.C, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per, 1)),
                 [&](int64_t u0, int64_t u1) {
                   for (int64_t u = u0; u < u1; ++u) {
                     const int64_t i = u / g.C, c = u % g.C;
                     col2im_channel(col + u * per, g, gxp + ((n0 + i) * g.C + c) * g.H * g.W);
                   }
                 });
  }
}

template <typename T>
void backward_weight_impl(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw) {
  const Geometry g(x.sizes(), gw.sizes(), gout.sizes(), p);
  const Tensor gw3 = as_strided_raw(gw, {g.G, g.Og, g.Kg}, contiguous_strides({g.G, g.Og, g.Kg}), gw.offset());
  const int64_t chunk = g.chunk(sizeof(T));
  const ColumnBuffer<T> buf(g.direct ? 0 : chunk * g.col_per_image());
  T* col = buf.data();
  const T* xp = x.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    Tensor colt;
    if (!g.direct) {
      im2col_chunk(xp, g, n0, nb, col);
      colt = wrap(col, {nb * g.G, g.Kg, g.L});
    }
    for (int64_t i = 0; i < nb; ++i) {
      const Tensor ci = g.direct ? image_view(x, n0 + i, g.G, g.Kg, g.L) : image_view(colt, i, g.G, g.Kg, g.L);
      gemm(image_view(gout, n0 + i, g.G, g.Og, g.L), ci, gw3, false, true, 1.0, n0 + i == 0 ? 0.0 : 1.0);
    }
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
