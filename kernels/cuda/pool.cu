// CUDA 2-D pooling (dense NCHW or NHWC operands): max with arg-max indices and its backward,
// average and its backward, adaptive average and its backward. Same windows, same NaN rule and same
// index convention as the CPU twin (kernels/cpu/pool.cpp): index = h * W + w inside the (H, W) plane.
//
// Why the kernels are shaped this way:
//  * Pooling windows are tiny and every output reads its own window, so the forwards run one
//    thread per output element over a grid-stride loop with a capped grid; reads of neighbouring
//    threads overlap in cache. Sums and comparisons run in f32 (f64 for f64).
//  * The average backwards gather instead of scatter: one thread per input element sums the
//    gradients of the (few) output windows that cover it, so they need no atomics, no zero fill,
//    and give the same result on every run.
//  * The max backward only gets the arg-max indices (no window geometry), so it scatters: grad_x
//    is zeroed, then one thread per output element atomicAdds its gradient at its index.
//    Overlapping windows may pick the same position; the atomics accumulate those (f16/bf16 add
//    in their own precision, as the hardware atomics do), in whatever order they land: with three or
//    more windows on one position (3x3 windows, stride 2) the sums differ from run to run. Under
//    ember::set_deterministic(true) the backward takes det_scatter.cuh's sorted scatter-add instead
//    (the gradients of one position add in grad_out's memory order). The indices come from max_pool2d; one
//    outside its plane is skipped rather than written (a check would need a stream sync per step).
//  * Threads take elements in memory order (a Layout4 says which): for NHWC, neighbouring threads
//    are neighbouring channels of one position, so every load and store of a warp is coalesced.
//  * Index math is 32-bit (with the hardware's 32-bit division) when every tensor has fewer than
//    2^31 elements, 64-bit otherwise: a 64-bit division is a long software routine on the GPU,
//    and these kernels do several per element.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <ember/core/determinism.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/pool.h>
#include <ember/kernels/cuda/atomics.cuh>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/det_scatter.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int64_t kIndex32Limit = int64_t(1) << 31;

template <typename I> __device__ __forceinline__ I imin(I a, I b) { return a < b ? a : b; }
template <typename I> __device__ __forceinline__ I imax(I a, I b) { return a > b ? a : b; }

/// The window of output o along one dim, clipped to [0, in); `padded` counts it against the
/// padded input (count_include_pad). Same rule as pool_window in kernels/cpu/pool.cpp.
template <typename I> struct Window { I start, end, padded; };
template <typename I> __device__ __forceinline__ Window<I> pool_window(I o, I kernel, I stride, I pad, I in) {
  const I s = o * stride - pad;
  const I e = imin(s + kernel, in + pad);
  return {imax(s, I(0)), imin(e, in), e - s};
}
/// Adaptive window of output o: [floor(o * in / out), ceil((o + 1) * in / out)).
template <typename I> __device__ __forceinline__ Window<I> adaptive_window(I o, I out, I in) {
  const I s = (o * in) / out;
  const I e = ((o + 1) * in + out - 1) / out;
  return {s, e, e - s};
}

/// Where element (n, c, h, w) of a dense (N, C, H, W) tensor lives, NCHW or NHWC (channels-last).
template <typename I> struct Layout4 {
  I c, h, w;
  bool nhwc;
  __device__ __forceinline__ I offset(I n, I ci, I hi, I wi) const {
    return nhwc ? ((n * h + hi) * w + wi) * c + ci : ((n * c + ci) * h + hi) * w + wi;
  }
  /// The coordinates of the element at offset i.
  __device__ __forceinline__ void coords(I i, I& n, I& ci, I& hi, I& wi) const {
    if (nhwc) {
      ci = i % c;
      I t = i / c;
      wi = t % w;
      t /= w;
      hi = t % h;
      n = t / h;
    } else {
      wi = i % w;
      I t = i / w;
      hi = t % h;
      t /= h;
      ci = t % c;
      n = t / c;
    }
  }
};

template <typename I> Layout4<I> layout_of(const Tensor& t, MemoryFormat f) {
  return {static_cast<I>(t.size(1)), static_cast<I>(t.size(2)), static_cast<I>(t.size(3)),
          f == MemoryFormat::channels_last};
}

