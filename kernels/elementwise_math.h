#pragma once
// Per-element math of the elementwise ops, shared by the CPU and CUDA implementations so both
// devices agree on the semantics (NaN handling, integer wrap-around, derivative formulas).
// Everything takes and returns the op-math type (float for f16/bf16, else the element type).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/kernels/elementwise.h>

namespace ember::kernels::math {

// float/double overloads that exist both in host libm and in CUDA device code.
EMBER_HOST_DEVICE inline float exp_(float x) { return expf(x); }
EMBER_HOST_DEVICE inline double exp_(double x) { return exp(x); }
EMBER_HOST_DEVICE inline float log_(float x) { return logf(x); }
EMBER_HOST_DEVICE inline double log_(double x) { return log(x); }
EMBER_HOST_DEVICE inline float sqrt_(float x) { return sqrtf(x); }
EMBER_HOST_DEVICE inline double sqrt_(double x) { return sqrt(x); }
EMBER_HOST_DEVICE inline float tanh_(float x) { return tanhf(x); }
EMBER_HOST_DEVICE inline double tanh_(double x) { return tanh(x); }
EMBER_HOST_DEVICE inline float erf_(float x) { return erff(x); }
EMBER_HOST_DEVICE inline double erf_(double x) { return erf(x); }
EMBER_HOST_DEVICE inline float fabs_(float x) { return fabsf(x); }
EMBER_HOST_DEVICE inline double fabs_(double x) { return fabs(x); }

template <typename T> inline constexpr bool is_float_math_v = std::is_floating_point_v<T>;

/// y = op(x).
template <UnaryOp OP, typename A> EMBER_HOST_DEVICE inline A unary_apply(A x) {
  if constexpr (OP == UnaryOp::Neg) {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(-static_cast<std::make_unsigned_t<A>>(x));  // wraps
    else return -x;
  } else if constexpr (OP == UnaryOp::Abs) {
    if constexpr (std::is_integral_v<A>) return x < 0 ? static_cast<A>(-static_cast<std::make_unsigned_t<A>>(x)) : x;
    else return fabs_(x);
  } else if constexpr (OP == UnaryOp::Relu) {
    return x < A(0) ? A(0) : x;  // NaN stays NaN
  } else if constexpr (OP == UnaryOp::Exp) {
    return exp_(x);
  } else if constexpr (OP == UnaryOp::Log) {
    return log_(x);
  } else if constexpr (OP == UnaryOp::Sqrt) {
    return sqrt_(x);
  } else if constexpr (OP == UnaryOp::Tanh) {
    return tanh_(x);
  } else if constexpr (OP == UnaryOp::Sigmoid) {
    return A(1) / (A(1) + exp_(-x));
  } else {  // Gelu, exact: x * Phi(x)
    return A(0.5) * x * (A(1) + erf_(x * A(0.70710678118654752440)));
  }
}

/// dL/dx given g = dL/dy and v = x (Abs, Log, Gelu) or v = y (Exp, Sqrt, Tanh, Sigmoid, Relu);
/// v is ignored for Neg.
template <UnaryOp OP, typename A> EMBER_HOST_DEVICE inline A unary_backward_apply(A g, A v) {
  if constexpr (OP == UnaryOp::Neg) {
    return unary_apply<UnaryOp::Neg>(g);
  } else if constexpr (OP == UnaryOp::Abs) {
    return v > A(0) ? g : v < A(0) ? unary_apply<UnaryOp::Neg>(g) : A(0);
  } else if constexpr (OP == UnaryOp::Relu) {
    return v > A(0) ? g : A(0);
  } else if constexpr (OP == UnaryOp::Exp) {
    return g * v;
  } else if constexpr (OP == UnaryOp::Log) {
    return g / v;
  } else if constexpr (OP == UnaryOp::Sqrt) {
    return g / (A(2) * v);
  } else if constexpr (OP == UnaryOp::Tanh) {
    return g * (A(1) - v * v);
  } else if constexpr (OP == UnaryOp::Sigmoid) {
    return g * v * (A(1) - v);
  } else {  // Gelu: d/dx [x Phi(x)] = Phi(x) + x phi(x)
    const A cdf = A(0.5) * (A(1) + erf_(v * A(0.70710678118654752440)));
    const A pdf = exp_(A(-0.5) * v * v) * A(0.39894228040143267794);
    return g * (cdf + v * pdf);
  }
}

/// a op b: an A for arithmetic ops, a bool for comparisons. Integer arithmetic wraps; integer
/// division truncates toward zero (the caller must rule out division by zero). Maximum/Minimum
/// propagate NaN. On bool: Add is or, Mul is and.
template <BinaryOp OP, typename A> EMBER_HOST_DEVICE inline auto binary_apply(A a, A b) {
  if constexpr (OP == BinaryOp::Eq) return a == b;
  else if constexpr (OP == BinaryOp::Ne) return a != b;
  else if constexpr (OP == BinaryOp::Lt) return a < b;
  else if constexpr (OP == BinaryOp::Le) return a <= b;
  else if constexpr (OP == BinaryOp::Gt) return a > b;
  else if constexpr (OP == BinaryOp::Ge) return a >= b;
  else if constexpr (OP == BinaryOp::Maximum) return static_cast<A>((a > b || a != a) ? a : b);
  else if constexpr (OP == BinaryOp::Minimum) return static_cast<A>((a < b || a != a) ? a : b);
  else if constexpr (std::is_same_v<A, bool>) {
    if constexpr (OP == BinaryOp::Add) return static_cast<bool>(a || b);
    else return static_cast<bool>(a && b);  // Mul (Sub, Div are rejected before reaching here)
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (OP == BinaryOp::Add) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    else if constexpr (OP == BinaryOp::Sub) return static_cast<A>(static_cast<U>(a) - static_cast<U>(b));
    else if constexpr (OP == BinaryOp::Mul) return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    else if constexpr (std::is_signed_v<A>)  // Div; x / -1 negates with wrap-around (INT_MIN / -1)
      return b == A(-1) ? static_cast<A>(U(0) - static_cast<U>(a)) : static_cast<A>(a / b);
    else return static_cast<A>(a / b);
  } else {
    if constexpr (OP == BinaryOp::Add) return static_cast<A>(a + b);
    else if constexpr (OP == BinaryOp::Sub) return static_cast<A>(a - b);
    else if constexpr (OP == BinaryOp::Mul) return static_cast<A>(a * b);
    else return static_cast<A>(a / b);
  }
}

}  // namespace ember::kernels::math
