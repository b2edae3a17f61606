// CUDA elementwise ops: unary, unary backward, binary (tensor-tensor and tensor-scalar), where.
//
// Shape of the kernels: every op is a functor fed to launch_elementwise (kernels/cuda/loops.cuh),
// which picks a 16-byte-vectorized grid-stride loop when all operands are contiguous and aligned
// and a StridedIndexer loop otherwise (broadcast operands arrive as stride-0 views, already
// expanded to the output shape by the front functions in kernels/elementwise.cpp). The op is a
// run-time member of the functor: a warp-uniform switch is free next to the memory traffic of a
// memory-bound kernel, and it keeps the instantiation count at (dtype) instead of (op x dtype).
// f16/bf16 load, compute in f32 (opmath_t) and round once on store, exactly like the CPU twin
// (kernels/cpu/elementwise.cpp) so the two agree to within the f32 math library's ulps.
// `where` only moves bits, so it is instantiated per element size, not per dtype.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/elementwise.h"

namespace ember::kernels::cuda {
namespace {

// ---- scalar math in the compute type C (float, double, or an integer type) ----

template <typename C>
__device__ inline C exp_(C x) {
  if constexpr (std::is_same_v<C, float>) return expf(x);
  else return exp(x);
}
template <typename C>
__device__ inline C log_(C x) {
  if constexpr (std::is_same_v<C, float>) return logf(x);
  else return log(x);
}
template <typename C>
__device__ inline C sqrt_(C x) {
  if constexpr (std::is_same_v<C, float>) return sqrtf(x);
  else return sqrt(x);
}
template <typename C>
__device__ inline C tanh_(C x) {
  if constexpr (std::is_same_v<C, float>) return tanhf(x);
  else return tanh(x);
}
template <typename C>
__device__ inline C erf_(C x) {
  if constexpr (std::is_same_v<C, float>) return erff(x);
  else return erf(x);
}

constexpr double kSqrtHalf = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1/sqrt(2*pi)

template <typename C>
__device__ inline C unary_math(UnaryOp op, C x) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Abs: return x < C(0) ? -x : (x == C(0) ? C(0) : x);  // |-0| = +0; NaN stays NaN
      case UnaryOp::Exp: return exp_(x);
      case UnaryOp::Log: return log_(x);
      case UnaryOp::Sqrt: return sqrt_(x);
      case UnaryOp::Tanh: return tanh_(x);
      case UnaryOp::Sigmoid: return C(1) / (C(1) + exp_(-x));
      case UnaryOp::Relu: return x > C(0) ? x : (x != x ? x : C(0));  // NaN propagates
      case UnaryOp::Gelu: return C(0.5) * x * (C(1) + erf_(x * C(kSqrtHalf)));
    }
    return x;
  } else {  // integers: the front allows Neg, Abs, Relu only
    switch (op) {
      case UnaryOp::Neg: return static_cast<C>(-x);
      case UnaryOp::Abs: return x < C(0) ? static_cast<C>(-x) : x;
      case UnaryOp::Relu: return x > C(0) ? x : C(0);
      default: return x;
    }
  }
}

// dL/dx given g = dL/dy and v = x or y (whichever the op reads; see kernels/elementwise.h).
template <typename C>
__device__ inline C unary_grad_math(UnaryOp op, C g, C v) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::Neg: return -g;
      case UnaryOp::Abs: return v > C(0) ? g : (v < C(0) ? -g : C(0));  // v = x; sign(0) = 0
      case UnaryOp::Log: return g / v;                                   // v = x
      case UnaryOp::Relu: return v > C(0) ? g : C(0);                    // v = x
      case UnaryOp::Gelu: {                                              // v = x
        const C cdf = C(0.5) * (C(1) + erf_(v * C(kSqrtHalf)));
        const C pdf = C(kInvSqrt2Pi) * exp_(C(-0.5) * v * v);
        return g * (cdf + v * pdf);
      }
      case UnaryOp::Exp: return g * v;                          // v = y
      case UnaryOp::Sqrt: return g / (C(2) * v);                // v = y
      case UnaryOp::Tanh: return g * (C(1) - v * v);            // v = y
      case UnaryOp::Sigmoid: return g * v * (C(1) - v);         // v = y
    }
    return g;
  } else {
    switch (op) {
      case UnaryOp::Neg: return static_cast<C>(-g);
      case UnaryOp::Abs: return v > C(0) ? g : (v < C(0) ? static_cast<C>(-g) : C(0));
      case UnaryOp::Relu: return v > C(0) ? g : C(0);
      default: return g;
    }
  }
}

