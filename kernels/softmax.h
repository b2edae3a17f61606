#pragma once
// Softmax and log-softmax over one dim, and the fused cross-entropy loss.
//
// Non-finite logits. Every device gives the same answer; kernels/cpu/softmax.cpp is the reference
// and kernels/cuda/softmax.cu follows it. Per row (the D entries one softmax normalises), with m
// the largest entry that is not NaN and s = sum of exp(x - m):
//  - a row that holds a NaN or a +inf, or whose entries are all -inf, has no defined normaliser
//    (inf - inf and -inf - -inf are NaN, so s is NaN): every softmax and log_softmax output of
//    that row is NaN, and so are cross_entropy's loss and lse for it and every entry of its
//    cross_entropy gradient. One bad logit poisons its own row only, never a neighbour;
//  - otherwise a -inf entry takes no part in s: its probability is 0 and its log-probability -inf;
//    cross_entropy's loss is +inf when the target's logit is -inf (and, with label smoothing > 0,
//    when any logit of the row is -inf); its gradient there is g * (0 - [c == t] (1 - ls) - ls / C);
//  - softmax_backward applies its formula entry by entry to the y it is given: a NaN in y makes
//    that row NaN, a probability 0 (log-probability -inf) gives 0 (for log_softmax: g).
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// Softmax (or log-softmax when `log`) of x over `dim`, numerically stable (max subtracted).
Tensor softmax(const Tensor& x, int64_t dim, bool log = false);
/// dL/dx given grad = dL/dy and the forward output y.
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log = false);

/// The dtype cross-entropy's per-row values (loss, lse, grad_rows) are kept in: f64 for f64
/// logits, f32 for f32, f16 and bf16 ones (PyTorch's loss dtype for f64 and f32 logits).
DType cross_entropy_row_dtype(DType logits);

/// Per-row cross-entropy of logits (N, C) against class indices target (N, i64), with label
/// smoothing ls: loss_n = lse_n - (1 - ls) * x[n, t_n] - ls/C * sum_c x[n, c].
/// Returns {loss (N), lse (N)} in cross_entropy_row_dtype(logits). A target outside [0, C) is an
/// error naming it.
struct CrossEntropyRows {
  Tensor loss;
  Tensor lse;
};
CrossEntropyRows cross_entropy_rows(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);
/// dlogits (N, C) in logits' dtype: g_n * (softmax(x_n) - (1 - ls) * onehot(t_n) - ls / C),
/// with grad_rows (N) holding g_n (converted to cross_entropy_row_dtype(logits)).
Tensor cross_entropy_backward(const Tensor& grad_rows, const Tensor& logits, const Tensor& target, const Tensor& lse,
                              double label_smoothing = 0.0);

// ---- implementation signatures ----
/// x, out contiguous (outer, D, inner), same dtype.
using SoftmaxFn = void(const Tensor& x, const Tensor& out, bool log);
/// grad, y, out contiguous (outer, D, inner).
using SoftmaxBackwardFn = void(const Tensor& grad, const Tensor& y, const Tensor& out, bool log);
/// logits contiguous (N, C) any float dtype; target contiguous (N) i64; loss, lse, grad_rows (N)
/// of cross_entropy_row_dtype(logits).
/// Implementations report an out-of-range target with an Error naming the row and value.
using CrossEntropyFn = void(const Tensor& logits, const Tensor& target, double ls, const Tensor& loss,
                            const Tensor& lse);
using CrossEntropyBackwardFn = void(const Tensor& grad_rows, const Tensor& logits, const Tensor& target,
                                    const Tensor& lse, double ls, const Tensor& dlogits);

extern DispatchTable<SoftmaxFn> softmax_table;
extern DispatchTable<SoftmaxBackwardFn> softmax_backward_table;
extern DispatchTable<CrossEntropyFn> cross_entropy_table;
extern DispatchTable<CrossEntropyBackwardFn> cross_entropy_backward_table;

}  // namespace ember::kernels
