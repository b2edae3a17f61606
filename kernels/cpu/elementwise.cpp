// CPU elementwise kernels. Operands arrive expanded to the output shape (stride 0 on broadcast
// dims); `out` is contiguous. Each op is one instantiation of map_n over the element types: when
// every input is contiguous it is a plain indexed loop the compiler vectorizes, otherwise runs
// along the innermost merged dim (kernels/cpu/loops.h). f16/bf16 compute in float.
#include <tuple>
#include <type_traits>
#include <utility>

#include <ember/core/thread_pool.h>
#include <ember/kernels/convert.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/loops.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/elementwise_math.h>

namespace ember::kernels::cpu {
namespace {

// The loops of map_impl. Every (op, dtype) pair instantiates them, so they are what this file's
// compile time is made of (8 dtypes x 55 maps). unit_loop, the one the compiler vectorizes, serves
// both the all-contiguous path and the unit-stride runs and is not inlined: one copy of the vector
// loop per pair instead of two (g++ -O3: 226 s -> 135 s for this file, docs/testing.md), for a
// call per parallel chunk or run. strided_loop (any stride, 0 for a broadcast operand) stays inline.
template <typename O, typename F, typename... In, size_t... I>
EMBER_NOINLINE void unit_loop(O* o, const F& f, int64_t n, std::index_sequence<I...>, const In*... p) {
  for (int64_t j = 0; j < n; ++j) o[j] = f(p[j]...);
}

template <typename O, typename F, typename... In, size_t... I>
inline void strided_loop(O* o, int64_t so, const F& f, int64_t n, std::index_sequence<I...>,
                         std::array<int64_t, sizeof...(In)> st, const In*... p) {
  for (int64_t j = 0; j < n; ++j) o[j * so] = f(p[j * st[I]]...);
}

// out[i] = f(in_0[i], ..., in_{K-1}[i]) over out's shape; O and In... are the storage types.
template <typename O, typename... In, typename F, size_t... I>
void map_impl(const Tensor& out, const F& f, const std::array<const Tensor*, sizeof...(In)>& ins,
              std::index_sequence<I...> seq) {
  constexpr size_t K = sizeof...(In);
  O* const po = static_cast<O*>(out.data_ptr());
  const std::tuple<const In*...> pin{static_cast<const In*>(ins[I]->data_ptr())...};
  const int64_t n = out.numel();
  if ((ins[I]->is_contiguous() && ...)) {
    parallel_for(0, n, kGrain,
                 [&](int64_t b, int64_t e) { unit_loop<O>(po + b, f, e - b, seq, (std::get<I>(pin) + b)...); });
    return;
  }
  const auto g = make_geometry<K + 1>(out.sizes(), {&out.strides(), &ins[I]->strides()...});
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    strided_runs(g, b, e,
                 [&](const std::array<int64_t, K + 1>& off, const std::array<int64_t, K + 1>& st, int64_t cnt) {
                   O* const o = po + off[0];
                   if (st[0] == 1 && ((st[I + 1] == 1) && ...))
                     unit_loop<O>(o, f, cnt, seq, (std::get<I>(pin) + off[I + 1])...);
                   else
                     strided_loop<O>(o, st[0], f, cnt, seq, std::array<int64_t, K>{st[I + 1]...},
                                     (std::get<I>(pin) + off[I + 1])...);
                 });
  });
}

template <typename O, typename... In, typename F>
void map_n(const Tensor& out, const F& f, const std::array<const Tensor*, sizeof...(In)>& ins) {
  map_impl<O, In...>(out, f, ins, std::index_sequence_for<In...>{});
}

// Whether OP is computable for storage type T (the front checks this with a readable message; here
// it only keeps impossible instantiations out of the build).
template <UnaryOp OP, typename T> constexpr bool unary_supported() {
  using A = opmath_t<T>;
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint8_t>) return false;
  else if constexpr (std::is_floating_point_v<A>) return true;
  else return unary_allows_integers(OP);
}

template <BinaryOp OP, typename T> constexpr bool binary_supported() {
  return !std::is_same_v<T, bool> || binary_allows_bool(OP);
}

void unary_impl(UnaryOp op, const Tensor& x, const Tensor& out) {
  EMBER_DISPATCH_ALL(x.dtype(), op_name(op), [&]<typename T>() {
    using A = opmath_t<T>;
    visit_op(op, [&](auto opc) {
      constexpr UnaryOp OP = decltype(opc)::value;
      if constexpr (unary_supported<OP, T>()) {
        map_n<T, T>(out, [](T v) { return static_cast<T>(math::unary_apply<OP>(static_cast<A>(v))); }, {&x});
      } else {
        EMBER_FAIL(op_name(op), " (cpu): unsupported dtype ", dtype_name(x.dtype()));
      }
    });
  });
}

