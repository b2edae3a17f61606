// Differentiable arithmetic: + - * / (tensor with tensor, broadcasting; tensor with scalar),
// maximum/minimum, where, and the (non-differentiable) comparisons.
//
// Gradients of broadcast operands are summed back to the operand's shape and cast to its dtype by
// GradSink. Closures run with grad mode off, so the operators used inside them record nothing.
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::save_output;
using autograd::TensorList;
using autograd::detail::check_defined;
using autograd::detail::check_same_device;
using autograd::detail::GradSink;
using kernels::BinaryOp;

namespace {

Tensor binary_checked(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_defined(kernels::op_name(op), a, "a");
  check_defined(kernels::op_name(op), b, "b");
  check_same_device(kernels::op_name(op), a, b);
  return kernels::binary(op, a, b);
}

Tensor scalar_checked(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  check_defined(kernels::op_name(op), a, "a");
  return kernels::binary(op, a, s, scalar_first);
}

// Weight of a in d max(a, b) / da (1 where a wins, 1/2 on ties), of g's dtype and out's shape.
Tensor pick_weight(BinaryOp wins, const Tensor& a, const Tensor& b, DType dt) {
  Tensor w = kernels::binary(wins, a, b).to(dt);
  Tensor tie = kernels::binary(BinaryOp::Eq, a, b).to(dt);
  return kernels::binary(BinaryOp::Add, w, kernels::binary(BinaryOp::Mul, tie, 0.5));
}

Tensor extremum(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = binary_checked(op, a, b);
  if (needs_grad(a, b)) {
    const BinaryOp wins = op == BinaryOp::Maximum ? BinaryOp::Gt : BinaryOp::Lt;
    record(
        out, name,
        [a, b, wins, sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          Tensor ga = g * pick_weight(wins, a, b, g.dtype());
          return TensorList{sa(ga), sb(g - ga)};
        },
        a, b);
  }
  return out;
}

}  // namespace

// ---- tensor with tensor ----

