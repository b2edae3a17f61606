#pragma once
// The rules of the reductions, shared by the CPU and CUDA implementations (as elementwise_math.h
// is for the elementwise ops) so both devices agree on identities, NaN handling and means.
//
// A reduction folds its elements into an accumulator of type A (the device code picks A: f32 or
// f64 for floating inputs, int64_t for integers and bool): it starts from reduce_identity, folds
// elements and partial results with reduce_combine, which is associative and commutative (any
// order or tree gives the same answer up to rounding), and ends with reduce_finalize. Adding a
// reduction is a row in EMBER_REDUCE_OPS (kernels/reduce.h) and a case in each of the three.
// argmax folds (value, index) pairs with argmax_combine.
#include <cstdint>
#include <limits>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/kernels/reduce.h>

namespace ember::kernels::math {

/// True for a NaN (never for integers).
template <typename A> EMBER_HOST_DEVICE inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

/// The accumulator that leaves any other unchanged: 0 for Sum and Mean; -inf / +inf for Max /
/// Min (the lowest / highest value for integers).
template <typename A> EMBER_HOST_DEVICE inline A reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      return A(0);
    case ReduceOp::Max:
      if constexpr (std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    case ReduceOp::Min:
      if constexpr (std::numeric_limits<A>::has_infinity) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
  }
  return A(0);
}

/// Folds b into the running accumulator a. Max and Min propagate NaN (once NaN, stays NaN) and
/// keep a on ties.
template <typename A> EMBER_HOST_DEVICE inline A reduce_combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      return a + b;
    case ReduceOp::Max:
      if (is_nan(a)) return a;
      if (is_nan(b)) return b;
      return b > a ? b : a;
    case ReduceOp::Min:
      if (is_nan(a)) return a;
      if (is_nan(b)) return b;
      return b < a ? b : a;
  }
  return a;
}

/// The type of a mean of accumulators A: A itself when floating, double for integers.
template <typename A> using mean_t = std::conditional_t<std::is_floating_point_v<A>, A, double>;

/// Ends a reduction of `count` elements whose folded accumulator is acc, and returns
/// store(result): Mean's result is acc / count (NaN when count is 0), every other op's is acc.
/// `store` converts to the output's storage type; it takes A or mean_t<A>.
template <typename A, typename Store>
EMBER_HOST_DEVICE inline auto reduce_finalize(ReduceOp op, A acc, int64_t count, const Store& store) {
  if (op == ReduceOp::Mean) return store(static_cast<mean_t<A>>(acc) / static_cast<mean_t<A>>(count));
  return store(acc);
}

/// A candidate of argmax: a value and its index along the reduced dim.
template <typename A> struct ArgPair {
  A v;
  int64_t i;
};

/// The candidate that every other beats: -inf (lowest for integers) at the largest index.
template <typename A> EMBER_HOST_DEVICE inline ArgPair<A> argmax_identity() {
  return {reduce_identity<A>(ReduceOp::Max), std::numeric_limits<int64_t>::max()};
}

/// The first maximum of two candidates: the larger value, any NaN over any number, and the
/// smaller index on ties (two NaN included). Associative and commutative, so the scan or tree
/// order does not change the answer.
template <typename A> EMBER_HOST_DEVICE inline ArgPair<A> argmax_combine(ArgPair<A> a, ArgPair<A> b) {
  const bool an = is_nan(a.v), bn = is_nan(b.v);
  if (an || bn) {
    if (an && bn) return a.i < b.i ? a : b;
    return an ? a : b;
  }
  if (a.v > b.v) return a;
  if (b.v > a.v) return b;
  return a.i < b.i ? a : b;
}

}  // namespace ember::kernels::math
