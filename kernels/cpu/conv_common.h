#pragma once
// What the CPU convolution's two layouts share (kernels/cpu/conv.cpp: NCHW, conv_nhwc.cpp:
// channels-last): the geometry of a call, the per-thread buffers, the copy between an output's
// layout and a batched GEMM's planes, and the valid-column range.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/core/thread_pool.h>
#include <ember/kernels/conv.h>

namespace ember::kernels::cpu::conv_detail {

constexpr int64_t kChunkBytes = int64_t{4} << 20;  // target size of one chunk's column buffer
constexpr int64_t kGrainElems = int64_t{1} << 14;  // min elements per parallel_for chunk

struct Geometry {
  int64_t N, C, H, W;  // input
  int64_t O, kh, kw;  // weight (O, C / G, kh, kw)
  int64_t Ho, Wo, L;  // output plane, L = Ho * Wo
  int64_t G, Cg, Og, Kg;  // groups
  int64_t sh, sw, ph, pw, dh, dw;
  bool direct;  // 1x1, stride 1, no padding: the column buffer is x itself

  Geometry(const Shape& xs, const Shape& ws, const Shape& os, const Conv2dParams& p)
      : N(xs[0]),
        C(xs[1]),
        H(xs[2]),
        W(xs[3]),
        O(ws[0]),
        kh(ws[2]),
        kw(ws[3]),
        Ho(os[2]),
        Wo(os[3]),
        L(os[2] * os[3]),
        G(p.groups),
        Cg(xs[1] / p.groups),
        Og(ws[0] / p.groups),
        Kg(ws[1] * ws[2] * ws[3]),
        sh(p.stride_h),
        sw(p.stride_w),
        ph(p.pad_h),
        pw(p.pad_w),
        dh(p.dilation_h),
        dw(p.dilation_w),
        direct(ws[2] == 1 && ws[3] == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0) {}

  int64_t col_per_image() const { return C * kh * kw * L; }  // = G * Kg * L
  /// Images per chunk: as many as fit kChunkBytes, at least one.
  int64_t chunk(size_t elem) const {
    const int64_t per = std::max<int64_t>(col_per_image() * static_cast<int64_t>(elem), 1);
    return std::clamp<int64_t>(kChunkBytes / per, 1, std::max<int64_t>(N, 1));
  }
};

/// The column buffer: a per-thread buffer that only grows, reused across calls so it stays mapped
/// (and warm); a request above kMaxRetainedBytes (huge images, where one image is a chunk) gets a
/// buffer of its own instead, freed on return, so no thread keeps hundreds of MiB alive. Buffers
/// alive at the same time on one thread take different Slots (each Slot is a buffer of its own).
constexpr int64_t kMaxRetainedBytes = int64_t{64} << 20;
template <typename T, int Slot = 0> class ColumnBuffer {
 public:
  explicit ColumnBuffer(int64_t n) {
    thread_local std::vector<T> retained;
    std::vector<T>* buf = n * static_cast<int64_t>(sizeof(T)) > kMaxRetainedBytes ? &own_ : &retained;
    if (static_cast<int64_t>(buf->size()) < n) {
      buf->clear();
      buf->shrink_to_fit();
      buf->resize(static_cast<size_t>(n));
    }
    data_ = buf->data();
  }
  ColumnBuffer(const ColumnBuffer&) = delete;
  ColumnBuffer& operator=(const ColumnBuffer&) = delete;
  T* data() const { return data_; }

 private:
  std::vector<T> own_;
  T* data_ = nullptr;
};

/// A chunk's two buffers: the column buffer and the planes a batched GEMM writes or reads (either
/// may be empty).
template <typename T> struct ChunkBuffers {
  ChunkBuffers(int64_t col_elems, int64_t plane_elems) : col(col_elems), planes(plane_elems) {}
  ColumnBuffer<T, 0> col;
  ColumnBuffer<T, 1> planes;
};

/// dst (b, a, block) = src (a, b, block) with the two outer dims swapped, block by block, on the
/// pool: how a batched GEMM's planes and an output's own layout are copied into each other.
template <typename T> void swap_outer(const T* src, int64_t a, int64_t b, int64_t block, T* dst) {
  parallel_for(0, a * b, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(block, 1)), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t i = u / b, j = u % b;
      std::copy(src + u * block, src + (u + 1) * block, dst + (j * a + i) * block);
    }
  });
}

/// A contiguous tensor over memory owned elsewhere (the column buffer); the caller keeps it alive.
template <typename T> Tensor wrap(T* p, const Shape& sizes) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      Storage(DataPtr(p, nullptr, nullptr), static_cast<size_t>(numel_of(sizes)) * sizeof(T), Device::cpu());
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype_of<T>();
  return Tensor(std::move(impl));
}

/// Range [lo, hi) of output columns ow whose input column ow * sw + off lies in [0, W).
inline void valid_range(int64_t off, int64_t sw, int64_t W, int64_t Wo, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
  hi = W - off <= 0 ? 0 : std::min<int64_t>(Wo, (W - off + sw - 1) / sw);
  lo = std::min(lo, Wo);
  hi = std::max(hi, lo);
}

/// Channels-last convolution, any groups, f32 or f64 (operands dense in channels-last; the
/// dispatchers in conv.cpp choose it and widen f16 / bf16). Same contracts as the NCHW ones.
void forward_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out);
void backward_input_nhwc(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx);
void backward_weight_nhwc(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw);

}  // namespace ember::kernels::cpu::conv_detail
