// CUDA elementwise ops: unary, unary backward, binary (tensor-tensor and tensor-scalar), where.
//
// Shape of the kernels: every op is a functor fed to launch_elementwise (kernels/cuda/loops.cuh),
// which picks a 16-byte-vectorized grid-stride loop when all operands are contiguous and aligned
// and a StridedIndexer loop otherwise (broadcast operands arrive as stride-0 views, already
// expanded to the output shape by the front functions in kernels/elementwise.cpp). The op is a
// run-time member of the functor: a warp-uniform switch is free next to the memory traffic of a
// memory-bound kernel, and it keeps the instantiation count at (dtype) instead of (op x dtype).
// The per-element formulas are kernels/elementwise_math.h, shared with the CPU twin, so both
// devices agree on NaN handling, wrap-around and derivatives; f16/bf16 load, compute in f32
// (opmath_t) and round once on store. Integer division checks its divisor on the device and
// reports a zero through a DeviceErrorFlag (one stream sync, integer Div only), raising the same
// error as the CPU. `where` only moves bits, so it is instantiated per element size, not per dtype.
#include <cmath>
#include <type_traits>

#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/elementwise_math.h>
#include <ember/kernels/cuda/error_flag.cuh>
#include <ember/kernels/cuda/loops.cuh>

namespace ember::kernels::cuda {
namespace {

// ---- per-element math: the shared formulas of kernels/elementwise_math.h behind a run-time switch ----
// One case per row of the op lists (kernels/elementwise.h). A case the operand type does not
// support (an integer Exp, a comparison in binary_math) is never reached: the host refuses those
// ops first, and `if constexpr` keeps them out of the build.

/// f(std::integral_constant<UnaryOp, op>{}) when op is defined on A (every op on floating A, the
/// list's integer ops on integer A), else `fallback`.
template <typename A, typename F> __device__ inline A visit_unary(UnaryOp op, A fallback, const F& f) {
  switch (op) {
#define EMBER_UNARY_CASE_(Name, ...)                                                   \
  case UnaryOp::Name:                                                                  \
    if constexpr (std::is_floating_point_v<A> || unary_allows_integers(UnaryOp::Name)) \
      return f(std::integral_constant<UnaryOp, UnaryOp::Name>{});                      \
    break;
    EMBER_UNARY_OPS(EMBER_UNARY_CASE_)
#undef EMBER_UNARY_CASE_
  }
  return fallback;
}

/// f(std::integral_constant<BinaryOp, op>{}) when op is a comparison (kComparisons) or an
/// arithmetic op (!kComparisons), else `fallback`.
template <bool kComparisons, typename R, typename F>
__device__ inline R visit_binary(BinaryOp op, R fallback, const F& f) {
  switch (op) {
#define EMBER_BINARY_CASE_(Name, ...)                               \
  case BinaryOp::Name:                                              \
    if constexpr (is_comparison(BinaryOp::Name) == kComparisons)    \
      return f(std::integral_constant<BinaryOp, BinaryOp::Name>{}); \
    break;
    EMBER_BINARY_OPS(EMBER_BINARY_CASE_)
#undef EMBER_BINARY_CASE_
  }
  return fallback;
}

template <typename A> __device__ inline A unary_math(UnaryOp op, A x) {
  return visit_unary(op, x, [&](auto opc) { return math::unary_apply<decltype(opc)::value>(x); });
}

// dL/dx given g = dL/dy and v = x or y (whichever the op reads; see kernels/elementwise.h).
template <typename A> __device__ inline A unary_grad_math(UnaryOp op, A g, A v) {
  return visit_unary(op, g, [&](auto opc) { return math::unary_backward_apply<decltype(opc)::value>(g, v); });
}

// The arithmetic ops (Add..Minimum). Integer division by zero never reaches here: the integer Div
// functors below intercept a zero divisor first. bool Sub/Div are refused on the host.
template <typename A> __device__ inline A binary_math(BinaryOp op, A x, A y) {
  return visit_binary<false>(op, x, [&](auto opc) { return math::binary_apply<decltype(opc)::value>(x, y); });
}

template <typename A> __device__ inline bool compare_math(BinaryOp op, A x, A y) {
  return visit_binary<true>(op, false, [&](auto opc) { return math::binary_apply<decltype(opc)::value>(x, y); });
}

// ---- functors (T: storage type; C = opmath_t<T>: compute type) ----

template <typename T> struct UnaryF {
  UnaryOp op;
  __device__ T operator()(T a) const {
    using C = opmath_t<T>;
    return static_cast<T>(unary_math<C>(op, static_cast<C>(a)));
  }
};

template <typename T> struct UnaryGradF {
  UnaryOp op;
  __device__ T operator()(T g, T v) const {
    using C = opmath_t<T>;
    return static_cast<T>(unary_grad_math<C>(op, static_cast<C>(g), static_cast<C>(v)));
  }
  // Neg reads neither x nor y.
  __device__ T operator()(T g) const { return operator()(g, g); }
};

// Integer Div checks its divisor: a zero raises `div_zero` (null for every other op/dtype, which
// never dereference it) and yields 0, and the launcher turns the flag into an error.
template <typename C> __device__ inline bool zero_divisor(BinaryOp op, C y, unsigned long long* div_zero) {
  if constexpr (std::is_integral_v<C>) {
    if (op == BinaryOp::Div && y == C(0)) {
      raise_error_flag(div_zero, 0);
      return true;
    }
  }
  return false;
}

template <typename T> struct BinaryF {
  BinaryOp op;
  unsigned long long* div_zero;
  __device__ T operator()(T a, T b) const {
    using C = opmath_t<T>;
    const C x = static_cast<C>(a), y = static_cast<C>(b);
    if (zero_divisor(op, y, div_zero)) return T(0);
    return static_cast<T>(binary_math<C>(op, x, y));
  }
};

template <typename T> struct CompareF {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const {
    using C = opmath_t<T>;
    return compare_math<C>(op, static_cast<C>(a), static_cast<C>(b));
  }
};

template <typename T> struct BinaryScalarF {
  BinaryOp op;
  opmath_t<T> s;  // the scalar in op-math precision (see binary_scalar_impl)
  bool scalar_first;
  unsigned long long* div_zero;  // as in BinaryF; only a tensor divisor (scalar_first) can be zero here
  __device__ T operator()(T a) const {
    using C = opmath_t<T>;
    const C x = static_cast<C>(a);
    if (scalar_first) {
      if (zero_divisor(op, x, div_zero)) return T(0);
      return static_cast<T>(binary_math<C>(op, s, x));
    }
    return static_cast<T>(binary_math<C>(op, x, s));
  }
};

template <typename T> struct CompareScalarF {
  BinaryOp op;
  opmath_t<T> s;
  bool scalar_first;
  __device__ bool operator()(T a) const {
    using C = opmath_t<T>;
    const C x = static_cast<C>(a);
    return scalar_first ? compare_math<C>(op, s, x) : compare_math<C>(op, x, s);
  }
};

template <typename U> struct WhereF {
  __device__ U operator()(uint8_t c, U a, U b) const { return c != 0 ? a : b; }
};

// ---- checks ----
//
// The operand checks repeat what the fronts (kernels/elementwise.cpp) guarantee: operands on the
// output's device, expanded to its shape and converted to one dtype, outputs they allocate, dtypes
// they check. They are debug-only; integer division by zero depends on the data and stays an error.

void check_same_device(const char* what, const Tensor& out, const Tensor& t, const char* name) {
  EMBER_DEBUG_ASSERT(t.device() == out.device(), what, " (cuda): operand ", name, " is on ", t.device().str(),
                     " but the output is on ", out.device().str());
  EMBER_DEBUG_ASSERT(t.sizes() == out.sizes(), what, " (cuda): operand ", name, " has shape ", t.shape_str(),
                     ", expected the output shape ", out.shape_str());
}

// bool Sub/Div have no meaning (as in PyTorch); the fronts refuse them first (check_binary_dtype).
void check_bool_op(BinaryOp op, DType dt) {
  EMBER_DEBUG_ASSERT(dt != DType::boolean || binary_allows_bool(op), op_name(op),
                     " (cuda): not defined for bool operands (use a numeric dtype)");
}

bool integer_div(BinaryOp op, DType dt) { return op == BinaryOp::Div && !is_floating(dt); }

// Integer division by zero has no value: the same error the CPU twin raises.
void check_div_zero(const DeviceErrorFlag& flag, DType dt) {
  EMBER_CHECK(!flag.read().first, "div: integer division by zero (divisor of dtype ", dtype_name(dt), " contains 0)");
}

// Calls fn<T>() for the dtypes a unary op supports: floating types for all ops, i32/i64 for
// Neg/Abs/Relu (the fronts' check_unary_dtype refuses the rest).
template <typename Fn> void dispatch_unary(UnaryOp op, DType dtype, const char* what, Fn&& fn) {
  if (is_floating(dtype)) {
    EMBER_DISPATCH_FLOAT(dtype, what, fn);
    return;
  }
  EMBER_DEBUG_ASSERT(unary_allows_integers(op) && (dtype == DType::i32 || dtype == DType::i64), what, " (cuda): op ",
                     op_name(op), " does not support dtype ", dtype_name(dtype),
                     " (floating dtypes for every op; i32/i64 for neg, abs, relu)");
  if (dtype == DType::i32) fn.template operator()<int32_t>();
  else fn.template operator()<int64_t>();
}

// ---- implementations ----

void unary_impl(UnaryOp op, const Tensor& x, const Tensor& out) {
  check_same_device("unary", out, x, "x");
  EMBER_DEBUG_ASSERT(x.dtype() == out.dtype(), "unary (cuda): x is ", dtype_name(x.dtype()), " but out is ",
                     dtype_name(out.dtype()));
  dispatch_unary(op, x.dtype(), "unary",
                 [&]<typename T>() { launch_elementwise<T>(out, UnaryF<T>{op}, operand<T>(x)); });
}

void unary_backward_impl(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, const Tensor& out) {
  check_same_device("unary_backward", out, grad, "grad");
  const bool reads_y = unary_grad_reads(op) == UnaryGradReads::Output;
  const bool reads_none = unary_grad_reads(op) == UnaryGradReads::None;
  const Tensor& v = reads_y ? y : x;
  if (!reads_none) {
    EMBER_DEBUG_ASSERT(v.defined(), "unary_backward (cuda): op ", op_name(op), " needs ", reads_y ? "y" : "x",
                       " but it is undefined");
    check_same_device("unary_backward", out, v, reads_y ? "y" : "x");
    EMBER_DEBUG_ASSERT(v.dtype() == grad.dtype(), "unary_backward (cuda): grad is ", dtype_name(grad.dtype()), " but ",
                       reads_y ? "y" : "x", " is ", dtype_name(v.dtype()));
  }
  EMBER_DEBUG_ASSERT(grad.dtype() == out.dtype(), "unary_backward (cuda): grad is ", dtype_name(grad.dtype()),
                     " but out is ", dtype_name(out.dtype()));
  dispatch_unary(op, grad.dtype(), "unary_backward", [&]<typename T>() {
    if (reads_none) launch_elementwise<T>(out, UnaryGradF<T>{op}, operand<T>(grad));
    else launch_elementwise<T>(out, UnaryGradF<T>{op}, operand<T>(grad), operand<T>(v));
  });
}

void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_device("binary", out, a, "a");
  check_same_device("binary", out, b, "b");
  EMBER_DEBUG_ASSERT(a.dtype() == b.dtype(), "binary (cuda) ", op_name(op), ": operands have dtypes ",
                     dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), ", expected one dtype");
  if (is_comparison(op)) {
    EMBER_DEBUG_ASSERT(out.dtype() == DType::boolean, "binary (cuda) ", op_name(op), ": output must be bool, got ",
                       dtype_name(out.dtype()));
    EMBER_DISPATCH_ALL(a.dtype(), "binary", [&]<typename T>() {
      launch_elementwise<bool>(out, CompareF<T>{op}, operand<T>(a), operand<T>(b));
    });
    return;
  }
  EMBER_DEBUG_ASSERT(out.dtype() == a.dtype(), "binary (cuda) ", op_name(op), ": output is ", dtype_name(out.dtype()),
                     ", expected the operands' dtype ", dtype_name(a.dtype()));
  check_bool_op(op, a.dtype());
  EMBER_DISPATCH_ALL(a.dtype(), "binary", [&]<typename T>() {
    if (integer_div(op, a.dtype())) {
      DeviceErrorFlag div_zero(out.device(), stream_of(out));
      launch_elementwise<T>(out, BinaryF<T>{op, div_zero.ptr()}, operand<T>(a), operand<T>(b));
      check_div_zero(div_zero, a.dtype());
    } else {
      launch_elementwise<T>(out, BinaryF<T>{op, nullptr}, operand<T>(a), operand<T>(b));
    }
  });
}