/// Pooling geometry in index type I: planes of (h, w) in, (ho, wo) out.
template <typename I> struct PoolDims {
  I h, w, ho, wo;
  I kh, kw, sh, sw, ph, pw;
  bool include_pad;
};

template <typename I> PoolDims<I> dims_of(const Tensor& in_plane, const Tensor& out_plane, const Pool2dParams& p) {
  return PoolDims<I>{static_cast<I>(in_plane.size(2)),
                     static_cast<I>(in_plane.size(3)),
                     static_cast<I>(out_plane.size(2)),
                     static_cast<I>(out_plane.size(3)),
                     static_cast<I>(p.kernel_h),
                     static_cast<I>(p.kernel_w),
                     static_cast<I>(p.stride_h),
                     static_cast<I>(p.stride_w),
                     static_cast<I>(p.pad_h),
                     static_cast<I>(p.pad_w),
                     p.count_include_pad};
}

/// Grid-stride loop over the elements of a dense tensor laid out as `lay`: calls f(i, n, c, h, w)
/// for each offset i this thread owns.
template <typename I, typename F>
__device__ __forceinline__ void for_each_element(I total, const Layout4<I>& lay, const F& f) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    I n, c, h, w;
    lay.coords(i, n, c, h, w);
    f(i, n, c, h, w);
  }
}

// ---- max ----