Tensor add(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("add", profiler::Category::op);
  profile_scope.inputs(a, b);
  Tensor out = binary_checked(BinaryOp::Add, a, b);
  if (needs_grad(a, b)) {
    record(
        out, "AddBackward",
        [sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          return TensorList{sa(g), sb(g)};
        },
        a, b);
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("sub", profiler::Category::op);
  profile_scope.inputs(a, b);
  Tensor out = binary_checked(BinaryOp::Sub, a, b);
  if (needs_grad(a, b)) {
    record(
        out, "SubBackward",
        [sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          return TensorList{sa(g), sb.needed ? sb(-g) : Tensor()};
        },
        a, b);
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("mul", profiler::Category::op);
  profile_scope.inputs(a, b);
  Tensor out = binary_checked(BinaryOp::Mul, a, b);
  if (needs_grad(a, b)) {
    record(
        out, "MulBackward",
        [a, b, sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          return TensorList{sa.needed ? sa(g * b) : Tensor(), sb.needed ? sb(g * a) : Tensor()};
        },
        a, b);
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("div", profiler::Category::op);
  profile_scope.inputs(a, b);
  Tensor out = binary_checked(BinaryOp::Div, a, b);
  if (needs_grad(a, b)) {
    // d(a/b)/db = -a/b^2 = -out/b.
    record(
        out, "DivBackward",
        [b, y = save_output(out), sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          Tensor ga = g / b;
          return TensorList{sa(ga), sb.needed ? sb(-(ga * y)) : Tensor()};
        },
        a, b);
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Maximum, "MaximumBackward", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Minimum, "MinimumBackward", a, b); }

// ---- tensor with scalar ----

Tensor add(const Tensor& a, double s) {
  profiler::RecordScope profile_scope("add", profiler::Category::op);
  profile_scope.inputs(a);
  Tensor out = scalar_checked(BinaryOp::Add, a, s, false);
  if (needs_grad(a))
    record(
        out, "AddScalarBackward", [sa = GradSink(a, out.sizes())](const Tensor& g) { return TensorList{sa(g)}; }, a);
  return out;
}
Tensor add(double s, const Tensor& a) { return add(a, s); }

Tensor sub(const Tensor& a, double s) { return add(a, -s); }

Tensor sub(double s, const Tensor& a) {
  profiler::RecordScope profile_scope("sub", profiler::Category::op);
  profile_scope.inputs(a);
  Tensor out = scalar_checked(BinaryOp::Sub, a, s, true);
  if (needs_grad(a))
    record(
        out, "RSubScalarBackward", [sa = GradSink(a, out.sizes())](const Tensor& g) { return TensorList{sa(-g)}; }, a);
  return out;
}

Tensor mul(const Tensor& a, double s) {
  profiler::RecordScope profile_scope("mul", profiler::Category::op);
  profile_scope.inputs(a);
  Tensor out = scalar_checked(BinaryOp::Mul, a, s, false);
  if (needs_grad(a))
    record(
        out, "MulScalarBackward", [s, sa = GradSink(a, out.sizes())](const Tensor& g) { return TensorList{sa(g * s)}; },
        a);
  return out;
}
Tensor mul(double s, const Tensor& a) { return mul(a, s); }

Tensor div(const Tensor& a, double s) {
  profiler::RecordScope profile_scope("div", profiler::Category::op);
  profile_scope.inputs(a);
  Tensor out = scalar_checked(BinaryOp::Div, a, s, false);
  if (needs_grad(a))
    record(
        out, "DivScalarBackward", [s, sa = GradSink(a, out.sizes())](const Tensor& g) { return TensorList{sa(g / s)}; },
        a);
  return out;
}

Tensor div(double s, const Tensor& a) {
  profiler::RecordScope profile_scope("div", profiler::Category::op);
  profile_scope.inputs(a);
  Tensor out = scalar_checked(BinaryOp::Div, a, s, true);
  if (needs_grad(a)) {
    // d(s/a)/da = -s/a^2 = -out/a.
    record(
        out, "RDivScalarBackward",
        [a, y = save_output(out), sa = GradSink(a, out.sizes())](const Tensor& g) {
          return TensorList{sa(-(g * y) / a)};
        },
        a);
  }
  return out;
}

// ---- where ----

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("where", profiler::Category::op);
  profile_scope.inputs(cond, a, b);
  check_defined("where", cond, "cond");
  check_defined("where", a, "a");
  check_defined("where", b, "b");
  check_same_device("where", cond, a, "cond", "a");
  check_same_device("where", a, b);
  Tensor out = kernels::where(cond, a, b);
  if (needs_grad(a, b)) {
    record(
        out, "WhereBackward",
        [cond, sa = GradSink(a, out.sizes()), sb = GradSink(b, out.sizes())](const Tensor& g) {
          Tensor zero = scalar_tensor(0.0, g.options());
          return TensorList{sa.needed ? sa(kernels::where(cond, g, zero)) : Tensor(),
                            sb.needed ? sb(kernels::where(cond, zero, g)) : Tensor()};
        },
        a, b);
  }
  return out;
}

// ---- comparisons ----

Tensor eq(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_checked(BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, double s) { return scalar_checked(BinaryOp::Eq, a, s, false); }
Tensor ne(const Tensor& a, double s) { return scalar_checked(BinaryOp::Ne, a, s, false); }
Tensor lt(const Tensor& a, double s) { return scalar_checked(BinaryOp::Lt, a, s, false); }
Tensor le(const Tensor& a, double s) { return scalar_checked(BinaryOp::Le, a, s, false); }
Tensor gt(const Tensor& a, double s) { return scalar_checked(BinaryOp::Gt, a, s, false); }
Tensor ge(const Tensor& a, double s) { return scalar_checked(BinaryOp::Ge, a, s, false); }

}  // namespace ember