void unary_backward_impl(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, const Tensor& out) {
  EMBER_DISPATCH_ALL(grad.dtype(), op_name(op), [&]<typename T>() {
    using A = opmath_t<T>;
    visit_op(op, [&](auto opc) {
      constexpr UnaryOp OP = decltype(opc)::value;
      if constexpr (!unary_supported<OP, T>()) {
        EMBER_FAIL(op_name(op), " backward (cpu): unsupported dtype ", dtype_name(grad.dtype()));
      } else if constexpr (unary_grad_reads(OP) == UnaryGradReads::None) {
        map_n<T, T>(out, [](T g) { return static_cast<T>(math::unary_backward_apply<OP>(static_cast<A>(g), A(0))); },
                    {&grad});
      } else {
        const Tensor& v = x.defined() ? x : y;
        // The front (kernels/elementwise.cpp: unary_backward) passes the operand the formula reads,
        // converted to grad's dtype: debug-only.
        EMBER_DEBUG_ASSERT(v.defined() && v.dtype() == grad.dtype(), op_name(op), " backward (cpu): operand missing");
        map_n<T, T, T>(out,
                       [](T g, T w) {
                         return static_cast<T>(math::unary_backward_apply<OP>(static_cast<A>(g), static_cast<A>(w)));
                       },
                       {&grad, &v});
      }
    });
  });
}

// Integer division by zero has no value (and traps on x86): refuse it with a clear error.
template <typename T> void check_no_zero_divisor(const Tensor& b) {
  if constexpr (std::is_integral_v<T>) {
    bool zero = false;
    const auto probe = empty(b.sizes(), {.dtype = DType::boolean});
    map_n<bool, T>(probe, [](T v) { return v == T(0); }, {&b});
    const bool* p = probe.data<bool>();
    for (int64_t i = 0; i < probe.numel() && !zero; ++i) zero = p[i];
    EMBER_CHECK(!zero, "div: integer division by zero (divisor of dtype ", dtype_name(b.dtype()), " contains 0)");
  }
}

void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  EMBER_DISPATCH_ALL(a.dtype(), op_name(op), [&]<typename T>() {
    using A = opmath_t<T>;
    visit_op(op, [&](auto opc) {
      constexpr BinaryOp OP = decltype(opc)::value;
      if constexpr (!binary_supported<OP, T>()) {
        EMBER_FAIL(op_name(op), " (cpu): not defined for dtype ", dtype_name(a.dtype()));
      } else if constexpr (is_comparison(OP)) {
        map_n<bool, T, T>(out, [](T u, T v) { return math::binary_apply<OP>(static_cast<A>(u), static_cast<A>(v)); },
                          {&a, &b});
      } else {
        if constexpr (OP == BinaryOp::Div) check_no_zero_divisor<T>(b);
        map_n<T, T, T>(
            out, [](T u, T v) { return static_cast<T>(math::binary_apply<OP>(static_cast<A>(u), static_cast<A>(v))); },
            {&a, &b});
      }
    });
  });
}

void binary_scalar_impl(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  EMBER_DISPATCH_ALL(a.dtype(), op_name(op), [&]<typename T>() {
    using A = opmath_t<T>;
    // The scalar takes a's dtype: integers truncate it, floats keep it at op-math precision.
    const A sv = std::is_floating_point_v<A> ? static_cast<A>(s) : static_cast<A>(convert<T>(s));
    visit_op(op, [&](auto opc) {
      constexpr BinaryOp OP = decltype(opc)::value;
      if constexpr (!binary_supported<OP, T>()) {
        EMBER_FAIL(op_name(op), " (cpu): not defined for dtype ", dtype_name(a.dtype()));
      } else {
        using R = std::conditional_t<is_comparison(OP), bool, T>;
        if constexpr (OP == BinaryOp::Div && std::is_integral_v<T>)
          EMBER_CHECK(scalar_first || sv != A(0), "div: integer division by zero (scalar divisor 0)");
        if constexpr (OP == BinaryOp::Div && std::is_integral_v<T>)
          if (scalar_first) check_no_zero_divisor<T>(a);
        if (scalar_first)
          map_n<R, T>(out, [sv](T v) { return static_cast<R>(math::binary_apply<OP>(sv, static_cast<A>(v))); }, {&a});
        else
          map_n<R, T>(out, [sv](T v) { return static_cast<R>(math::binary_apply<OP>(static_cast<A>(v), sv)); }, {&a});
      }
    });
  });
}

void where_impl(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  // The front (kernels/elementwise.cpp: where) refuses other cond dtypes and converts cond to bool: debug-only.
  EMBER_DEBUG_ASSERT(cond.dtype() == DType::boolean || cond.dtype() == DType::u8,
                     "where (cpu): cond must be bool or u8, got ", dtype_name(cond.dtype()));
  EMBER_DISPATCH_ALL(a.dtype(), "where", [&]<typename T>() {
    // cond is read as bytes: any nonzero byte selects a.
    map_n<T, uint8_t, T, T>(out, [](uint8_t c, T u, T v) { return c ? u : v; }, {&cond, &a, &b});
  });
}

}  // namespace

void register_elementwise() {
  unary_table.set(DeviceType::CPU, &unary_impl);
  unary_backward_table.set(DeviceType::CPU, &unary_backward_impl);
  binary_table.set(DeviceType::CPU, &binary_impl);
  binary_scalar_table.set(DeviceType::CPU, &binary_scalar_impl);
  where_table.set(DeviceType::CPU, &where_impl);
}

}  // namespace ember::kernels::cpu