/// out/indices (n, c, ho, wo) from x (n, c, h, w), both laid out as their Layout4. First maximum
/// in row-major window order wins; a NaN wins over everything and the first NaN stops the scan (as
/// the CPU twin).
template <typename T, typename I>
__global__ void __launch_bounds__(kBlock)
    max_pool_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ indices, I total, PoolDims<I> d,
                    Layout4<I> xl, Layout4<I> ol) {
  using A = acc_t<T>;
  for_each_element(total, ol, [&](I i, I n, I c, I oh, I ow) {
    const Window<I> wh = pool_window(oh, d.kh, d.sh, d.ph, d.h);
    const Window<I> ww = pool_window(ow, d.kw, d.sw, d.pw, d.w);
    A best = -INFINITY;
    I arg = wh.start * d.w + ww.start;
    bool nan = false;
    for (I ih = wh.start; ih < wh.end && !nan; ++ih) {
      for (I iw = ww.start; iw < ww.end; ++iw) {
        const A v = load_as<A>(x[xl.offset(n, c, ih, iw)]);
        if (v > best || v != v) {
          best = v;
          arg = ih * d.w + iw;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    }
    out[i] = store_as<T>(best);
    indices[i] = static_cast<int64_t>(arg);
  });
}

/// grad_x (n, c, h, w) += grad_out (n, c, ho, wo) scattered to the arg-max indices (grad_x zeroed);
/// grad_out and indices laid out as gl, grad_x as xl.
template <typename T, typename I>
__global__ void __launch_bounds__(kBlock)
    max_pool_backward_kernel(const T* __restrict__ gout, const int64_t* __restrict__ indices, T* __restrict__ gx,
                             I total, Layout4<I> gl, Layout4<I> xl) {
  for_each_element(total, gl, [&](I i, I n, I c, I, I) {
    const int64_t k = indices[i];
    if (k < 0 || k >= static_cast<int64_t>(xl.h) * xl.w) return;  // see the top comment
    const I at = static_cast<I>(k);
    atomic_add(gx + xl.offset(n, c, at / xl.w, at % xl.w), gout[i]);
  });
}

/// Deterministic max backward (det_scatter.cuh): the key of grad_out element i (in memory order) is
/// the offset in grad_x of its arg-max, `skip` for an index outside the plane.
template <typename I, typename Key>
__global__ void __launch_bounds__(kBlock)
    max_pool_backward_keys_kernel(const int64_t* __restrict__ indices, Key* __restrict__ keys, I total, Layout4<I> gl,
                                  Layout4<I> xl, Key skip) {
  for_each_element(total, gl, [&](I i, I n, I c, I, I) {
    const int64_t k = indices[i];
    if (k < 0 || k >= static_cast<int64_t>(xl.h) * xl.w) {
      keys[i] = skip;
      return;
    }
    const I at = static_cast<I>(k);
    keys[i] = static_cast<Key>(xl.offset(n, c, at / xl.w, at % xl.w));
  });
}

// ---- average and adaptive average ----
// The two share their kernels; a window policy says which input window output (oh, ow) averages
// and what it divides by (as in kernels/cpu/pool.cpp): rows(oh) and cols(ow) give the windows,
// count(wh, ww) the divisor, cover_rows(ih) / cover_cols(iw) the outputs whose windows may cover
// an input position, exactly (kExactCover) or a superset the backward filters.

/// First output index whose window (stride s, kernel k, padding p) covers input position x:
/// windows start at o * s - p, so o covers x iff o * s <= x + p < o * s + k.
template <typename I> __device__ __forceinline__ I first_cover(I x, I k, I s, I p) {
  const I xp = x + p;
  return xp < k ? I(0) : (xp - k) / s + 1;
}

/// avg_pool2d's policy over its PoolDims: strided windows, the count with or without the padding.
template <typename I> struct AvgWindows : PoolDims<I> {
  static constexpr bool kExactCover = true;
  __device__ Window<I> rows(I oh) const { return pool_window(oh, this->kh, this->sh, this->ph, this->h); }
  __device__ Window<I> cols(I ow) const { return pool_window(ow, this->kw, this->sw, this->pw, this->w); }
  __device__ I count(Window<I> wh, Window<I> ww) const {
    return this->include_pad ? wh.padded * ww.padded : (wh.end - wh.start) * (ww.end - ww.start);
  }
  __device__ void cover_rows(I ih, I& first, I& last) const {
    first = first_cover(ih, this->kh, this->sh, this->ph);
    last = imin((ih + this->ph) / this->sh + 1, this->ho);
  }
  __device__ void cover_cols(I iw, I& first, I& last) const {
    first = first_cover(iw, this->kw, this->sw, this->pw);
    last = imin((iw + this->pw) / this->sw + 1, this->wo);
  }
};

/// Outputs [first, last) along one dim whose adaptive windows may cover input x; a superset
/// (see adaptive_window: o covers x iff floor(o*in/out) <= x < ceil((o+1)*in/out), which implies
/// floor(x*out/in) <= o < ceil((x+1)*out/in)). The caller filters with the exact window.
template <typename I> __device__ __forceinline__ void adaptive_cover(I x, I in, I out, I& first, I& last) {
  first = (x * out) / in;
  last = imin(((x + 1) * out + in - 1) / in, out);
}

/// adaptive_avg_pool2d's policy: adaptive windows of planes (h, w) -> (ho, wo), count = their size.
template <typename I> struct AdaptiveWindows {
  static constexpr bool kExactCover = false;
  I h, w, ho, wo;
  __device__ Window<I> rows(I oh) const { return adaptive_window(oh, ho, h); }
  __device__ Window<I> cols(I ow) const { return adaptive_window(ow, wo, w); }
  __device__ I count(Window<I> wh, Window<I> ww) const { return wh.padded * ww.padded; }
  __device__ void cover_rows(I ih, I& first, I& last) const { adaptive_cover(ih, h, ho, first, last); }
  __device__ void cover_cols(I iw, I& first, I& last) const { adaptive_cover(iw, w, wo, first, last); }
};

/// out (n, c, ho, wo) = the average of x (n, c, h, w) over each output's window; each laid out as
/// its Layout4.
template <typename T, typename I, typename Windows>
__global__ void __launch_bounds__(kBlock)
    avg_pool_kernel(const T* __restrict__ x, T* __restrict__ out, I total, Windows win, Layout4<I> xl, Layout4<I> ol) {
  using A = acc_t<T>;
  for_each_element(total, ol, [&](I i, I n, I c, I oh, I ow) {
    const Window<I> wh = win.rows(oh);
    const Window<I> ww = win.cols(ow);
    A s = A(0);
    for (I ih = wh.start; ih < wh.end; ++ih)
      for (I iw = ww.start; iw < ww.end; ++iw) s += load_as<A>(x[xl.offset(n, c, ih, iw)]);
    out[i] = store_as<T>(s / static_cast<A>(win.count(wh, ww)));
  });
}

/// grad_x (n, c, h, w) gathered from grad_out (n, c, ho, wo): each input element sums
/// grad_out / count over the windows covering it; each laid out as its Layout4.
template <typename T, typename I, typename Windows>
__global__ void __launch_bounds__(kBlock) avg_pool_backward_kernel(const T* __restrict__ gout, T* __restrict__ gx,
                                                                   I total, Windows win, Layout4<I> gl, Layout4<I> xl) {
  using A = acc_t<T>;
  for_each_element(total, xl, [&](I i, I n, I c, I ih, I iw) {
    I oh0, oh1, ow0, ow1;
    win.cover_rows(ih, oh0, oh1);
    win.cover_cols(iw, ow0, ow1);
    A s = A(0);
    for (I oh = oh0; oh < oh1; ++oh) {
      const Window<I> wh = win.rows(oh);
      if (!Windows::kExactCover && (ih < wh.start || ih >= wh.end)) continue;
      for (I ow = ow0; ow < ow1; ++ow) {
        const Window<I> ww = win.cols(ow);
        if (!Windows::kExactCover && (iw < ww.start || iw >= ww.end)) continue;
        s += load_as<A>(gout[gl.offset(n, c, oh, ow)]) / static_cast<A>(win.count(wh, ww));
      }
    }
    gx[i] = store_as<T>(s);
  });
}

// ---- launchers ----

// The fronts (kernels/pool.cpp) pass 4-D operands dense in one memory format on one device and
// allocate the outputs: debug-only.
void check_pool_operand(const char* op, const char* name, const Tensor& t, const Tensor& ref, bool same_dtype,
                        MemoryFormat f) {
  EMBER_DEBUG_ASSERT(t.device() == ref.device() && t.device().is_cuda(), op, ": ", name, " is on ", t.device().str(),
                     ", expected ", ref.device().str());
  EMBER_DEBUG_ASSERT(t.dim() == 4 && t.is_contiguous(f), op, ": expected a 4-D ", name, " dense in ",
                     memory_format_name(f), ", got shape ", t.shape_str(), " strides ", shape_str(t.strides()));
  EMBER_DEBUG_ASSERT(!same_dtype || t.dtype() == ref.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                     ", expected ", dtype_name(ref.dtype()));
}

/// True when 32-bit index math covers every tensor: element counts plus the grid-stride
/// overshoot (i + gridDim.x * blockDim.x, at most 2^24 past the end) and, for windowed kernels,
/// the window-end slack (ends reach (o + 1) * stride + kernel) stay below 2^31.
bool use_32bit(std::initializer_list<const Tensor*> ts, const Pool2dParams* p = nullptr) {
  int64_t slack = int64_t(1) << 25;
  if (p != nullptr)
    slack += std::max(p->kernel_h, p->kernel_w) + std::max(p->stride_h, p->stride_w) + std::max(p->pad_h, p->pad_w);
  for (const Tensor* t : ts)
    if (t->numel() + slack >= kIndex32Limit) return false;
  return true;
}

/// Calls f.template operator()<T, I>() with T the float type of `dt`, I the index type.
template <typename F> void dispatch_pool(DType dt, bool idx32, const char* op, const F& f) {
  EMBER_DISPATCH_FLOAT(dt, op, [&]<typename T>() {
    if (idx32) f.template operator()<T, int32_t>();
    else f.template operator()<T, int64_t>();
  });
}

void max_pool_cuda(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices, MemoryFormat f) {
  const char* op = "max_pool2d (cuda)";
  check_pool_operand(op, "x", x, x, true, f);
  check_pool_operand(op, "out", out, x, true, f);
  check_pool_operand(op, "indices", indices, x, false, f);
  // The front (kernels/pool.cpp: max_pool2d) allocates indices as i64 of the output shape.
  EMBER_DEBUG_ASSERT(indices.dtype() == DType::i64 && indices.sizes() == out.sizes(), op, ": indices ",
                     indices.shape_str(), " ", dtype_name(indices.dtype()), " must be i64 of the output's shape ",
                     out.shape_str());
  const int64_t total = out.numel();
  launch_on(out, [&](cudaStream_t stream) {
    dispatch_pool(x.dtype(), use_32bit({&x, &out}, &p), op, [&]<typename T, typename I>() {
      max_pool_kernel<T, I>
          <<<grid_for(total), kBlock, 0, stream>>>(static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()),
                                                   static_cast<int64_t*>(indices.data_ptr()), static_cast<I>(total),
                                                   dims_of<I>(x, out, p), layout_of<I>(x, f), layout_of<I>(out, f));
    });
  });
}

void max_pool_backward_cuda(const Tensor& gout, const Tensor& indices, const Tensor& gx, MemoryFormat f) {
  const char* op = "max_pool2d_backward (cuda)";
  check_pool_operand(op, "grad_x", gx, gx, true, f);
  check_pool_operand(op, "grad_out", gout, gx, true, f);
  check_pool_operand(op, "indices", indices, gx, false, f);
  // The front (kernels/pool.cpp: max_pool2d_backward) checks indices (i64, grad_out shape, N and C of x).
  EMBER_DEBUG_ASSERT(indices.dtype() == DType::i64 && indices.sizes() == gout.sizes() && gout.size(0) == gx.size(0) &&
                         gout.size(1) == gx.size(1),
                     op, ": indices ", indices.shape_str(), " (", dtype_name(indices.dtype()), ") and grad_out ",
                     gout.shape_str(), " must be (N, C, Ho, Wo) i64 / float for grad_x ", gx.shape_str());
  launch_on(gx, [&](cudaStream_t stream) {
    zero_fill(gx, stream);
    const int64_t total = gout.numel();
    if (total == 0) return;
    dispatch_pool(gx.dtype(), use_32bit({&gx, &gout}), op, [&]<typename T, typename I>() {
      if (ember::deterministic()) {  // see the top comment
        det_scatter_add<T>(static_cast<T*>(gx.data_ptr()), gx.numel(), static_cast<const T*>(gout.data_ptr()), total,
                           gx.device(), stream, [&]<typename Key>(Key* keys, Key skip) {
                             max_pool_backward_keys_kernel<I, Key><<<grid_for(total), kBlock, 0, stream>>>(
                                 static_cast<const int64_t*>(indices.data_ptr()), keys, static_cast<I>(total),
                                 layout_of<I>(gout, f), layout_of<I>(gx, f), skip);
                           });
        return;
      }
      max_pool_backward_kernel<T, I><<<grid_for(total), kBlock, 0, stream>>>(
          static_cast<const T*>(gout.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
          static_cast<T*>(gx.data_ptr()), static_cast<I>(total), layout_of<I>(gout, f), layout_of<I>(gx, f));
    });
  });
}

/// The forward of either average pooling: out (N, C, Ho, Wo) from x (N, C, H, W) with the window
/// policy make.template operator()<I>() returns for index type I (32-bit when idx32).
template <typename MakeWindows>
void launch_avg_pool(const char* op, const Tensor& x, const Tensor& out, MemoryFormat f, bool idx32,
                     const MakeWindows& make) {
  const int64_t total = out.numel();
  launch_on(out, [&](cudaStream_t stream) {
    dispatch_pool(x.dtype(), idx32, op, [&]<typename T, typename I>() {
      avg_pool_kernel<T, I><<<grid_for(total), kBlock, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), static_cast<I>(total),
          make.template operator()<I>(), layout_of<I>(x, f), layout_of<I>(out, f));
    });
  });
}

