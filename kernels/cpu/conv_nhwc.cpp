// CPU 2-D convolution on channels-last (NHWC) operands: im2col + GEMM as the NCHW kernels
// (kernels/cpu/conv.cpp), with the column buffer transposed so that no layout change is needed
// anywhere.
//
// Layouts (all dense channels-last, groups G, Cg = C / G, Og = O / G, L = Ho * Wo,
// Kg = kh * kw * Cg):
//   x (N, C, H, W) in memory (N, H, W, C): image n is (H * W, C) row-major;
//   w (O, Cg, kh, kw) in memory (O, kh, kw, Cg): the (G, Og, Kg) matrices with k = (ki, kj, c);
//   out in memory (N, Ho, Wo, O): image n is (L, O) row-major;
//   the column buffer of a chunk of nb images is (G, nb * L, Kg): row (n, oh, ow) of group g holds,
//   for each (ki, kj), the Cg values of group g's channels of x at (oh * sh - ph + ki * dh,
//   ow * sw - pw + kj * dw) (0 outside): one memcpy each.
// The images of a chunk are consecutive rows of x, out and the column buffer, so each direction is
// ONE GEMM per group per chunk of nb images (M = nb * L rows), not one per image: the weight is
// packed once per chunk, and the small late-stage planes (L = 16 for ResNet-18's 4x4 layer) still
// make a GEMM of useful height.
// Forward:         out (nb*L, O)   = col (nb*L, K) @ w^T (K, O)  [+ bias]                  (G == 1)
//                  planes (G, nb*L, Og) = col (G, nb*L, Kg) @ w^T (G, Kg, Og), scattered to
//                  out's (nb*L, O) columns [g * Og, (g + 1) * Og) [+ bias]                  (G > 1)
// Backward input:  gcol = gout (nb*L, O), or its group columns gathered into planes, @ w, then
//                  col2im (adds Cg-vectors)
// Backward weight: gw (G, Og, Kg) += gout^T (or planes^T) @ col, over every chunk
// A 1x1 kernel with stride 1, no padding and one group uses x itself as the column buffer.
// Threading: the GEMMs split themselves over the pool (kernels/cpu/matmul.cpp), im2col runs over
// (image, output row), col2im over images (overlapping windows stay in one task), the copies over
// rows.
#include <algorithm>
#include <cstring>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/conv_common.h>
#include <ember/kernels/matmul.h>

namespace ember::kernels::cpu::conv_detail {
namespace {

/// The (1, nb * rows, cols) view of images [n, n + nb) of a dense (N, ...) tensor of rows * cols
/// per image.
Tensor image_rows(const Tensor& t, int64_t n, int64_t nb, int64_t rows, int64_t cols) {
  const Shape s{1, nb * rows, cols};
  return as_strided_raw(t, s, contiguous_strides(s), t.offset() + n * rows * cols);
}

bool direct_columns(const Geometry& g) { return g.direct && g.G == 1; }

/// One output row oh of image x (H, W, C) into the column buffer: group grp's row (oh, ow) at
/// col + grp * group_stride + (oh * Wo + ow) * Kg.
template <typename T> void im2col_row(const T* x, const Geometry& g, int64_t oh, T* col, int64_t group_stride) {
  for (int64_t grp = 0; grp < g.G; ++grp) {
    const T* xg = x + grp * g.Cg;
    for (int64_t ow = 0; ow < g.Wo; ++ow) {
      T* d = col + grp * group_stride + (oh * g.Wo + ow) * g.Kg;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        for (int64_t kj = 0; kj < g.kw; ++kj, d += g.Cg) {
          const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) std::fill(d, d + g.Cg, T(0));
          else std::memcpy(d, xg + (ih * g.W + iw) * g.C, static_cast<size_t>(g.Cg) * sizeof(T));
        }
      }
    }
  }
}

