#pragma once
// Elementwise unary and binary ops, `where`. No autograd here.
//
// Front functions (device-agnostic, in kernels/elementwise.cpp) check operands, broadcast, promote
// dtypes, allocate the contiguous output and call the device implementation through the tables.
// Implementations receive operands already expanded to the output shape (possibly strided, with
// stride 0 on broadcast dims) and of one compute dtype.
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

enum class UnaryOp : uint8_t { Neg, Abs, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Gelu };
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge };

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

/// y = op(x). Same shape and dtype as x. Math ops need a floating dtype; Neg, Abs, Relu also take
/// i32/i64. Gelu is the exact erf form.
Tensor unary(UnaryOp op, const Tensor& x);
/// dL/dx for y = op(x), given grad = dL/dy. All three share a shape. Which of x, y the op reads:
/// Neg: none; Abs, Log, Relu, Gelu: x; Exp, Sqrt, Tanh, Sigmoid: y. The other may be undefined.
Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y);
/// out = a op b with broadcasting; comparisons give DType::boolean, others the promoted dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
/// out = a op s, or s op a when scalar_first. The scalar takes a's dtype.
Tensor binary(BinaryOp op, const Tensor& a, double s, bool scalar_first = false);
/// out = cond ? a : b, all three broadcast together; cond is boolean (or u8).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- implementation signatures ----
// `out` is contiguous and of the output shape; inputs share its shape (strided/expanded views).
using UnaryFn = void(UnaryOp op, const Tensor& x, const Tensor& out);
using UnaryBackwardFn = void(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, const Tensor& out);
/// a and b have one dtype; out has that dtype, or boolean for comparisons.
using BinaryFn = void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
using BinaryScalarFn = void(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out);
/// cond is boolean; a, b and out share one dtype.
using WhereFn = void(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

extern DispatchTable<UnaryFn> unary_table;
extern DispatchTable<UnaryBackwardFn> unary_backward_table;
extern DispatchTable<BinaryFn> binary_table;
extern DispatchTable<BinaryScalarFn> binary_scalar_table;
extern DispatchTable<WhereFn> where_table;

}  // namespace ember::kernels
