// Differentiable matmul, softmax / log_softmax, cross-entropy and index_select.
#include <algorithm>

#include <ember/autograd/autocast.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/index.h>
#include <ember/kernels/matmul.h>
#include <ember/kernels/reduce.h>
#include <ember/kernels/softmax.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::save_output;
using autograd::TensorList;
using autograd::detail::check_defined;
using autograd::detail::check_same_device;
using autograd::detail::GradSink;

namespace {

// Product of a (..., M, K) and b (..., K, N), both with >= 2 dims, without autograd. The batch dims
// broadcast; the kernel sees 2-D or 3-D operands only:
//   b 2-D: a is folded to (prod(batch) * M, K), one GEMM;
//   else:  both are expanded to the broadcast batch and folded to (B, M, K) and (B, K, N).
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;  // the folding views below are internal; the caller records one node
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  EMBER_CHECK(b.size(-2) == K, "matmul: shapes ", a.shape_str(), " and ", b.shape_str(),
              " cannot be multiplied (inner dims ", K, " vs ", b.size(-2), ")");
  if (a.dim() == 2 && b.dim() == 2) return kernels::matmul(a, b);
  const Shape a_batch(a.sizes().begin(), a.sizes().end() - 2);
  const Shape b_batch(b.sizes().begin(), b.sizes().end() - 2);
  if (b.dim() == 2) {
    Shape out_shape = a_batch;
    out_shape.push_back(M);
    out_shape.push_back(N);
    return kernels::matmul(a.reshape({-1, K}), b).reshape(out_shape);
  }
  Shape batch = broadcast_shapes(a_batch, b_batch);
  const int64_t B = numel_of(batch);
  Shape ae = batch, be = batch, out_shape = batch;
  ae.insert(ae.end(), {M, K});
  be.insert(be.end(), {K, N});
  out_shape.insert(out_shape.end(), {M, N});
  Tensor a3 = a.expand(ae).reshape({B, M, K});
  Tensor b3 = b.expand(be).reshape({B, K, N});
  return kernels::matmul(a3, b3).reshape(out_shape);
}

Tensor mT(const Tensor& t) { return t.transpose(-1, -2); }

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  profiler::RecordScope profile_scope("matmul", profiler::Category::op);
  profile_scope.inputs(a_in, b_in);
  check_defined("matmul", a_in, "a");
  check_defined("matmul", b_in, "b");
  check_same_device("matmul", a_in, b_in);
  // Autocast (autograd/autocast.h): inside a guard both operands run in the low dtype.
  const Tensor a = amp::cast_for(amp::OpClass::LowPrecision, a_in), b = amp::cast_for(amp::OpClass::LowPrecision, b_in);
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: expected operands with at least 1 dim, got shapes ", a.shape_str(),
              " and ", b.shape_str());
  EMBER_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: a (shape ", a.shape_str(), ") is ", dtype_name(a.dtype()),
              ", b (shape ", b.shape_str(), ") is ", dtype_name(b.dtype()));
  // NumPy rules for vectors: a (K) is a row (1, K), b (K) a column (K, 1); the added dim is dropped
  // from the result. The unsqueeze/squeeze views are differentiable, so the node below only ever
  // sees operands with >= 2 dims.
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Tensor out = matmul(a2, b2);
    if (b.dim() == 1) out = out.squeeze(-1);
    if (a.dim() == 1) out = out.squeeze(b.dim() == 1 ? -1 : -2);
    return out;
  }
  Tensor out = matmul_nd(a, b);
  if (needs_grad(a, b)) {
    record(
        out, "MatmulBackward",
        [a, b, sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          // dA = g @ B^T (summed over broadcast batch dims), dB = A^T @ g.
          Tensor ga, gb;
          if (sa.needed) ga = autograd::sum_to(matmul_nd(g, mT(b)), a.sizes());
          if (sb.needed) {
            if (b.dim() == 2) {
              // One GEMM over all rows (a shared weight when a has batch dims): (K, B*M) @ (B*M, N).
              const int64_t K = a.size(-1), N = g.size(-1);
              const Tensor a2 = a.reshape({-1, K}), g2 = g.reshape({-1, N});
              // dB in b's own layout: for b = W.t() of a contiguous W (Linear's weight) compute
              // (g^T @ A)^T, so W's gradient arrives contiguous instead of needing a transposing copy.
              const bool b_transposed = b.stride(0) == 1 && b.stride(1) == b.size(0) && b.size(0) > 1;
              gb = b_transposed ? mT(kernels::matmul(mT(g2), a2)) : kernels::matmul(mT(a2), g2);
            } else {
              gb = autograd::sum_to(matmul_nd(mT(a), g), b.sizes());
            }
          }
          return TensorList{std::move(ga), std::move(gb)};
        },
        a, b);
  }
  return out;
}