/// gx (H, W, C) of one image = the sum of its column rows' Cg-vectors at their positions; the
/// image's rows of group grp start at col + grp * group_stride.
template <typename T> void col2im_image(const T* col, const Geometry& g, int64_t group_stride, T* gx) {
  std::fill(gx, gx + g.H * g.W * g.C, T(0));
  for (int64_t grp = 0; grp < g.G; ++grp) {
    const T* s = col + grp * group_stride;
    T* gxg = gx + grp * g.Cg;
    for (int64_t oh = 0; oh < g.Ho; ++oh) {
      for (int64_t ow = 0; ow < g.Wo; ++ow) {
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          for (int64_t kj = 0; kj < g.kw; ++kj, s += g.Cg) {
            const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
            if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
            T* d = gxg + (ih * g.W + iw) * g.C;
            for (int64_t c = 0; c < g.Cg; ++c) d[c] += s[c];
          }
        }
      }
    }
  }
}

/// im2col of images [n0, n0 + nb) into col (G, nb * L, Kg), parallel over (image, output row).
template <typename T> void im2col_chunk(const T* x, const Geometry& g, int64_t n0, int64_t nb, T* col) {
  const int64_t per_row = g.Wo * g.kh * g.kw * g.C, group_stride = nb * g.L * g.Kg;
  parallel_for(0, nb * g.Ho, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per_row, 1)),
               [&](int64_t u0, int64_t u1) {
                 for (int64_t u = u0; u < u1; ++u) {
                   const int64_t i = u / g.Ho, oh = u % g.Ho;
                   im2col_row(x + (n0 + i) * g.H * g.W * g.C, g, oh, col + i * g.L * g.Kg, group_stride);
                 }
               });
}

/// The chunk's buffers: the column buffer (G, nb * L, Kg) (none when x is its own), and with groups
/// the planes (G, nb * L, Og) the GEMMs write or read.
template <typename T> ChunkBuffers<T> chunk_buffers(const Geometry& g, int64_t chunk) {
  return ChunkBuffers<T>(direct_columns(g) ? 0 : chunk * g.col_per_image(), g.G > 1 ? chunk * g.L * g.O : 0);
}

/// dst (groups, rows, width) with row (grp, r) = bias[grp * width, (grp + 1) * width): the outputs
/// (rows (N * L, O) for one group, the planes with groups) start at the bias; the GEMMs add onto it.
template <typename T> void fill_bias_blocks(T* dst, int64_t groups, int64_t rows, int64_t width, const T* bias) {
  parallel_for(0, groups * rows, std::max<int64_t>(1, kGrainElems / width), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const T* b = bias + (u / rows) * width;
      std::copy(b, b + width, dst + u * width);
    }
  });
}

/// Walks the images of x in chunks whose column buffer stays near kChunkBytes: fn(n0, nb, cols)
/// per chunk, with cols the (G, nb * L, Kg) column matrices of images [n0, n0 + nb) (x's own
/// rows when the convolution is direct).
template <typename T, typename F>
void for_column_chunks(const Tensor& x, const Geometry& g, const ChunkBuffers<T>& buf, int64_t chunk, F&& fn) {
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    if (direct_columns(g)) {
      fn(n0, nb, image_rows(x, n0, nb, g.L, g.C));
    } else {
      im2col_chunk(x.data<T>(), g, n0, nb, buf.col.data());
      fn(n0, nb, wrap(buf.col.data(), {g.G, nb * g.L, g.Kg}));
    }
  }
}

/// w (O, Cg, kh, kw), dense channels-last, as the (G, Og, Kg) matrices.
Tensor weight_matrices(const Tensor& w, const Geometry& g) {
  const Shape s{g.G, g.Og, g.Kg};
  return as_strided_raw(w, s, contiguous_strides(s), w.offset());
}

