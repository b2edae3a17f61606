#pragma once
// Differentiable ops on tensors (namespace ember, as users write them). Each forward calls the
// kernels (kernels/*.h); when grad mode is on and an input requires grad, it records a node whose
// backward is written beside the forward in autograd/ops_*.cpp.
//
// Binary ops broadcast NumPy-style and promote dtypes (kernels/elementwise.h); gradients are summed
// back to each input's shape and cast to its dtype. Operands must share a device; errors name both
// devices or both shapes. Integer and boolean tensors never carry gradients.
#include <cstdint>
#include <vector>

#include <ember/core/tensor.h>

namespace ember {

// ---- arithmetic (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor add(double s, const Tensor& a);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double s);
Tensor sub(double s, const Tensor& a);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double s);
Tensor mul(double s, const Tensor& a);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double s);
Tensor div(double s, const Tensor& a);
/// Elementwise max / min; where a == b the gradient is split evenly between the two.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- unary ----
Tensor neg(const Tensor& x);
/// d|x|/dx is sign(x) (0 at 0).
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// Exact (erf) GELU.
Tensor gelu(const Tensor& x);

// ---- reductions ----
/// Sum of all elements (0-d). Integer inputs give i64 (not differentiable).
Tensor sum(const Tensor& x);
/// Sum over `dims` (negative dims allowed); keepdim keeps them as size 1.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
/// Maximum values along `dim`; the gradient goes to the (first) arg-max position of each slice.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
/// Minimum values along `dim`; the gradient goes to the (first) arg-min position of each slice.
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
/// Max / min over `dims` (empty: all); the gradient is shared evenly among tied extrema.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// Index (i64) of the first maximum along dim; not differentiable.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- linear algebra ----
/// a (M,K) @ b (K,N) -> (M,N); batched (..., M, K) @ (..., K, N) with broadcast batch dims;
/// a 1-D operand is treated as a row (a) or column (b) vector and that dim is dropped, as in NumPy.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- softmax family and losses ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
/// cross_entropy's options (layers::CrossEntropyOptions is this type).
struct CrossEntropyOptions {
  /// Target distribution (1 - s) * one_hot + s / C, as in PyTorch; s in [0, 1].
  double label_smoothing = 0.0;
};
/// Mean over rows of the cross-entropy of logits (N, C) floating against class indices target (N,
/// i64 or i32): -log softmax(logits)[target], with label smoothing. 0-d f32 result (f64 for f64
/// logits, as in PyTorch), computed by the fused kernel (kernels/softmax.h). The one spelling:
/// layers::cross_entropy is this function.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
/// The short form of cross_entropy(logits, target, {.label_smoothing = label_smoothing}).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing);

// ---- selection ----
/// cond ? a : b, all three broadcast together; cond is boolean (or u8) and gets no gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// Rows of x along `dim` picked by index (1-D, i64 or i32); the gradient scatter-adds back.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// ---- comparisons (boolean results, no gradient) ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(s, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return sub(s, a); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(s, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return div(s, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, double s) { return lt(a, s); }
inline Tensor operator<=(const Tensor& a, double s) { return le(a, s); }
inline Tensor operator>(const Tensor& a, double s) { return gt(a, s); }
inline Tensor operator>=(const Tensor& a, double s) { return ge(a, s); }
inline Tensor operator==(const Tensor& a, double s) { return eq(a, s); }
inline Tensor operator!=(const Tensor& a, double s) { return ne(a, s); }
inline Tensor operator<(double s, const Tensor& a) { return gt(a, s); }
inline Tensor operator<=(double s, const Tensor& a) { return ge(a, s); }
inline Tensor operator>(double s, const Tensor& a) { return lt(a, s); }
inline Tensor operator>=(double s, const Tensor& a) { return le(a, s); }
inline Tensor operator==(double s, const Tensor& a) { return eq(a, s); }
inline Tensor operator!=(double s, const Tensor& a) { return ne(a, s); }

}  // namespace ember
