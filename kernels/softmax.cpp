// Front of softmax / log-softmax, their backward, and the fused cross-entropy: shape and device
// checks, the (outer, D, inner) view, and host-side target bounds checks for CPU tensors.
#include <ember/kernels/softmax.h>

#include <algorithm>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<SoftmaxFn> softmax_table("softmax");
DispatchTable<SoftmaxBackwardFn> softmax_backward_table("softmax_backward");
DispatchTable<CrossEntropyFn> cross_entropy_table("cross_entropy");
DispatchTable<CrossEntropyBackwardFn> cross_entropy_backward_table("cross_entropy_backward");

namespace {

/// (outer, D, inner) around `dim` of `shape`; a 0-d shape is one element along dim 0.
Shape split_at(const Shape& shape, int64_t dim) {
  Shape s{1, 1, 1};
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    s[i < dim ? 0 : (i == dim ? 1 : 2)] *= shape[i];
  }
  return s;
}

/// Target as a contiguous i64 tensor (i32 accepted and widened).
Tensor target_i64(const Tensor& target, const char* what) {
  EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, what,
              ": target must hold class indices (i64 or i32), got dtype ", dtype_name(target.dtype()));
  return target.dtype() == DType::i64 ? contiguous_raw(target) : cast(target, DType::i64);
}

/// Host-side bounds check (CPU tensors only; a GPU kernel reports its own).
void check_targets(const Tensor& target, int64_t C, const char* what) {
  if (!target.device().is_cpu()) return;
  const int64_t* t = target.data<int64_t>();
  for (int64_t n = 0; n < target.numel(); ++n) {
    EMBER_CHECK(t[n] >= 0 && t[n] < C, what, ": target ", t[n], " at row ", n,
                " is out of range; expected a class in [0, ", C, ")");
  }
}

void check_logits_target(const Tensor& logits, const Tensor& target, double ls, const char* what) {
  EMBER_CHECK(logits.defined() && target.defined(), what, ": undefined logits or target");
  EMBER_CHECK(logits.dim() == 2, what, ": logits must be 2-D (N, C), got ", logits.shape_str());
  EMBER_CHECK(is_floating(logits.dtype()), what, ": logits must be floating, got ", dtype_name(logits.dtype()));
  EMBER_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), what,
              ": target must be 1-D (N) with N = ", logits.size(0), " for logits ", logits.shape_str(), ", got ",
              target.shape_str());
  EMBER_CHECK(logits.device() == target.device(), what, ": logits ", logits.shape_str(), " on ", logits.device().str(),
              " but target ", target.shape_str(), " on ", target.device().str());
  EMBER_CHECK(ls >= 0.0 && ls <= 1.0, what, ": label_smoothing must be in [0, 1], got ", ls);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  const char* what = log ? "log_softmax" : "softmax";
  EMBER_CHECK(x.defined(), what, ": undefined input");
  EMBER_CHECK(is_floating(x.dtype()), what, ": expected a floating dtype (f32, f64, f16, bf16), got ",
              dtype_name(x.dtype()), " for shape ", x.shape_str());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), what);
  Tensor out = empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const Shape s = split_at(x.sizes(), d);
  softmax_table(x.device(), raw_view(contiguous_raw(x), s), raw_view(out, s), log);
  return out;
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) {
  const char* what = log ? "log_softmax_backward" : "softmax_backward";
  EMBER_CHECK(grad.defined() && y.defined(), what, ": undefined grad or output");
  EMBER_CHECK(grad.sizes() == y.sizes(), what, ": grad ", grad.shape_str(), " and output ", y.shape_str(),
              " must have one shape");
  EMBER_CHECK(grad.device() == y.device(), what, ": grad on ", grad.device().str(), " but output on ",
              y.device().str());
  EMBER_CHECK(is_floating(y.dtype()), what, ": expected a floating dtype, got ", dtype_name(y.dtype()));
  const int64_t d = wrap_dim(dim, std::max<int64_t>(y.dim(), 1), what);
  Tensor g = grad.dtype() == y.dtype() ? contiguous_raw(grad) : cast(grad, y.dtype());
  Tensor out = empty(y.sizes(), y.options());
  if (y.numel() == 0) return out;
  const Shape s = split_at(y.sizes(), d);
  softmax_backward_table(y.device(), raw_view(g, s), raw_view(contiguous_raw(y), s), raw_view(out, s), log);
  return out;
}

DType cross_entropy_row_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

CrossEntropyRows cross_entropy_rows(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const char* what = "cross_entropy";
  check_logits_target(logits, target, label_smoothing, what);
  const int64_t N = logits.size(0), C = logits.size(1);
  Tensor t = target_i64(target, what);
  check_targets(t, C, what);
  const TensorOptions rows{.dtype = cross_entropy_row_dtype(logits.dtype()), .device = logits.device()};
  CrossEntropyRows r{empty({N}, rows), empty({N}, rows)};
  if (N == 0) return r;
  cross_entropy_table(logits.device(), contiguous_raw(logits), t, label_smoothing, r.loss, r.lse);
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad_rows, const Tensor& logits, const Tensor& target, const Tensor& lse,
                              double label_smoothing) {
  const char* what = "cross_entropy_backward";
  check_logits_target(logits, target, label_smoothing, what);
  const int64_t N = logits.size(0), C = logits.size(1);
  EMBER_CHECK(grad_rows.defined() && lse.defined(), what, ": undefined grad_rows or lse");
  EMBER_CHECK(grad_rows.numel() == N && lse.numel() == N, what, ": grad_rows ", grad_rows.shape_str(), " and lse ",
              lse.shape_str(), " must hold one value per row of logits ", logits.shape_str());
  EMBER_CHECK(grad_rows.device() == logits.device() && lse.device() == logits.device(), what, ": grad_rows on ",
              grad_rows.device().str(), ", lse on ", lse.device().str(), ", logits on ", logits.device().str());
  Tensor t = target_i64(target, what);
  check_targets(t, C, what);
  // grad_rows often arrives expanded from a scalar (mean/sum backward): densify as (N) rows.
  const DType row_dtype = cross_entropy_row_dtype(logits.dtype());
  auto dense_rows = [row_dtype](const Tensor& v) {
    Tensor dense = raw_view(contiguous_raw(v), {v.numel()});
    return dense.dtype() == row_dtype ? dense : cast(dense, row_dtype);
  };
  Tensor g = dense_rows(grad_rows), l = dense_rows(lse);
  Tensor out = empty(logits.sizes(), logits.options());
  if (out.numel() == 0) return out;
  cross_entropy_backward_table(logits.device(), g, contiguous_raw(logits), t, l, label_smoothing, out);
  return out;
}

}  // namespace ember::kernels
