#pragma once
// Softmax and log-softmax over one dim, and the fused cross-entropy loss.
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// Softmax (or log-softmax when `log`) of x over `dim`, numerically stable (max subtracted).
Tensor softmax(const Tensor& x, int64_t dim, bool log = false);
/// dL/dx given grad = dL/dy and the forward output y.
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log = false);

/// Per-row cross-entropy of logits (N, C) against class indices target (N, i64), with label
/// smoothing ls: loss_n = lse_n - (1 - ls) * x[n, t_n] - ls/C * sum_c x[n, c].
/// Returns {loss (N) f32, lse (N) f32}. A target outside [0, C) is an error naming it.
struct CrossEntropyRows {
  Tensor loss;
  Tensor lse;
};
CrossEntropyRows cross_entropy_rows(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);
/// dlogits (N, C) in logits' dtype: g_n * (softmax(x_n) - (1 - ls) * onehot(t_n) - ls / C),
/// with grad_rows (N) f32 holding g_n.
Tensor cross_entropy_backward(const Tensor& grad_rows, const Tensor& logits, const Tensor& target, const Tensor& lse,
                              double label_smoothing = 0.0);

// ---- implementation signatures ----
/// x, out contiguous (outer, D, inner), same dtype.
using SoftmaxFn = void(const Tensor& x, const Tensor& out, bool log);
/// grad, y, out contiguous (outer, D, inner).
using SoftmaxBackwardFn = void(const Tensor& grad, const Tensor& y, const Tensor& out, bool log);
/// logits contiguous (N, C) any float dtype; target contiguous (N) i64; loss, lse (N) f32.
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
