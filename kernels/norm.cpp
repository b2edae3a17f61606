// Front of batch norm and dropout: shape, dtype and device checks, the (N, C, S) view, output
// allocation, and the p == 1 dropout special case (kept out of the device kernels).
#include <ember/kernels/norm.h>

#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember::kernels {

DispatchTable<BatchNormFn> batch_norm_table("batch_norm");
DispatchTable<BatchNormBackwardFn> batch_norm_backward_table("batch_norm_backward");
DispatchTable<DropoutFn> dropout_table("dropout");

namespace {

/// x (N, C, ...), dense in layout f, as a contiguous (N, C, S) view, S = product of the trailing
/// dims (1 for 2-D x). Channels-last memory is (N, H, W, C) row-major: the same per-channel
/// statistics are those of N*H*W samples of one value each, so the (N*H*W, C, 1) row-major view
/// feeds the same kernels.
Tensor as_ncs(const Tensor& xc, MemoryFormat f) {
  const int64_t N = xc.size(0), C = xc.size(1);
  const int64_t S = C == 0 || N == 0 ? 0 : xc.numel() / (N * C);
  const Shape s = f == MemoryFormat::channels_last ? Shape{N * S, C, 1} : Shape{N, C, S};
  return as_strided_raw(xc, s, contiguous_strides(s), xc.offset());
}

DType param_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

/// A per-channel tensor (C) of the parameter dtype on x's device, when defined.
void check_channel(const char* op, const Tensor& t, const char* what, const Tensor& x, bool need_contiguous) {
  if (!t.defined()) return;
  const int64_t C = x.size(1);
  EMBER_CHECK(t.dim() == 1 && t.size(0) == C, op, ": ", what, " must have shape (", C, ") for input ", x.shape_str(),
              ", got ", t.shape_str());
  EMBER_CHECK(t.device() == x.device(), op, ": ", what, " is on ", t.device().str(), " but the input ", x.shape_str(),
              " is on ", x.device().str());
  EMBER_CHECK(t.dtype() == param_dtype(x.dtype()), op, ": ", what, " must have dtype ",
              dtype_name(param_dtype(x.dtype())), " for an input of dtype ", dtype_name(x.dtype()), ", got ",
              dtype_name(t.dtype()));
  EMBER_CHECK(!need_contiguous || t.is_contiguous(), op, ": ", what, " must be contiguous (it is updated in place)");
}

void check_input(const char* op, const Tensor& x) {
  EMBER_CHECK(x.defined(), op, ": undefined input");
  EMBER_CHECK(x.dim() >= 2, op, ": expected an input (N, C) or (N, C, ...), got ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got dtype ", dtype_name(x.dtype()));
}

}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  check_input(op, x);
  check_channel(op, weight, "weight", x, false);
  check_channel(op, bias, "bias", x, false);
  check_channel(op, running_mean, "running_mean", x, true);
  check_channel(op, running_var, "running_var", x, true);
  EMBER_CHECK(eps > 0.0, op, ": eps must be positive, got ", eps);
  const int64_t C = x.size(1), M = C == 0 ? 0 : x.numel() / C;
  if (training) {
    EMBER_CHECK(M > 1, op, ": expected more than 1 value per channel when training, got input ", x.shape_str());
    EMBER_CHECK(momentum >= 0.0 && momentum <= 1.0, op, ": momentum must be in [0, 1], got ", momentum);
    EMBER_CHECK(running_mean.defined() == running_var.defined(), op,
                ": running_mean and running_var must be both defined or both undefined");
  } else {
    EMBER_CHECK(running_mean.defined() && running_var.defined(), op,
                ": eval mode normalizes with the running statistics, which are undefined");
  }
  const MemoryFormat f = x.suggest_memory_format();  // batch norm computes in x's layout
  BatchNormResult r;
  r.out = empty(x.sizes(), x.options(), f);
  if (training) {
    r.save_mean = empty({C}, {.dtype = param_dtype(x.dtype()), .device = x.device()});
    r.save_invstd = empty({C}, {.dtype = param_dtype(x.dtype()), .device = x.device()});
  }
  if (x.numel() == 0) return r;
  const Tensor w = weight.defined() ? contiguous_raw(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_raw(bias) : Tensor();
  BatchNormResult view{as_ncs(r.out, f), r.save_mean, r.save_invstd};
  batch_norm_table(x.device(), as_ncs(dense_raw(x, f), f), w, b, running_mean, running_var, training, momentum, eps,
                   view);
  return r;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training, double eps) {
  const char* op = "batch_norm_backward";
  check_input(op, x);
  EMBER_CHECK(grad_out.defined() && grad_out.sizes() == x.sizes(), op, ": grad_out ",
              grad_out.defined() ? grad_out.shape_str() : "undefined", " must have the input's shape ", x.shape_str());
  EMBER_CHECK(grad_out.device() == x.device(), op, ": grad_out on ", grad_out.device().str(), " but input on ",
              x.device().str());
  EMBER_CHECK(save_mean.defined() && save_invstd.defined(), op, ": undefined save_mean or save_invstd");
  check_channel(op, weight, "weight", x, false);
  check_channel(op, save_mean, "save_mean", x, false);
  check_channel(op, save_invstd, "save_invstd", x, false);
  const int64_t C = x.size(1);
  const MemoryFormat f = x.suggest_memory_format();  // batch norm computes in x's layout
  BatchNormGrads g;
  g.grad_x = empty(x.sizes(), x.options(), f);
  g.grad_weight = empty({C}, {.dtype = param_dtype(x.dtype()), .device = x.device()});
  g.grad_bias = empty({C}, {.dtype = param_dtype(x.dtype()), .device = x.device()});
  if (x.numel() == 0) {
    fill(g.grad_weight, 0.0);
    fill(g.grad_bias, 0.0);
    return g;
  }
  const Tensor go = grad_out.dtype() == x.dtype() ? dense_raw(grad_out, f) : cast(grad_out, x.dtype(), f);
  BatchNormGrads view{as_ncs(g.grad_x, f), g.grad_weight, g.grad_bias};
  batch_norm_backward_table(x.device(), as_ncs(go, f), as_ncs(dense_raw(x, f), f),
                            weight.defined() ? contiguous_raw(weight) : Tensor(), contiguous_raw(save_mean),
                            contiguous_raw(save_invstd), training, eps, view);
  return g;
}

namespace {

Tensor dropout_impl(const char* op, const Tensor& x, double p, uint64_t seed, uint64_t offset, MemoryFormat f) {
  EMBER_CHECK(x.defined(), op, ": undefined input");
  EMBER_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got dtype ", dtype_name(x.dtype()),
              " of shape ", x.shape_str());
  EMBER_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
  EMBER_CHECK(f == MemoryFormat::contiguous || x.dim() == 4, op, ": the channels_last format needs a 4-D tensor, got ",
              x.shape_str());
  Tensor out = empty(x.sizes(), x.options(), f);
  if (x.numel() == 0) return out;
  if (p >= 1.0) {  // every element dropped; 1 / (1 - p) would turn 0 * inf into NaN
    fill(out, 0.0);
    return out;
  }
  dropout_table(x.device(), dense_raw(x, f), p, seed, offset, out);  // flat, in f's memory order
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  return dropout_impl("dropout", x, p, seed, offset,
                      x.defined() ? x.suggest_memory_format() : MemoryFormat::contiguous);
}

Tensor dropout_backward(const Tensor& grad, double p, uint64_t seed, uint64_t offset, MemoryFormat format) {
  return dropout_impl("dropout_backward", grad, p, seed, offset, format);
}

}  // namespace ember::kernels
