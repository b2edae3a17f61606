#pragma once
// Gathering rows along a dim, and its adjoint (scatter-add).
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// out = x.index_select(dim, index): index is 1-D i64 (or i32); out has index.numel() at `dim`.
/// An out-of-range index is an error naming it and the valid range.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// out[..., index[k], ...] += src[..., k, ...] along dim (duplicates accumulate). In place on out.
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

// ---- implementation signatures ----
/// x contiguous (outer, D, inner); index contiguous (K) i64, already bounds-checked on the host
/// when on the CPU; out contiguous (outer, K, inner).
using IndexSelectFn = void(const Tensor& x, const Tensor& index, const Tensor& out);
/// out contiguous (outer, D, inner); src contiguous (outer, K, inner).
using IndexAddFn = void(const Tensor& out, const Tensor& index, const Tensor& src);

extern DispatchTable<IndexSelectFn> index_select_table;
extern DispatchTable<IndexAddFn> index_add_table;

}  // namespace ember::kernels