namespace {

Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  profiler::RecordScope profile_scope(name, profiler::Category::op);
  profile_scope.inputs(x_in);
  check_defined(name, x_in, "x");
  const Tensor x = amp::cast_for(amp::OpClass::Float32, x_in);  // autocast: softmax runs in f32
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  Tensor out = kernels::softmax(x, d, log);
  if (needs_grad(x)) {
    record(
        out, log ? "LogSoftmaxBackward" : "SoftmaxBackward",
        [y = save_output(out), d, log](const Tensor& g) { return TensorList{kernels::softmax_backward(g, y, d, log)}; },
        x);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  return cross_entropy(logits, target, CrossEntropyOptions{.label_smoothing = label_smoothing});
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, const CrossEntropyOptions& options) {
  profiler::RecordScope profile_scope("cross_entropy", profiler::Category::op);
  profile_scope.inputs(logits_in, target_in);
  const double label_smoothing = options.label_smoothing;
  check_defined("cross_entropy", logits_in, "logits");
  const Tensor logits = amp::cast_for(amp::OpClass::Float32, logits_in);  // autocast: the loss runs in f32
  check_defined("cross_entropy", target_in, "target");
  EMBER_CHECK(target_in.dtype() == DType::i64 || target_in.dtype() == DType::i32,
              "cross_entropy: target must hold class indices (i64 or i32), got dtype ", dtype_name(target_in.dtype()),
              " of shape ", target_in.shape_str());
  // The kernels take i64 indices; an i32 target is widened (on its own device) first.
  const Tensor target = target_in.dtype() == DType::i64 ? target_in : target_in.to(DType::i64);
  check_same_device("cross_entropy", logits, target, "logits", "target");
  EMBER_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
              "cross_entropy: expected logits (N, C) and target (N), got logits ", logits.shape_str(), " and target ",
              target.shape_str());
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  kernels::CrossEntropyRows rows = kernels::cross_entropy_rows(logits, target, label_smoothing);
  Tensor out = kernels::reduce(kernels::ReduceOp::Mean, rows.loss);
  if (needs_grad(logits)) {
    record(
        out, "CrossEntropyBackward",
        [logits, target, lse = rows.lse, label_smoothing](const Tensor& g) {
          // Each row's loss enters the mean with weight 1/N: grad_rows (N) = g / N, in the rows' dtype.
          const int64_t n = logits.size(0);
          const DType row_dtype = kernels::cross_entropy_row_dtype(logits.dtype());
          Tensor gf = g.dtype() == row_dtype ? g : kernels::cast(g, row_dtype);
          Tensor grad_rows = (gf * (1.0 / static_cast<double>(std::max<int64_t>(n, 1)))).expand({n}).contiguous();
          return TensorList{kernels::cross_entropy_backward(grad_rows, logits, target, lse, label_smoothing)};
        },
        logits);
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::RecordScope profile_scope("index_select", profiler::Category::op);
  profile_scope.inputs(x, index);
  check_defined("index_select", x, "x");
  check_defined("index_select", index, "index");
  check_same_device("index_select", x, index, "x", "index");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "index_select");
  Tensor out = kernels::index_select(x, d, index);
  if (needs_grad(x)) {
    record(
        out, "IndexSelectBackward",
        [index, in = x.sizes(), d](const Tensor& g) {
          Tensor gx = zeros(in, g.options());
          kernels::index_add(gx, d, index, g);
          return TensorList{gx};
        },
        x);
  }
  return out;
}

}  // namespace ember
