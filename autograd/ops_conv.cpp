// Differentiable conv2d and pooling: forward through the kernels, backward written beside it.
#include <ember/autograd/ops_conv.h>

#include <utility>

#include <ember/autograd/autocast.h>
#include <ember/autograd/function.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/reduce.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::tensor_requires_grad;
using autograd::TensorList;
using autograd::detail::check_defined;

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, const Conv2dFuncOptions& options) {
  profiler::RecordScope profile_scope("conv2d", profiler::Category::op);
  profile_scope.inputs(x_in, w_in, bias_in);
  const kernels::Conv2dParams params = options.params();
  check_defined("conv2d", x_in, "x");
  check_defined("conv2d", w_in, "weight");
  // Autocast (autograd/autocast.h): inside a guard input, weight and bias run in the low dtype.
  const Tensor x = amp::cast_for(amp::OpClass::LowPrecision, x_in), w = amp::cast_for(amp::OpClass::LowPrecision, w_in),
               bias = amp::cast_for(amp::OpClass::LowPrecision, bias_in);
  Tensor out = kernels::conv2d(x, w, bias, params);  // checks shapes, devices and dtypes
  if (needs_grad(x, w, bias)) {
    const bool need_x = tensor_requires_grad(x), need_w = tensor_requires_grad(w);
    // dx needs only w and dw only x: keep just what the requested gradients read.
    record(
        out, "Conv2dBackward",
        [xs = need_w ? x : Tensor(), ws = need_x ? w : Tensor(), x_shape = x.sizes(),
         x_format = x.suggest_memory_format(), w_shape = w.sizes(), params, need_x, need_w,
         need_b = tensor_requires_grad(bias)](const Tensor& g) {
          Tensor gx, gw, gb;
          if (need_x) gx = kernels::conv2d_backward_input(g, ws, x_shape, x_format, params);
          if (need_w) gw = kernels::conv2d_backward_weight(g, xs, w_shape, params);
          // g (N, O, Ho, Wo) -> (O)
          if (need_b) gb = kernels::reduce(kernels::ReduceOp::Sum, g, {0, 2, 3});
          return TensorList{std::move(gx), std::move(gw), std::move(gb)};
        },
        x, w, bias);
  }
  return out;
}

Tensor max_pool2d(const Tensor& x, const Pool2dFuncOptions& options) {
  profiler::RecordScope profile_scope("max_pool2d", profiler::Category::op);
  profile_scope.inputs(x);
  const kernels::Pool2dParams params = options.params();
  check_defined("max_pool2d", x, "x");
  kernels::MaxPoolResult r = kernels::max_pool2d(x, params);
  if (needs_grad(x)) {
    record(
        r.out, "MaxPool2dBackward",
        [indices = r.indices, x_shape = x.sizes(), x_format = x.suggest_memory_format()](const Tensor& g) {
          return TensorList{kernels::max_pool2d_backward(g, indices, x_shape, x_format)};
        },
        x);
  }
  return r.out;
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return max_pool2d(x, Pool2dFuncOptions{kernel, stride, padding});
}

Tensor avg_pool2d(const Tensor& x, const Pool2dFuncOptions& options) {
  profiler::RecordScope profile_scope("avg_pool2d", profiler::Category::op);
  profile_scope.inputs(x);
  const kernels::Pool2dParams params = options.params();
  check_defined("avg_pool2d", x, "x");
  Tensor out = kernels::avg_pool2d(x, params);
  if (needs_grad(x)) {
    record(
        out, "AvgPool2dBackward",
        [x_shape = x.sizes(), x_format = x.suggest_memory_format(), params](const Tensor& g) {
          return TensorList{kernels::avg_pool2d_backward(g, x_shape, x_format, params)};
        },
        x);
  }
  return out;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return avg_pool2d(x, Pool2dFuncOptions{kernel, stride, padding});
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  profiler::RecordScope profile_scope("adaptive_avg_pool2d", profiler::Category::op);
  profile_scope.inputs(x);
  check_defined("adaptive_avg_pool2d", x, "x");
  Tensor out = kernels::adaptive_avg_pool2d(x, out_h, out_w);
  if (needs_grad(x)) {
    record(
        out, "AdaptiveAvgPool2dBackward",
        [x_shape = x.sizes(), x_format = x.suggest_memory_format()](const Tensor& g) {
          return TensorList{kernels::adaptive_avg_pool2d_backward(g, x_shape, x_format)};
        },
        x);
  }
  return out;
}

}  // namespace ember
