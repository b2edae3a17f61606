// CPU 2-D convolution on channels-last (NHWC) operands, groups == 1: im2col + GEMM as the NCHW
// kernels (kernels/cpu/conv.cpp), with the column buffer transposed so that no layout change is
// needed anywhere.
//
// Layouts (all dense channels-last, L = Ho * Wo, K = kh * kw * C):
//   x (N, C, H, W) in memory (N, H, W, C): image n is (H * W, C) row-major;
//   w (O, C, kh, kw) in memory (O, kh, kw, C): the (O, K) matrix with k = (ki, kj, c);
//   out in memory (N, Ho, Wo, O): image n is (L, O) row-major;
//   the column buffer of one image is (L, K): row (oh, ow) holds, for each (ki, kj), the C values
//   of x at (oh * sh - ph + ki * dh, ow * sw - pw + kj * dw) (0 outside): one memcpy each.
// The images of a chunk are consecutive rows of x, out and the column buffer, so each direction is
// ONE GEMM per chunk of nb images (M = nb * L rows), not one per image: the weight is packed once
// per chunk, and the small late-stage planes (L = 16 for ResNet-18's 4x4 layer) still make a
// GEMM of useful height.
// Forward:         out (nb*L, O)  = col (nb*L, K) @ w^T (K, O)  [+ bias]
// Backward input:  gcol (nb*L, K) = gout (nb*L, O) @ w (O, K), then col2im (adds C-vectors)
// Backward weight: gw (O, K)     += gout^T (O, nb*L) @ col (nb*L, K), over every chunk
// A 1x1 kernel with stride 1 and no padding uses x itself as the column buffer. Threading: the
// GEMMs split themselves over the pool (kernels/cpu/matmul.cpp), im2col runs over (image, output
// row), col2im over images (overlapping windows stay in one task).
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

/// One output row oh of image x (H, W, C) into col rows [oh * Wo, (oh + 1) * Wo), each K long.
template <typename T> void im2col_row(const T* x, const Geometry& g, int64_t oh, T* col) {
  const int64_t K = g.kh * g.kw * g.C;
  for (int64_t ow = 0; ow < g.Wo; ++ow) {
    T* d = col + (oh * g.Wo + ow) * K;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
      for (int64_t kj = 0; kj < g.kw; ++kj, d += g.C) {
        const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) std::fill(d, d + g.C, T(0));
        else std::memcpy(d, x + (ih * g.W + iw) * g.C, static_cast<size_t>(g.C) * sizeof(T));
      }
    }
  }
}

/// gx (H, W, C) of one image = the sum of its column rows' C-vectors at their positions.
template <typename T> void col2im_image(const T* col, const Geometry& g, T* gx) {
  std::fill(gx, gx + g.H * g.W * g.C, T(0));
  const T* s = col;
  for (int64_t oh = 0; oh < g.Ho; ++oh) {
    for (int64_t ow = 0; ow < g.Wo; ++ow) {
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        for (int64_t kj = 0; kj < g.kw; ++kj, s += g.C) {
          const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
          T* d = gx + (ih * g.W + iw) * g.C;
          for (int64_t c = 0; c < g.C; ++c) d[c] += s[c];
        }
      }
    }
  }
}

/// im2col of images [n0, n0 + nb) into col (nb, L, K), parallel over (image, output row).
template <typename T> void im2col_chunk(const T* x, const Geometry& g, int64_t n0, int64_t nb, T* col) {
  const int64_t per_row = g.Wo * g.kh * g.kw * g.C;
  parallel_for(0, nb * g.Ho, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(per_row, 1)),
               [&](int64_t u0, int64_t u1) {
                 for (int64_t u = u0; u < u1; ++u) {
                   const int64_t i = u / g.Ho, oh = u % g.Ho;
                   im2col_row(x + (n0 + i) * g.H * g.W * g.C, g, oh, col + i * g.col_per_image());
                 }
               });
}

/// Walks the images of x in chunks whose column buffer stays near kChunkBytes: fn(n0, nb, cols)
/// per chunk, with cols the (1, nb * L, K) column matrix of images [n0, n0 + nb) (x's own rows
/// when the convolution is direct).
template <typename T, typename F> void for_column_chunks(const Tensor& x, const Geometry& g, F&& fn) {
  const int64_t chunk = g.chunk(sizeof(T));
  const ColumnBuffer<T> buf(g.direct ? 0 : chunk * g.col_per_image());
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    if (g.direct) {
      fn(n0, nb, image_rows(x, n0, nb, g.L, g.C));
    } else {
      im2col_chunk(x.data<T>(), g, n0, nb, buf.data());
      fn(n0, nb, wrap(buf.data(), {1, nb * g.L, g.Kg}));
    }
  }
}

/// w (O, C, kh, kw), dense channels-last, as the (1, O, K) matrix.
Tensor weight_matrix(const Tensor& w, const Geometry& g) {
  const Shape s{1, g.O, g.Kg};
  return as_strided_raw(w, s, contiguous_strides(s), w.offset());
}

template <typename T>
void forward_typed(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  const Geometry g(x.sizes(), w.sizes(), out.sizes(), p);
  const Tensor wm = weight_matrix(w, g);
  T* op = out.data<T>();
  if (bias.defined()) {  // every output position starts at the bias; the GEMMs add onto it
    const T* bp = bias.data<T>();
    parallel_for(0, g.N * g.L, std::max<int64_t>(1, kGrainElems / g.O), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + g.O, op + r * g.O);
    });
  }
  const double beta = bias.defined() ? 1.0 : 0.0;
  for_column_chunks<T>(x, g, [&](int64_t n0, int64_t nb, const Tensor& cols) {
    gemm(cols, wm, image_rows(out, n0, nb, g.L, g.O), false, true, 1.0, beta);
  });
}

template <typename T>
void backward_input_typed(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx) {
  const Geometry g(gx.sizes(), w.sizes(), gout.sizes(), p);
  const Tensor wm = weight_matrix(w, g);
  if (g.direct) {  // gx (N*L, C) = gout (N*L, O) @ w (O, C), in place
    gemm(image_rows(gout, 0, g.N, g.L, g.O), wm, image_rows(gx, 0, g.N, g.L, g.C), false, false, 1.0, 0.0);
    return;
  }
  const int64_t chunk = g.chunk(sizeof(T));
  const ColumnBuffer<T> buf(chunk * g.col_per_image());
  T* gxp = gx.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    gemm(image_rows(gout, n0, nb, g.L, g.O), wm, wrap(buf.data(), {1, nb * g.L, g.Kg}), false, false, 1.0, 0.0);
    parallel_for(0, nb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        col2im_image(buf.data() + i * g.col_per_image(), g, gxp + (n0 + i) * g.H * g.W * g.C);
    });
  }
}

template <typename T>
void backward_weight_typed(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw) {
  const Geometry g(x.sizes(), gw.sizes(), gout.sizes(), p);
  const Tensor gwm = weight_matrix(gw, g);
  for_column_chunks<T>(x, g, [&](int64_t n0, int64_t nb, const Tensor& cols) {
    gemm(image_rows(gout, n0, nb, g.L, g.O), cols, gwm, true, false, 1.0, n0 == 0 ? 0.0 : 1.0);
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
