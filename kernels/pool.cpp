// Front of 2-D pooling: parameter and shape checks (messages name the shapes and parameters),
// output allocation in the input's memory format, operands made dense in it, dispatch by device.
#include <ember/kernels/pool.h>

#include <sstream>
#include <string>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<MaxPoolFn> max_pool2d_table("max_pool2d");
DispatchTable<MaxPoolBackwardFn> max_pool2d_backward_table("max_pool2d_backward");
DispatchTable<AvgPoolFn> avg_pool2d_table("avg_pool2d");
DispatchTable<AvgPoolBackwardFn> avg_pool2d_backward_table("avg_pool2d_backward");
DispatchTable<AdaptiveAvgPoolFn> adaptive_avg_pool2d_table("adaptive_avg_pool2d");
DispatchTable<AdaptiveAvgPoolBackwardFn> adaptive_avg_pool2d_backward_table("adaptive_avg_pool2d_backward");

namespace {

std::string params_str(const Pool2dParams& p) {
  std::ostringstream os;
  os << "kernel (" << p.kernel_h << ", " << p.kernel_w << "), stride (" << p.stride_h << ", " << p.stride_w
     << "), padding (" << p.pad_h << ", " << p.pad_w << ")" << (p.ceil_mode ? ", ceil_mode" : "");
  return os.str();
}

void check_input(const char* what, const Tensor& x) {
  EMBER_CHECK(x.defined(), what, ": undefined input");
  EMBER_CHECK(x.dim() == 4, what, ": expected input (N, C, H, W), got shape ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), what, ": expected a floating dtype (f32, f64, f16, bf16), got ",
              dtype_name(x.dtype()), " for input ", x.shape_str());
}

/// Checks the parameters against an input of shape xs (N, C, H, W); returns (N, C, Ho, Wo).
Shape pool_shape(const char* what, const Shape& xs, const Pool2dParams& p) {
  EMBER_CHECK(xs.size() == 4, what, ": expected input shape (N, C, H, W), got ", shape_str(xs));
  EMBER_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
              what, ": expected kernel >= 1, stride >= 1, padding >= 0, got ", params_str(p));
  // An empty plane with padding would give windows of padding alone (-inf maxima, 0/0 averages).
  EMBER_CHECK(xs[2] >= 1 && xs[3] >= 1, what, ": expected an input plane of at least 1 x 1, got ", shape_str(xs));
  EMBER_CHECK(2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, what,
              ": padding must be at most half the kernel (a window would hold only padding), got ", params_str(p));
  const int64_t ho = pool_out_size(xs[2], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
  const int64_t wo = pool_out_size(xs[3], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
  EMBER_CHECK(ho >= 1 && wo >= 1, what, ": input ", shape_str(xs), " is too small for ", params_str(p),
              ": the output would be ", ho, " x ", wo);
  return {xs[0], xs[1], ho, wo};
}

void check_grad(const char* what, const Tensor& g, const Shape& expect, const Shape& x_shape) {
  EMBER_CHECK(g.defined(), what, ": undefined grad_out");
  EMBER_CHECK(g.sizes() == expect, what, ": grad_out has shape ", g.shape_str(), ", expected ", shape_str(expect),
              " for input ", shape_str(x_shape));
  EMBER_CHECK(is_floating(g.dtype()), what, ": expected a floating grad_out, got ", dtype_name(g.dtype()));
}

}  // namespace

int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  EMBER_CHECK(kernel >= 1 && stride >= 1 && pad >= 0,
              "pool_out_size: expected kernel >= 1, stride >= 1, pad >= 0, got ", "kernel ", kernel, ", stride ",
              stride, ", pad ", pad);
  const int64_t span = in + 2 * pad - kernel + (ceil_mode ? stride - 1 : 0);
  const int64_t q = span >= 0 ? span / stride : -((-span + stride - 1) / stride);  // floor
  int64_t out = q + 1;
  // ceil_mode: the last window must start inside the input or its left padding.
  if (ceil_mode && out > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

MaxPoolResult max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* what = "max_pool2d";
  check_input(what, x);
  const Shape os = pool_shape(what, x.sizes(), p);
  const MemoryFormat f = x.suggest_memory_format();
  MaxPoolResult r{empty(os, x.options(), f), empty(os, {.dtype = DType::i64, .device = x.device()}, f)};
  if (r.out.numel() == 0) return r;
  max_pool2d_table(x.device(), dense_raw(x, f), p, r.out, r.indices, f);
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape, MemoryFormat x_format) {
  const char* what = "max_pool2d_backward";
  EMBER_CHECK(x_shape.size() == 4, what, ": expected input shape (N, C, H, W), got ", shape_str(x_shape));
  EMBER_CHECK(grad_out.defined() && indices.defined(), what, ": undefined grad_out or indices");
  EMBER_CHECK(indices.dtype() == DType::i64, what, ": indices must be i64, got ", dtype_name(indices.dtype()));
  EMBER_CHECK(grad_out.dim() == 4 && grad_out.sizes() == indices.sizes() && grad_out.size(0) == x_shape[0] &&
                  grad_out.size(1) == x_shape[1],
              what, ": grad_out ", grad_out.shape_str(), " and indices ", indices.shape_str(),
              " must have one shape (N, C, Ho, Wo) matching input ", shape_str(x_shape));
  EMBER_CHECK(is_floating(grad_out.dtype()), what, ": expected a floating grad_out, got ",
              dtype_name(grad_out.dtype()));
  EMBER_CHECK(grad_out.device() == indices.device(), what, ": grad_out on ", grad_out.device().str(),
              " but indices on ", indices.device().str());
  Tensor gx = empty(x_shape, grad_out.options(), x_format);
  if (gx.numel() == 0) return gx;
  if (grad_out.numel() == 0) {
    fill(gx, 0.0);
    return gx;
  }
  max_pool2d_backward_table(gx.device(), dense_raw(grad_out, x_format), dense_raw(indices, x_format), gx, x_format);
  return gx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* what = "avg_pool2d";
  check_input(what, x);
  const MemoryFormat f = x.suggest_memory_format();
  Tensor out = empty(pool_shape(what, x.sizes(), p), x.options(), f);
  if (out.numel() == 0) return out;
  avg_pool2d_table(x.device(), dense_raw(x, f), p, out, f);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, MemoryFormat x_format, const Pool2dParams& p) {
  const char* what = "avg_pool2d_backward";
  check_grad(what, grad_out, pool_shape(what, x_shape, p), x_shape);
  Tensor gx = empty(x_shape, grad_out.options(), x_format);
  if (gx.numel() == 0) return gx;
  avg_pool2d_backward_table(gx.device(), dense_raw(grad_out, x_format), p, gx, x_format);
  return gx;
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  const char* what = "adaptive_avg_pool2d";
  check_input(what, x);
  EMBER_CHECK(out_h >= 1 && out_w >= 1, what, ": expected an output size >= 1, got (", out_h, ", ", out_w,
              ") for input ", x.shape_str());
  EMBER_CHECK(x.size(2) >= 1 && x.size(3) >= 1, what, ": input ", x.shape_str(),
              " has an empty plane; expected H >= 1 and W >= 1");
  const MemoryFormat f = x.suggest_memory_format();
  Tensor out = empty({x.size(0), x.size(1), out_h, out_w}, x.options(), f);
  if (out.numel() == 0) return out;
  adaptive_avg_pool2d_table(x.device(), dense_raw(x, f), out, f);
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, MemoryFormat x_format) {
  const char* what = "adaptive_avg_pool2d_backward";
  EMBER_CHECK(x_shape.size() == 4 && x_shape[2] >= 1 && x_shape[3] >= 1, what,
              ": expected input shape (N, C, H, W) with H, W >= 1, got ", shape_str(x_shape));
  EMBER_CHECK(grad_out.defined() && grad_out.dim() == 4 && grad_out.size(0) == x_shape[0] &&
                  grad_out.size(1) == x_shape[1] && grad_out.size(2) >= 1 && grad_out.size(3) >= 1,
              what, ": expected grad_out (", x_shape[0], ", ", x_shape[1], ", Ho, Wo) for input ", shape_str(x_shape),
              ", got ", grad_out.defined() ? grad_out.shape_str() : std::string("undefined"));
  EMBER_CHECK(is_floating(grad_out.dtype()), what, ": expected a floating grad_out, got ",
              dtype_name(grad_out.dtype()));
  Tensor gx = empty(x_shape, grad_out.options(), x_format);
  if (gx.numel() == 0) return gx;
  adaptive_avg_pool2d_backward_table(gx.device(), dense_raw(grad_out, x_format), gx, x_format);
  return gx;
}

}  // namespace ember::kernels