// Arithmetic results for Add..Minimum. Integer division by zero gives 0 (the GPU does not trap;
// the value is defined here rather than left to the hardware), matching the CPU twin.
template <typename C>
__device__ inline C binary_math(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::Add: return static_cast<C>(x + y);
    case BinaryOp::Sub: return static_cast<C>(x - y);
    case BinaryOp::Mul: return static_cast<C>(x * y);
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<C>) return y == C(0) ? C(0) : static_cast<C>(x / y);
      else return x / y;
    // NaN propagates: a NaN x is returned by the first test, a NaN y by the fall-through.
    case BinaryOp::Maximum: return (x != x || x > y) ? x : y;
    case BinaryOp::Minimum: return (x != x || x < y) ? x : y;
    default: return x;  // comparisons go through compare_math
  }
}

template <typename C>
__device__ inline bool compare_math(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::Eq: return x == y;
    case BinaryOp::Ne: return x != y;
    case BinaryOp::Lt: return x < y;
    case BinaryOp::Le: return x <= y;
    case BinaryOp::Gt: return x > y;
    case BinaryOp::Ge: return x >= y;
    default: return false;
  }
}

// ---- functors (T: storage type; C = opmath_t<T>: compute type) ----

template <typename T>
struct UnaryF {
  UnaryOp op;
  __device__ T operator()(T a) const {
    using C = opmath_t<T>;
    return static_cast<T>(unary_math<C>(op, static_cast<C>(a)));
  }
};

template <typename T>
struct UnaryGradF {
  UnaryOp op;
  __device__ T operator()(T g, T v) const {
    using C = opmath_t<T>;
    return static_cast<T>(unary_grad_math<C>(op, static_cast<C>(g), static_cast<C>(v)));
  }
  // Neg reads neither x nor y.
  __device__ T operator()(T g) const { return operator()(g, g); }
};

template <typename T>
struct BinaryF {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
    using C = opmath_t<T>;
    return static_cast<T>(binary_math<C>(op, static_cast<C>(a), static_cast<C>(b)));
  }
};

template <typename T>
struct CompareF {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const {
    using C = opmath_t<T>;
    return compare_math<C>(op, static_cast<C>(a), static_cast<C>(b));
  }
};

template <typename T>
struct BinaryScalarF {
  BinaryOp op;
  opmath_t<T> s;  // the scalar, already rounded to T (it takes a's dtype)
  bool scalar_first;
  __device__ T operator()(T a) const {
    using C = opmath_t<T>;
    const C x = static_cast<C>(a);
    return static_cast<T>(scalar_first ? binary_math<C>(op, s, x) : binary_math<C>(op, x, s));
  }
};

template <typename T>
struct CompareScalarF {
  BinaryOp op;
  opmath_t<T> s;
  bool scalar_first;
  __device__ bool operator()(T a) const {
    using C = opmath_t<T>;
    const C x = static_cast<C>(a);
    return scalar_first ? compare_math<C>(op, s, x) : compare_math<C>(op, x, s);
  }
};

template <typename U>
struct WhereF {
  __device__ U operator()(uint8_t c, U a, U b) const { return c != 0 ? a : b; }
};

// ---- checks ----

bool integer_unary_ok(UnaryOp op) { return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu; }

void check_same_device(const char* what, const Tensor& out, const Tensor& t, const char* name) {
  EMBER_CHECK(t.device() == out.device(), what, " (cuda): operand ", name, " is on ", t.device().str(),
              " but the output is on ", out.device().str());
  EMBER_CHECK(t.sizes() == out.sizes(), what, " (cuda): operand ", name, " has shape ", t.shape_str(),
              ", expected the output shape ", out.shape_str());
}

// Calls fn<T>() for the dtypes a unary op supports: floating types for all ops, i32/i64 for
// Neg/Abs/Relu.
template <typename Fn>
void dispatch_unary(UnaryOp op, DType dtype, const char* what, Fn&& fn) {
  if (is_floating(dtype)) {
    EMBER_DISPATCH_FLOAT(dtype, what, fn);
    return;
  }
  EMBER_CHECK(integer_unary_ok(op) && (dtype == DType::i32 || dtype == DType::i64), what, " (cuda): op ",
              op_name(op), " does not support dtype ", dtype_name(dtype),
              " (floating dtypes for every op; i32/i64 for neg, abs, relu)");
  if (dtype == DType::i32) fn.template operator()<int32_t>();
  else fn.template operator()<int64_t>();
}

// ---- implementations ----

void unary_impl(UnaryOp op, const Tensor& x, const Tensor& out) {
  check_same_device("unary", out, x, "x");
  EMBER_CHECK(x.dtype() == out.dtype(), "unary (cuda): x is ", dtype_name(x.dtype()), " but out is ",
              dtype_name(out.dtype()));
  dispatch_unary(op, x.dtype(), "unary", [&]<typename T>() {
    launch_elementwise<T>(out, UnaryF<T>{op}, operand<T>(x));
  });
}

