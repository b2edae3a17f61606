// CPU reductions over the middle dim of a contiguous (outer, R, inner) tensor.
//
// Floating inputs accumulate in double (more than the header's f32 promise) so that a sum of
// millions of f32 values stays within a few ulps; integer sums accumulate in int64. Identities,
// combines and the mean are the shared rules of kernels/reduce_math.h. Work is split
// two ways:
//   - over output elements (outer * inner) when there are enough of them to feed the threads;
//   - over fixed-size blocks of R when there are few outputs (a full reduction is outer = inner = 1):
//     each block yields one partial per output and the partials are combined in block order, so the
//     result does not depend on the number of threads.
#include <algorithm>
#include <type_traits>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/reduce.h>
#include <ember/kernels/reduce_math.h>

namespace ember::kernels::cpu {
namespace {

/// Rows of R handled by one task when splitting R; fixed so results are reproducible.
constexpr int64_t kRBlock = 8192;
/// Aim for at least this many elements of input per task.
constexpr int64_t kGrainElems = 32768;

template <typename T> constexpr bool kIsFloat = is_floating(dtype_of<T>());

/// Accumulator type: double for floating inputs, int64 for integers and booleans.
template <typename T> using acc_t = std::conditional_t<kIsFloat<T>, double, int64_t>;

/// Reduces x[r0:r1, i0:i1] of one (R, inner) slab into acc[0 : i1 - i0] (acc holds prior values).
/// OP is a template argument so that the combine inlines and the loops vectorize.
template <ReduceOp OP, typename T>
void reduce_slab(const T* x, int64_t inner, int64_t r0, int64_t r1, int64_t i0, int64_t i1, acc_t<T>* acc) {
  using A = acc_t<T>;
  const int64_t n = i1 - i0;
  if (inner == 1) {
    // One contiguous run: several independent accumulators shorten the dependency chain and, for
    // sums, make the rounding error grow like a blocked sum rather than a serial one.
    constexpr int kLanes = 8;
    A lane[kLanes];
    for (auto& l : lane) l = math::reduce_identity<A>(OP);
    const T* p = x + r0;
    const int64_t len = r1 - r0;
    int64_t r = 0;
    for (; r + kLanes <= len; r += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] = math::reduce_combine<A>(OP, lane[j], static_cast<A>(p[r + j]));
    }
    for (; r < len; ++r) lane[0] = math::reduce_combine<A>(OP, lane[0], static_cast<A>(p[r]));
    A total = acc[0];
    for (int j = 0; j < kLanes; ++j) total = math::reduce_combine<A>(OP, total, lane[j]);
    acc[0] = total;
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * inner + i0;
    for (int64_t i = 0; i < n; ++i) acc[i] = math::reduce_combine<A>(OP, acc[i], static_cast<A>(row[i]));
  }
}

/// *dst = the finalized result of R elements whose accumulator is v (R == 0: Mean gives NaN).
template <ReduceOp OP, typename O, typename A> inline void store(O* dst, A v, int64_t R) {
  *dst = math::reduce_finalize(OP, v, R, [](auto r) { return static_cast<O>(r); });
}

template <ReduceOp OP, typename T, typename O> void reduce_typed(const Tensor& xt, const Tensor& outt) {
  using A = acc_t<T>;
  const T* x = static_cast<const T*>(xt.data_ptr());
  O* out = static_cast<O*>(outt.data_ptr());
  const int64_t outer = xt.size(0), R = xt.size(1), inner = xt.size(2);
  const int64_t n_out = outer * inner;
  const int threads = num_threads();

  if (n_out >= 4 * static_cast<int64_t>(threads) || R <= kRBlock) {
    // Split over output elements; a chunk [b, e) of the flattened (outer, inner) index space is
    // walked one outer slab at a time so the inner loop stays contiguous.
    const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(R, 1));
    parallel_for(0, n_out, grain, [&](int64_t b, int64_t e) {
      std::vector<A> acc;
      while (b < e) {
        const int64_t o = b / inner, i0 = b % inner;
        const int64_t i1 = std::min(inner, i0 + (e - b));
        acc.assign(static_cast<size_t>(i1 - i0), math::reduce_identity<A>(OP));
        reduce_slab<OP, T>(x + o * R * inner, inner, 0, R, i0, i1, acc.data());
        for (int64_t i = i0; i < i1; ++i) store<OP>(out + o * inner + i, acc[i - i0], R);
        b += i1 - i0;
      }
    });
    return;
  }

