// Front of 2-D convolution: parameter and shape checks (every message names the shapes involved),
// the layout (channels-last when an operand is, else row-major; CUDA converts an f64
// channels-last call, which cuDNN has no NHWC engines for), output allocation, operands dense in
// that layout, dispatch by device.
#include <ember/kernels/conv.h>

#include <initializer_list>
#include <sstream>
#include <string>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<Conv2dForwardFn> conv2d_forward_table("conv2d");
DispatchTable<Conv2dBackwardInputFn> conv2d_backward_input_table("conv2d_backward_input");
DispatchTable<Conv2dBackwardWeightFn> conv2d_backward_weight_table("conv2d_backward_weight");

namespace {

std::string params_str(const Conv2dParams& p) {
  std::ostringstream os;
  os << "stride (" << p.stride_h << ", " << p.stride_w << "), padding (" << p.pad_h << ", " << p.pad_w
     << "), dilation (" << p.dilation_h << ", " << p.dilation_w << "), groups " << p.groups;
  return os.str();
}

void check_params(const char* what, const Conv2dParams& p) {
  EMBER_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0 && p.dilation_h >= 1 &&
                  p.dilation_w >= 1 && p.groups >= 1,
              what, ": expected stride >= 1, padding >= 0, dilation >= 1, groups >= 1, got ", params_str(p));
}

/// Checks x (N, C, H, W) against w (O, C/groups, kh, kw) and returns the output shape (N, O, Ho, Wo).
Shape check_conv_shapes(const char* what, const Shape& xs, const Shape& ws, const Conv2dParams& p) {
  check_params(what, p);
  EMBER_CHECK(xs.size() == 4, what, ": expected input (N, C, H, W), got shape ", shape_str(xs), " (weight ",
              shape_str(ws), ")");
  EMBER_CHECK(ws.size() == 4, what, ": expected weight (O, C/groups, kh, kw), got shape ", shape_str(ws), " (input ",
              shape_str(xs), ")");
  EMBER_CHECK(ws[0] % p.groups == 0 && ws[0] > 0, what, ": weight ", shape_str(ws), " has ", ws[0],
              " output channels, not a positive multiple of groups = ", p.groups);
  EMBER_CHECK(xs[1] == ws[1] * p.groups, what, ": input ", shape_str(xs), " has ", xs[1], " channels but weight ",
              shape_str(ws), " with groups = ", p.groups, " expects ", ws[1] * p.groups,
              " (C/groups = weight.size(1))");
  EMBER_CHECK(ws[2] >= 1 && ws[3] >= 1, what, ": weight ", shape_str(ws), " has an empty kernel");
  const int64_t ho = conv_out_size(xs[2], ws[2], p.stride_h, p.pad_h, p.dilation_h);
  const int64_t wo = conv_out_size(xs[3], ws[3], p.stride_w, p.pad_w, p.dilation_w);
  EMBER_CHECK(ho >= 1 && wo >= 1, what, ": input ", shape_str(xs), " is too small for weight ", shape_str(ws), " with ",
              params_str(p), ": the output would be ", ho, " x ", wo, " (the dilated kernel is ",
              (ws[2] - 1) * p.dilation_h + 1, " x ", (ws[3] - 1) * p.dilation_w + 1, ", the padded input ",
              xs[2] + 2 * p.pad_h, " x ", xs[3] + 2 * p.pad_w, ")");
  return {xs[0], ws[0], ho, wo};
}

void check_pair(const char* what, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  EMBER_CHECK(a.defined() && b.defined(), what, ": ", an, " or ", bn, " is an undefined tensor");
  EMBER_CHECK(a.device() == b.device(), what, ": ", an, " ", a.shape_str(), " is on ", a.device().str(), " but ", bn,
              " ", b.shape_str(), " is on ", b.device().str());
  EMBER_CHECK(a.dtype() == b.dtype(), what, ": ", an, " ", a.shape_str(), " is ", dtype_name(a.dtype()), " but ", bn,
              " ", b.shape_str(), " is ", dtype_name(b.dtype()));
  EMBER_CHECK(is_floating(a.dtype()), what, ": expected a floating dtype (f32, f64, f16, bf16), got ",
              dtype_name(a.dtype()), " for ", an, " ", a.shape_str());
}

}  // namespace

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  EMBER_CHECK(stride >= 1 && dilation >= 1 && pad >= 0 && kernel >= 1, "conv_out_size: expected kernel >= 1, ",
              "stride >= 1, pad >= 0, dilation >= 1, got kernel ", kernel, ", stride ", stride, ", pad ", pad,
              ", dilation ", dilation);
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  // Floor division (span may be negative when the kernel does not fit).
  const int64_t q = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
  return q + 1;
}

