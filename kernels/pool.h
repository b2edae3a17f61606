#pragma once
// 2-D pooling of (N, C, H, W) tensors in either memory format: max (with arg-max indices for the
// backward), average, adaptive average. A channels-last input gives channels-last results, computed
// in that layout (no transposes).
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

/// Output size of one spatial dim (PyTorch's rule, incl. ceil_mode's last-window check).
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode);

struct MaxPoolResult {
  Tensor out;  // (N, C, Ho, Wo), in x's memory format
  Tensor indices;  // (N, C, Ho, Wo) i64, laid out as out: flat index h * W + w of the max in its (H, W) plane
};
MaxPoolResult max_pool2d(const Tensor& x, const Pool2dParams& p);
// The backward passes return the input's gradient laid out as `x_format`, the forward input's
// layout (x.suggest_memory_format()): grad_out's strides cannot always tell it (an (N, C, 1, 1)
// gradient, e.g. from a flatten after global pooling, is dense in both layouts).
/// Scatters grad_out to the arg-max positions (accumulating where windows overlap).
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape, MemoryFormat x_format);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, MemoryFormat x_format, const Pool2dParams& p);
/// Window i covers [floor(i*H/Ho), ceil((i+1)*H/Ho)).
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, MemoryFormat x_format);

// ---- implementation signatures ----
// Every operand is dense in the one memory format `f` (NCHW or NHWC order; the front copies an
// operand that is not), so element (n, c, h, w) of an operand lives where f's row-major formula puts it.
using MaxPoolFn = void(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices,
                       MemoryFormat f);
using MaxPoolBackwardFn = void(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x, MemoryFormat f);
using AvgPoolFn = void(const Tensor& x, const Pool2dParams& p, const Tensor& out, MemoryFormat f);
using AvgPoolBackwardFn = void(const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x, MemoryFormat f);
using AdaptiveAvgPoolFn = void(const Tensor& x, const Tensor& out, MemoryFormat f);
using AdaptiveAvgPoolBackwardFn = void(const Tensor& grad_out, const Tensor& grad_x, MemoryFormat f);
extern DispatchTable<MaxPoolFn> max_pool2d_table;
extern DispatchTable<MaxPoolBackwardFn> max_pool2d_backward_table;
extern DispatchTable<AvgPoolFn> avg_pool2d_table;
extern DispatchTable<AvgPoolBackwardFn> avg_pool2d_backward_table;
extern DispatchTable<AdaptiveAvgPoolFn> adaptive_avg_pool2d_table;
extern DispatchTable<AdaptiveAvgPoolBackwardFn> adaptive_avg_pool2d_backward_table;

}  // namespace ember::kernels
