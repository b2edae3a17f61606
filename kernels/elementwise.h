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
#include <ember/kernels/op_list.h>

namespace ember::kernels {

// ---- the op lists ----
// Adding an op is one line here plus its formula in kernels/elementwise_math.h: the enums, the
// names, the dtype rules and the per-op switches of the CPU and CUDA implementations are all
// generated from these two lists.
//
// EMBER_UNARY_OPS(X): X(Name, "name", integers, grad_reads). `integers`: also defined on i32/i64
// (else floating dtypes only). `grad_reads`: the forward tensor the derivative formula reads
// (a UnaryGradReads: None, Input or Output).
#define EMBER_UNARY_OPS(X)             \
  X(Neg, "neg", true, None)            \
  X(Abs, "abs", true, Input)           \
  X(Exp, "exp", false, Output)         \
  X(Log, "log", false, Input)          \
  X(Sqrt, "sqrt", false, Output)       \
  X(Tanh, "tanh", false, Output)       \
  X(Sigmoid, "sigmoid", false, Output) \
  X(Relu, "relu", true, Output)        \
  X(Gelu, "gelu", false, Input)

// EMBER_BINARY_OPS(X): X(Name, "name", on_bool, comparison). `on_bool`: defined for bool operands
// (Sub and Div are not, as in PyTorch). `comparison`: the result is DType::boolean.
#define EMBER_BINARY_OPS(X)          \
  X(Add, "add", true, false)         \
  X(Sub, "sub", false, false)        \
  X(Mul, "mul", true, false)         \
  X(Div, "div", false, false)        \
  X(Maximum, "maximum", true, false) \
  X(Minimum, "minimum", true, false) \
  X(Eq, "eq", true, true)            \
  X(Ne, "ne", true, true)            \
  X(Lt, "lt", true, true)            \
  X(Le, "le", true, true)            \
  X(Gt, "gt", true, true)            \
  X(Ge, "ge", true, true)

EMBER_DEFINE_OP_ENUM(UnaryOp, EMBER_UNARY_OPS)
EMBER_DEFINE_OP_ENUM(BinaryOp, EMBER_BINARY_OPS)

/// Which forward tensor a unary op's derivative reads: none, the input x or the output y.
enum class UnaryGradReads : uint8_t { None, Input, Output };

/// One row of EMBER_UNARY_OPS.
struct UnaryOpInfo {
  const char* name;  // as users write it ("relu")
  bool integers;
  UnaryGradReads grad_reads;
};
/// One row of EMBER_BINARY_OPS.
struct BinaryOpInfo {
  const char* name;  // as users write it ("add")
  bool on_bool;
  bool comparison;
};

// op_info(op), op_name(op), visit_op(op, visit) for both lists.
#define EMBER_UNARY_ROW_(Name, str, integers, reads) {str, integers, UnaryGradReads::reads},
#define EMBER_BINARY_ROW_(Name, str, on_bool, comparison) {str, on_bool, comparison},
EMBER_DEFINE_OP_TABLE(UnaryOp, UnaryOpInfo, EMBER_UNARY_OPS, EMBER_UNARY_ROW_)
EMBER_DEFINE_OP_TABLE(BinaryOp, BinaryOpInfo, EMBER_BINARY_OPS, EMBER_BINARY_ROW_)
#undef EMBER_UNARY_ROW_
#undef EMBER_BINARY_ROW_

/// True when `op` is defined for the integer dtypes i32/i64 (Neg, Abs, Relu).
constexpr bool unary_allows_integers(UnaryOp op) { return op_info(op).integers; }
/// The forward tensor unary_backward reads for `op` (see unary_backward below).
constexpr UnaryGradReads unary_grad_reads(UnaryOp op) { return op_info(op).grad_reads; }
/// True when `op` is defined for bool operands (Sub and Div are not).
constexpr bool binary_allows_bool(BinaryOp op) { return op_info(op).on_bool; }
/// True for the comparisons (Eq, Ne, Lt, Le, Gt, Ge), whose result is DType::boolean.
constexpr bool is_comparison(BinaryOp op) { return op_info(op).comparison; }

/// y = op(x). Same shape and dtype as x. Math ops need a floating dtype; Neg, Abs, Relu also take
/// i32/i64. Gelu is the exact erf form.
Tensor unary(UnaryOp op, const Tensor& x);
/// dL/dx for y = op(x), given grad = dL/dy. All three share a shape. Which of x, y the op reads:
/// Neg: none; Abs, Log, Gelu: x; Exp, Sqrt, Tanh, Sigmoid, Relu: y. The other may be undefined.
/// (Relu reads y, as y > 0 exactly where x > 0: a ReLU after a batch norm then keeps only its
/// output alive for the backward, which the next layer saves anyway, and the norm's output is freed.)
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
