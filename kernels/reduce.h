#pragma once
// Reductions: sum, mean, max, min over given dims (or all), and argmax over one dim.
#include <cstdint>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
const char* op_name(ReduceOp op);

/// Reduces x over `dims` (empty: all dims). keepdim keeps reduced dims as size 1. Floating
/// inputs accumulate in f32 (f64 for f64) and return x's dtype; integer Sum returns i64.
/// Max/Min of an empty range is an error; Sum of one is 0; Mean of one is NaN.
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