  // Few outputs, long R: one partial per (R block, output), combined in block order.
  const int64_t n_blocks = (R + kRBlock - 1) / kRBlock;
  std::vector<A> partial(static_cast<size_t>(n_blocks * n_out), math::reduce_identity<A>(OP));
  parallel_for(0, n_blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t r0 = blk * kRBlock, r1 = std::min(R, r0 + kRBlock);
      A* acc = partial.data() + blk * n_out;
      for (int64_t o = 0; o < outer; ++o)
        reduce_slab<OP, T>(x + o * R * inner, inner, r0, r1, 0, inner, acc + o * inner);
    }
  });
  for (int64_t j = 0; j < n_out; ++j) {
    A total = math::reduce_identity<A>(OP);
    for (int64_t blk = 0; blk < n_blocks; ++blk) total = math::reduce_combine<A>(OP, total, partial[blk * n_out + j]);
    store<OP>(out + j, total, R);
  }
}

void reduce_cpu(ReduceOp op, const Tensor& x, const Tensor& out) {
  EMBER_DISPATCH_ALL(x.dtype(), "reduce (cpu)", [&]<typename T>() {
    visit_op(op, [&](auto opc) {
      constexpr ReduceOp OP = decltype(opc)::value;
      if (out.dtype() == x.dtype()) {
        reduce_typed<OP, T, T>(x, out);
      } else {
        EMBER_CHECK(out.dtype() == DType::i64, op_name(op), " (cpu): unexpected result dtype ", dtype_name(out.dtype()),
                    " for input dtype ", dtype_name(x.dtype()));
        reduce_typed<OP, T, int64_t>(x, out);
      }
    });
  });
}

/// First index of the maximum along R; NaN counts as larger than everything (first NaN wins).
template <typename T> void argmax_typed(const Tensor& xt, const Tensor& outt) {
  using C = std::conditional_t<kIsFloat<T>, std::conditional_t<std::is_same_v<T, double>, double, float>,
                               std::conditional_t<std::is_same_v<T, bool>, int, T>>;
  const T* x = static_cast<const T*>(xt.data_ptr());
  int64_t* out = outt.data<int64_t>();
  const int64_t outer = xt.size(0), R = xt.size(1), inner = xt.size(2);
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(R, 1));
  parallel_for(0, outer * inner, grain, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t o = j / inner, i = j % inner;
      const T* p = x + o * R * inner + i;
      // A scan from r = 0 in math::argmax_combine's order; a NaN is final, so it stops the scan.
      math::ArgPair<C> best{static_cast<C>(p[0]), 0};
      for (int64_t r = 1; r < R && !math::is_nan(best.v); ++r)
        best = math::argmax_combine(best, math::ArgPair<C>{static_cast<C>(p[r * inner]), r});
      out[j] = best.i;
    }
  });
}

void argmax_cpu(const Tensor& x, const Tensor& out) {
  EMBER_DISPATCH_ALL(x.dtype(), "argmax (cpu)", [&]<typename T>() { argmax_typed<T>(x, out); });
}

}  // namespace

void register_reduce() {
  reduce_table.set(DeviceType::CPU, &reduce_cpu);
  argmax_table.set(DeviceType::CPU, &argmax_cpu);
}

}  // namespace ember::kernels::cpu