template <typename T>
void forward_typed(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  const Geometry g(x.sizes(), w.sizes(), out.sizes(), p);
  const Tensor wm = weight_matrices(w, g);
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  T* op = out.data<T>();
  const int64_t chunk = g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk);
  const double beta = bp != nullptr ? 1.0 : 0.0;
  if (g.G == 1 && bp != nullptr) fill_bias_blocks(op, 1, g.N * g.L, g.O, bp);
  for_column_chunks<T>(x, g, buf, chunk, [&](int64_t n0, int64_t nb, const Tensor& cols) {
    if (g.G == 1) return gemm(cols, wm, image_rows(out, n0, nb, g.L, g.O), false, true, 1.0, beta);
    // planes (G, nb * L, Og) -> the rows' (nb * L, G, Og)
    if (bp != nullptr) fill_bias_blocks(buf.planes.data(), g.G, nb * g.L, g.Og, bp);
    gemm(cols, wm, wrap(buf.planes.data(), {g.G, nb * g.L, g.Og}), false, true, 1.0, beta);
    swap_outer(buf.planes.data(), g.G, nb * g.L, g.Og, op + n0 * g.L * g.O);
  });
}

template <typename T>
void backward_input_typed(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx) {
  const Geometry g(gx.sizes(), w.sizes(), gout.sizes(), p);
  const Tensor wm = weight_matrices(w, g);
  if (direct_columns(g)) {  // gx (N*L, C) = gout (N*L, O) @ w (O, C), in place
    gemm(image_rows(gout, 0, g.N, g.L, g.O), wm, image_rows(gx, 0, g.N, g.L, g.C), false, false, 1.0, 0.0);
    return;
  }
  const int64_t chunk = g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk);
  T* gxp = gx.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), group_stride = nb * g.L * g.Kg;
    Tensor gin = image_rows(gout, n0, nb, g.L, g.O);
    if (g.G > 1) {  // the rows' (nb * L, G, Og) -> planes (G, nb * L, Og)
      swap_outer(gout.data<T>() + n0 * g.L * g.O, nb * g.L, g.G, g.Og, buf.planes.data());
      gin = wrap(buf.planes.data(), {g.G, nb * g.L, g.Og});
    }
    gemm(gin, wm, wrap(buf.col.data(), {g.G, nb * g.L, g.Kg}), false, false, 1.0, 0.0);
    parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        col2im_image(buf.col.data() + i * g.L * g.Kg, g, group_stride, gxp + (n0 + i) * g.H * g.W * g.C);
    });
  }
}

template <typename T>
void backward_weight_typed(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw) {
  const Geometry g(x.sizes(), gw.sizes(), gout.sizes(), p);
  const Tensor gwm = weight_matrices(gw, g);
  const int64_t chunk = g.chunk(sizeof(T));
  const ChunkBuffers<T> buf = chunk_buffers<T>(g, chunk);
  for_column_chunks<T>(x, g, buf, chunk, [&](int64_t n0, int64_t nb, const Tensor& cols) {
    Tensor gin = image_rows(gout, n0, nb, g.L, g.O);
    if (g.G > 1) {  // the rows' (nb * L, G, Og) -> planes (G, nb * L, Og)
      swap_outer(gout.data<T>() + n0 * g.L * g.O, nb * g.L, g.G, g.Og, buf.planes.data());
      gin = wrap(buf.planes.data(), {g.G, nb * g.L, g.Og});
    }
    gemm(gin, cols, gwm, true, false, 1.0, n0 == 0 ? 0.0 : 1.0);
  });
}

}  // namespace

void forward_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  if (x.dtype() == DType::f64) forward_typed<double>(x, w, bias, p, out);
  else forward_typed<float>(x, w, bias, p, out);
}

void backward_input_nhwc(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx) {
  if (w.dtype() == DType::f64) backward_input_typed<double>(gout, w, p, gx);
  else backward_input_typed<float>(gout, w, p, gx);
}

void backward_weight_nhwc(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw) {
  if (x.dtype() == DType::f64) backward_weight_typed<double>(gout, x, p, gw);
  else backward_weight_typed<float>(gout, x, p, gw);
}

}  // namespace ember::kernels::cpu::conv_detail