namespace {

/// The layout the device's kernels compute in for a call whose result is wanted as `want` (the
/// layout of the forward input, given or named by the caller of the input gradient): the CPU's
/// kernels compute in either; CUDA (cuDNN) too, except f64, which cuDNN has no NHWC engines for
/// (PyTorch makes the same exception): those calls convert to row-major and back.
MemoryFormat run_layout(Device d, DType dt, MemoryFormat want) {
  const bool nhwc = !d.is_cuda() || dt != DType::f64;
  return nhwc ? want : MemoryFormat::contiguous;
}

/// PyTorch's rule: a call is channels-last when any of its 4-D operands is, so a model converted
/// with Module::to(MemoryFormat::channels_last) runs channels-last on an input that was not
/// converted (the first convolution converts it; for free when C == 1, as for MNIST).
MemoryFormat either_layout(std::initializer_list<MemoryFormat> formats) {
  for (MemoryFormat f : formats)
    if (f == MemoryFormat::channels_last) return f;
  return MemoryFormat::contiguous;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  const char* what = "conv2d";
  check_pair(what, x, "input", w, "weight");
  const Shape out_shape = check_conv_shapes(what, x.sizes(), w.sizes(), p);
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), what, ": expected bias (", w.size(0), ") for weight ",
                w.shape_str(), ", got shape ", bias.shape_str());
    check_pair(what, bias, "bias", w, "weight");
  }
  const MemoryFormat want = either_layout({x.suggest_memory_format(), w.suggest_memory_format()}),
                     run = run_layout(x.device(), x.dtype(), want);
  Tensor out = empty(out_shape, x.options(), run);
  if (out.numel() == 0) return out;
  conv2d_forward_table(x.device(), dense_raw(x, run), dense_raw(w, run),
                       bias.defined() ? contiguous_raw(bias) : Tensor(), p, out, run);
  return dense_raw(out, want);
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Shape& x_shape, MemoryFormat x_format,
                             const Conv2dParams& p) {
  const char* what = "conv2d_backward_input";
  check_pair(what, grad_out, "grad_out", w, "weight");
  const Shape expect = check_conv_shapes(what, x_shape, w.sizes(), p);
  EMBER_CHECK(grad_out.sizes() == expect, what, ": grad_out has shape ", grad_out.shape_str(), ", expected ",
              shape_str(expect), " for input ", shape_str(x_shape), " and weight ", w.shape_str());
  const MemoryFormat run = run_layout(
      w.device(), w.dtype(), either_layout({x_format, grad_out.suggest_memory_format(), w.suggest_memory_format()}));
  Tensor grad_x = empty(x_shape, w.options(), run);
  if (grad_x.numel() == 0) return grad_x;
  conv2d_backward_input_table(w.device(), dense_raw(grad_out, run), dense_raw(w, run), p, grad_x, run);
  return dense_raw(grad_x, x_format);
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& w_shape, const Conv2dParams& p) {
  const char* what = "conv2d_backward_weight";
  check_pair(what, grad_out, "grad_out", x, "input");
  const Shape expect = check_conv_shapes(what, x.sizes(), w_shape, p);
  EMBER_CHECK(grad_out.sizes() == expect, what, ": grad_out has shape ", grad_out.shape_str(), ", expected ",
              shape_str(expect), " for input ", x.shape_str(), " and weight ", shape_str(w_shape));
  const MemoryFormat want = either_layout({x.suggest_memory_format(), grad_out.suggest_memory_format()}),
                     run = run_layout(x.device(), x.dtype(), want);
  Tensor grad_w = empty(w_shape, x.options(), run);
  if (grad_w.numel() == 0) return grad_w;
  if (x.numel() == 0) {  // N == 0: no contributions
    fill(grad_w, 0.0);
    return dense_raw(grad_w, want);
  }
  conv2d_backward_weight_table(x.device(), dense_raw(grad_out, run), dense_raw(x, run), p, grad_w, run);
  return dense_raw(grad_w, want);
}

}  // namespace ember::kernels
