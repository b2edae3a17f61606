#pragma once
// Differentiable 2-D convolution and pooling (NCHW), namespace ember as users write them. The
// forwards call kernels/conv.h and kernels/pool.h; each backward is written beside its forward in
// autograd/ops_conv.cpp and computes only the gradients some input needs.
//
// The option structs are ember's own types rather than kernels::Conv2dParams / Pool2dParams, so
// an unqualified conv2d(x, w, b, opts) after `using namespace ember` is not made ambiguous by
// argument-dependent lookup finding kernels::conv2d.
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/pool.h>

namespace ember {

/// A (height, width) pair; one number means the same for both.
struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2() = default;
  constexpr Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose (stride = 2)
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  constexpr bool operator==(const Size2&) const = default;
};

/// Geometry of a 2-D convolution: conv2d(x, w, b, {.stride = 2, .padding = {1, 0}, .groups = 2}).
struct Conv2dFuncOptions {
  Size2 stride{1};
  Size2 padding{0};
  Size2 dilation{1};
  int64_t groups = 1;
  kernels::Conv2dParams params() const {
    return {stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups};
  }
};

/// Window of a 2-D pooling: max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}).
struct Pool2dFuncOptions {
  Size2 kernel{2};
  Size2 stride{0};  // 0: equal to the kernel (PyTorch's stride=None)
  Size2 padding{0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
  kernels::Pool2dParams params() const {
    return {kernel.h,
            kernel.w,
            stride.h == 0 ? kernel.h : stride.h,
            stride.w == 0 ? kernel.w : stride.w,
            padding.h,
            padding.w,
            ceil_mode,
            count_include_pad};
  }
};

/// x (N, C, H, W), w (O, C/groups, kh, kw), bias (O) or undefined -> (N, O, Ho, Wo) with
/// Ho = (H + 2 pad_h - dilation_h (kh - 1) - 1) / stride_h + 1 (and likewise Wo). Gradients:
/// dx by the transposed convolution, dw by correlating x with grad_out, dbias = grad_out summed
/// over N, Ho, Wo.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), const Conv2dFuncOptions& options = {});

/// Max over each window of x (N, C, H, W) -> (N, C, Ho, Wo); the gradient goes to the arg-max of
/// each window (summed where windows overlap).
Tensor max_pool2d(const Tensor& x, const Pool2dFuncOptions& options);
/// Square window `kernel`, stride (0: = kernel) and padding.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
/// Mean over each window of x (N, C, H, W) -> (N, C, Ho, Wo) (padding counted in the divisor when
/// options.count_include_pad); the gradient is spread evenly over each window.
Tensor avg_pool2d(const Tensor& x, const Pool2dFuncOptions& options);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
/// x (N, C, H, W) -> (N, C, out_h, out_w); window i covers [floor(i*H/out_h), ceil((i+1)*H/out_h)).
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace ember