void unary_backward_impl(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, const Tensor& out) {
  check_same_device("unary_backward", out, grad, "grad");
  const bool reads_y = op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Tanh || op == UnaryOp::Sigmoid;
  const bool reads_none = op == UnaryOp::Neg;
  const Tensor& v = reads_y ? y : x;
  if (!reads_none) {
    EMBER_CHECK(v.defined(), "unary_backward (cuda): op ", op_name(op), " needs ", reads_y ? "y" : "x",
                " but it is undefined");
    check_same_device("unary_backward", out, v, reads_y ? "y" : "x");
    EMBER_CHECK(v.dtype() == grad.dtype(), "unary_backward (cuda): grad is ", dtype_name(grad.dtype()), " but ",
                reads_y ? "y" : "x", " is ", dtype_name(v.dtype()));
  }
  EMBER_CHECK(grad.dtype() == out.dtype(), "unary_backward (cuda): grad is ", dtype_name(grad.dtype()),
              " but out is ", dtype_name(out.dtype()));
  dispatch_unary(op, grad.dtype(), "unary_backward", [&]<typename T>() {
    if (reads_none) launch_elementwise<T>(out, UnaryGradF<T>{op}, operand<T>(grad));
    else launch_elementwise<T>(out, UnaryGradF<T>{op}, operand<T>(grad), operand<T>(v));
  });
}

void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_device("binary", out, a, "a");
  check_same_device("binary", out, b, "b");
  EMBER_CHECK(a.dtype() == b.dtype(), "binary (cuda) ", op_name(op), ": operands have dtypes ", dtype_name(a.dtype()),
              " and ", dtype_name(b.dtype()), ", expected one dtype");
  if (is_comparison(op)) {
    EMBER_CHECK(out.dtype() == DType::boolean, "binary (cuda) ", op_name(op), ": output must be bool, got ",
                dtype_name(out.dtype()));
    EMBER_DISPATCH_ALL(a.dtype(), "binary", [&]<typename T>() {
      launch_elementwise<bool>(out, CompareF<T>{op}, operand<T>(a), operand<T>(b));
    });
    return;
  }
  EMBER_CHECK(out.dtype() == a.dtype(), "binary (cuda) ", op_name(op), ": output is ", dtype_name(out.dtype()),
              ", expected the operands' dtype ", dtype_name(a.dtype()));
  EMBER_DISPATCH_ALL(a.dtype(), "binary", [&]<typename T>() {
    launch_elementwise<T>(out, BinaryF<T>{op}, operand<T>(a), operand<T>(b));
  });
}

void binary_scalar_impl(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  check_same_device("binary_scalar", out, a, "a");
  EMBER_DISPATCH_ALL(a.dtype(), "binary_scalar", [&]<typename T>() {
    using C = opmath_t<T>;
    const C sv = static_cast<C>(convert<T>(s));  // "the scalar takes a's dtype"
    if (is_comparison(op)) {
      EMBER_CHECK(out.dtype() == DType::boolean, "binary_scalar (cuda) ", op_name(op), ": output must be bool, got ",
                  dtype_name(out.dtype()));
      launch_elementwise<bool>(out, CompareScalarF<T>{op, sv, scalar_first}, operand<T>(a));
    } else {
      EMBER_CHECK(out.dtype() == a.dtype(), "binary_scalar (cuda) ", op_name(op), ": output is ",
                  dtype_name(out.dtype()), ", expected ", dtype_name(a.dtype()));
      launch_elementwise<T>(out, BinaryScalarF<T>{op, sv, scalar_first}, operand<T>(a));
    }
  });
}

void where_impl(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_device("where", out, cond, "cond");
  check_same_device("where", out, a, "a");
  check_same_device("where", out, b, "b");
  EMBER_CHECK(cond.dtype() == DType::boolean || cond.dtype() == DType::u8, "where (cuda): cond must be bool or u8, got ",
              dtype_name(cond.dtype()));
  EMBER_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "where (cuda): a, b and out must share a dtype, got ",
              dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " and ", dtype_name(out.dtype()));
  dispatch_bits(out.element_size(), "where", [&]<typename U>() {
    launch_elementwise<U>(out, WhereF<U>{}, operand<uint8_t>(cond), operand<U>(a), operand<U>(b));
  });
}

}  // namespace

void register_elementwise() {
  unary_table.set(DeviceType::CUDA, &unary_impl);
  unary_backward_table.set(DeviceType::CUDA, &unary_backward_impl);
  binary_table.set(DeviceType::CUDA, &binary_impl);
  binary_scalar_table.set(DeviceType::CUDA, &binary_scalar_impl);
  where_table.set(DeviceType::CUDA, &where_impl);
}

}  // namespace ember::kernels::cuda