/// The backward of either average pooling: gx (N, C, H, W) from gout (N, C, Ho, Wo), as above.
template <typename MakeWindows>
void launch_avg_pool_backward(const char* op, const Tensor& gout, const Tensor& gx, MemoryFormat f, bool idx32,
                              const MakeWindows& make) {
  const int64_t total = gx.numel();
  launch_on(gx, [&](cudaStream_t stream) {
    dispatch_pool(gx.dtype(), idx32, op, [&]<typename T, typename I>() {
      avg_pool_backward_kernel<T, I><<<grid_for(total), kBlock, 0, stream>>>(
          static_cast<const T*>(gout.data_ptr()), static_cast<T*>(gx.data_ptr()), static_cast<I>(total),
          make.template operator()<I>(), layout_of<I>(gout, f), layout_of<I>(gx, f));
    });
  });
}

void avg_pool_cuda(const Tensor& x, const Pool2dParams& p, const Tensor& out, MemoryFormat f) {
  const char* op = "avg_pool2d (cuda)";
  check_pool_operand(op, "x", x, x, true, f);
  check_pool_operand(op, "out", out, x, true, f);
  launch_avg_pool(op, x, out, f, use_32bit({&x, &out}, &p),
                  [&]<typename I>() { return AvgWindows<I>{dims_of<I>(x, out, p)}; });
}

