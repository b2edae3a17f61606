#pragma once
// 2-D convolution (NCHW). CPU: im2col + GEMM. CUDA: cuDNN, an execution plan timed and chosen once
// per problem and reused, workspace from the caching allocator (the one-off search's from the
// driver).
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

/// Output size of one spatial dim.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

/// x (N, C, H, W), w (O, C/groups, kh, kw), bias (O) or undefined -> (N, O, Ho, Wo).
/// Checks every shape and names both shapes on mismatch. Channels-last when x or w is (PyTorch's
/// rule; the other operand is converted), else row-major; the gradients likewise, the input's
/// laid out as x_format, the weight's channels-last when x or grad_out is.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p);
/// dL/dx (shape x_shape, laid out as x_format: the forward input's layout, which grad_out's strides
/// cannot always tell, e.g. for one output channel or a 1x1 output) from grad_out (N, O, Ho, Wo)
/// and w.
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Shape& x_shape, MemoryFormat x_format,
                             const Conv2dParams& p);
/// dL/dw (shape w_shape) from grad_out and x.
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& w_shape, const Conv2dParams& p);

// ---- implementation signatures: one float dtype; the 4-D tensors dense in the layout f (row-major,
// or channels-last), the bias contiguous ----
using Conv2dForwardFn = void(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
                             const Tensor& out, MemoryFormat f);
using Conv2dBackwardInputFn = void(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x,
                                   MemoryFormat f);
using Conv2dBackwardWeightFn = void(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                    const Tensor& grad_w, MemoryFormat f);
extern DispatchTable<Conv2dForwardFn> conv2d_forward_table;
extern DispatchTable<Conv2dBackwardInputFn> conv2d_backward_input_table;
extern DispatchTable<Conv2dBackwardWeightFn> conv2d_backward_weight_table;

}  // namespace ember::kernels