void binary_scalar_impl(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  check_same_device("binary_scalar", out, a, "a");
  EMBER_DISPATCH_ALL(a.dtype(), "binary_scalar", [&]<typename T>() {
    using C = opmath_t<T>;
    // The scalar takes a's dtype: integers truncate it, floats keep it at op-math precision (an
    // f16 tensor times 0.1 uses 0.1f, not 0.1 rounded to f16), exactly as the CPU twin does.
    const C sv = std::is_floating_point_v<C> ? static_cast<C>(s) : static_cast<C>(convert<T>(s));
    if (is_comparison(op)) {
      EMBER_DEBUG_ASSERT(out.dtype() == DType::boolean, "binary_scalar (cuda) ", op_name(op),
                         ": output must be bool, got ", dtype_name(out.dtype()));
      launch_elementwise<bool>(out, CompareScalarF<T>{op, sv, scalar_first}, operand<T>(a));
    } else {
      EMBER_DEBUG_ASSERT(out.dtype() == a.dtype(), "binary_scalar (cuda) ", op_name(op), ": output is ",
                         dtype_name(out.dtype()), ", expected ", dtype_name(a.dtype()));
      check_bool_op(op, a.dtype());
      if (!integer_div(op, a.dtype())) {
        launch_elementwise<T>(out, BinaryScalarF<T>{op, sv, scalar_first, nullptr}, operand<T>(a));
      } else if (!scalar_first) {
        EMBER_CHECK(sv != C(0), "div: integer division by zero (scalar divisor 0)");
        launch_elementwise<T>(out, BinaryScalarF<T>{op, sv, scalar_first, nullptr}, operand<T>(a));
      } else {
        DeviceErrorFlag div_zero(out.device(), stream_of(out));
        launch_elementwise<T>(out, BinaryScalarF<T>{op, sv, scalar_first, div_zero.ptr()}, operand<T>(a));
        check_div_zero(div_zero, a.dtype());
      }
    }
  });
}

void where_impl(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_device("where", out, cond, "cond");
  check_same_device("where", out, a, "a");
  check_same_device("where", out, b, "b");
  EMBER_DEBUG_ASSERT(cond.dtype() == DType::boolean || cond.dtype() == DType::u8,
                     "where (cuda): cond must be bool or u8, got ", dtype_name(cond.dtype()));
  EMBER_DEBUG_ASSERT(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
                     "where (cuda): a, b and out must share a dtype, got ", dtype_name(a.dtype()), ", ",
                     dtype_name(b.dtype()), " and ", dtype_name(out.dtype()));
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
