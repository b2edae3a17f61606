// Differentiable unary math. The derivative kernels live in kernels::unary_backward; which of the
// input x and the output y a closure keeps follows the op list's kernels::unary_grad_reads: Abs,
// Log, Gelu read x; Exp, Sqrt, Tanh, Sigmoid, Relu read y (kept detached, see
// autograd/function.h); Neg reads neither.
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/elementwise.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::save_output;
using autograd::TensorList;
using kernels::UnaryOp;

namespace {

Tensor unary_op(UnaryOp op, const char* backward_name, const Tensor& x) {
  profiler::RecordScope profile_scope(kernels::op_name(op), profiler::Category::op);
  profile_scope.inputs(x);
  autograd::detail::check_defined(kernels::op_name(op), x, "x");
  Tensor out = kernels::unary(op, x);
  if (!needs_grad(x)) return out;
  if (kernels::unary_grad_reads(op) == kernels::UnaryGradReads::Output) {
    record(
        out, backward_name,
        [op, y = save_output(out)](const Tensor& g) { return TensorList{kernels::unary_backward(op, g, Tensor(), y)}; },
        x);
  } else {
    record(
        out, backward_name,
        [op, x](const Tensor& g) { return TensorList{kernels::unary_backward(op, g, x, Tensor())}; }, x);
  }
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  autograd::detail::check_defined("neg", x, "x");
  Tensor out = kernels::unary(UnaryOp::Neg, x);
  if (needs_grad(x))
    record(
        out, "NegBackward", [](const Tensor& g) { return TensorList{kernels::unary(UnaryOp::Neg, g)}; }, x);
  return out;
}

Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, "AbsBackward", x); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, "ExpBackward", x); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, "LogBackward", x); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, "SqrtBackward", x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, "TanhBackward", x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, "SigmoidBackward", x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, "ReluBackward", x); }
Tensor gelu(const Tensor& x) { return unary_op(UnaryOp::Gelu, "GeluBackward", x); }

}  // namespace ember
