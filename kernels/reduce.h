#pragma once
// Reductions: sum, mean, max, min over given dims (or all), and argmax over one dim.
#include <cstdint>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>
#include <ember/kernels/op_list.h>

namespace ember::kernels {

// ---- the op list ----
// Adding a reduction is one line here plus its rules (identity, combine, finalize) in
// kernels/reduce_math.h; the enum, the names, the dtype rules and both devices' kernels follow.
//
// EMBER_REDUCE_OPS(X): X(Name, "name", on_empty, integers). `on_empty`: a reduction over zero
// elements has a value (its identity, finalized: Sum gives 0, Mean NaN); otherwise it is an
// error. `integers`: what an integer or bool input gives (a ReduceIntegers: I64, Same, Refused).
#define EMBER_REDUCE_OPS(X)      \
  X(Sum, "sum", true, I64)       \
  X(Mean, "mean", true, Refused) \
  X(Max, "max", false, Same)     \
  X(Min, "min", false, Same)

EMBER_DEFINE_OP_ENUM(ReduceOp, EMBER_REDUCE_OPS)

/// What a reduction of an integer or bool input gives: an i64 result, one of the input's dtype,
/// or an error (floating inputs only).
enum class ReduceIntegers : uint8_t { I64, Same, Refused };

/// One row of EMBER_REDUCE_OPS.
struct ReduceOpInfo {
  const char* name;  // as users write it ("sum")
  bool on_empty;
  ReduceIntegers integers;
};

// op_info(op), op_name(op), visit_op(op, visit).
#define EMBER_REDUCE_ROW_(Name, str, on_empty, integers) {str, on_empty, ReduceIntegers::integers},
EMBER_DEFINE_OP_TABLE(ReduceOp, ReduceOpInfo, EMBER_REDUCE_OPS, EMBER_REDUCE_ROW_)
#undef EMBER_REDUCE_ROW_

/// Reduces x over `dims` (empty: all dims). keepdim keeps reduced dims as size 1. Floating
/// inputs accumulate in f32 (f64 for f64) and return x's dtype; integer inputs follow the op
/// list (Sum returns i64, Max/Min keep the dtype, Mean refuses them). Max/Min of an empty range
/// is an error; Sum of one is 0; Mean of one is NaN.
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
/// Index (i64) of the first maximum along `dim`.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- implementation signatures ----
/// x is contiguous of shape (outer, R, inner); out is contiguous (outer, inner) of the result
/// dtype. Reduces over R.
using ReduceFn = void(ReduceOp op, const Tensor& x, const Tensor& out);
/// x contiguous (outer, R, inner); out i64 (outer, inner).
using ArgmaxFn = void(const Tensor& x, const Tensor& out);

extern DispatchTable<ReduceFn> reduce_table;
extern DispatchTable<ArgmaxFn> argmax_table;

}  // namespace ember::kernels