void avg_pool_backward_cuda(const Tensor& gout, const Pool2dParams& p, const Tensor& gx, MemoryFormat f) {
  const char* op = "avg_pool2d_backward (cuda)";
  check_pool_operand(op, "grad_x", gx, gx, true, f);
  check_pool_operand(op, "grad_out", gout, gx, true, f);
  launch_avg_pool_backward(op, gout, gx, f, use_32bit({&gx, &gout}, &p),
                           [&]<typename I>() { return AvgWindows<I>{dims_of<I>(gx, gout, p)}; });
}

/// Adaptive products reach (o + 1) * in and (x + 1) * out: 32-bit only when those fit too.
bool adaptive_32bit(const Tensor& big, const Tensor& small) {
  const int64_t h = big.size(2), w = big.size(3), ho = small.size(2), wo = small.size(3);
  return use_32bit({&big, &small}) && (h + 1) * (ho + 1) < kIndex32Limit && (w + 1) * (wo + 1) < kIndex32Limit;
}

/// The adaptive policy for planes big (.., h, w) and small (.., ho, wo) in index type I.
template <typename I> AdaptiveWindows<I> adaptive_of(const Tensor& big, const Tensor& small) {
  return {static_cast<I>(big.size(2)), static_cast<I>(big.size(3)), static_cast<I>(small.size(2)),
          static_cast<I>(small.size(3))};
}

void adaptive_avg_cuda(const Tensor& x, const Tensor& out, MemoryFormat f) {
  const char* op = "adaptive_avg_pool2d (cuda)";
  check_pool_operand(op, "x", x, x, true, f);
  check_pool_operand(op, "out", out, x, true, f);
  // The front (kernels/pool.cpp: adaptive_avg_pool2d) checks x has H, W >= 1.
  EMBER_DEBUG_ASSERT(out.numel() == 0 || (x.size(2) >= 1 && x.size(3) >= 1), op, ": input ", x.shape_str(),
                     " has an empty plane");
  launch_avg_pool(op, x, out, f, adaptive_32bit(x, out), [&]<typename I>() { return adaptive_of<I>(x, out); });
}

void adaptive_avg_backward_cuda(const Tensor& gout, const Tensor& gx, MemoryFormat f) {
  const char* op = "adaptive_avg_pool2d_backward (cuda)";
  check_pool_operand(op, "grad_x", gx, gx, true, f);
  check_pool_operand(op, "grad_out", gout, gx, true, f);
  // The front (kernels/pool.cpp: adaptive_avg_pool2d_backward) checks grad_out has H, W >= 1.
  EMBER_DEBUG_ASSERT(gx.numel() == 0 || (gout.size(2) >= 1 && gout.size(3) >= 1), op, ": grad_out ", gout.shape_str(),
                     " has an empty plane");
  launch_avg_pool_backward(op, gout, gx, f, adaptive_32bit(gx, gout),
                           [&]<typename I>() { return adaptive_of<I>(gx, gout); });
}

}  // namespace

void register_pool() {
  max_pool2d_table.set(DeviceType::CUDA, &max_pool_cuda);
  max_pool2d_backward_table.set(DeviceType::CUDA, &max_pool_backward_cuda);
  avg_pool2d_table.set(DeviceType::CUDA, &avg_pool_cuda);
  avg_pool2d_backward_table.set(DeviceType::CUDA, &avg_pool_backward_cuda);
  adaptive_avg_pool2d_table.set(DeviceType::CUDA, &adaptive_avg_cuda);
  adaptive_avg_pool2d_backward_table.set(DeviceType::CUDA, &adaptive_avg_backward_cuda);
}

}  // namespace ember::kernels::cuda
