#pragma once
// Tensor factories (namespace ember, as users write them: ember::zeros(...)). Each takes one
// TensorOptions argument (core/tensor_options.h) for dtype, device and requires_grad:
//
//   Tensor w = randn({3, 2}, {.device = dev, .requires_grad = true});
//   Tensor x = tensor({{1.0f, 2.0f}, {3.0f, 4.0f}});      // f32, shape [2, 2]
//   Tensor y = from_vector(values, {2, 3}, {.dtype = DType::f16});
//
// Literals and host data: tensor() takes nested braced lists (the nesting gives the shape);
// from_vector() copies a vector, span or braced list into a tensor of a given shape; from_blob()
// wraps memory the caller owns without copying.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <vector>

#include <ember/core/rng.h>
#include <ember/core/tensor.h>

namespace ember {

Tensor zeros(const Shape& sizes, const TensorOptions& options = {});
Tensor ones(const Shape& sizes, const TensorOptions& options = {});
Tensor full(const Shape& sizes, double value, const TensorOptions& options = {});
/// A tensor of `t`'s shape and layout filled with `value` (dtype and device from `t` unless options
/// say otherwise); zeros_like and ones_like are this with 0 and 1.
Tensor full_like(const Tensor& t, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t, const TensorOptions& options = {});
Tensor ones_like(const Tensor& t, const TensorOptions& options = {});
/// [start, end) with `step` (1-D). dtype f32 unless options say otherwise; integral dtypes are exact.
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = {});
/// [0, end), dtype i64 unless options say otherwise.
Tensor arange(int64_t end, const TensorOptions& options = {});
/// U[0, 1) and N(0, 1) from `gen` (the default generator when omitted); floating dtypes only.
Tensor rand(const Shape& sizes, const TensorOptions& options = {}, Generator& gen = default_generator());
Tensor randn(const Shape& sizes, const TensorOptions& options = {}, Generator& gen = default_generator());
/// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, const TensorOptions& options = {});

/// A tensor over `data`, memory the caller owns: nothing is copied, writes through the tensor (and
/// its views) change the caller's buffer and the other way round, and the caller keeps the memory
/// alive and in place for as long as the tensor, a view of it or an autograd record using it lives.
/// options.dtype says how the bytes are read (f32 when unset); options.device says where `data` is:
/// host memory for the CPU (the default), or device memory of that GPU for a CUDA device (ember
/// cannot check which a pointer is, so a host pointer passed as CUDA memory fails in the kernel).
/// `strides` are in elements (row-major when empty); `data` must be aligned to the element size.
Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& options = {}, const Shape& strides = {});

/// The C++ types tensors can be made from, with their dtypes: float f32, double f64, Half f16,
/// BFloat16 bf16, int32_t i32, int64_t i64, uint8_t u8, bool.
template <typename T>
concept TensorElement =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>;

/// Element types of a braced literal: the above, and any integer type (a literal `1` is an int).
template <typename T>
concept LiteralElement = TensorElement<T> ||(std::is_integral_v<T> && !std::is_same_v<T, bool>);

/// The dtype a literal of type T gives: integers i64 (as in PyTorch), bool bool, floats their own.
template <LiteralElement T> constexpr DType literal_dtype() {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return DType::i64;
  else return dtype_of<T>();
}

/// Copies `values` (row-major; their count must equal the shape's) into a new tensor. The dtype is
/// the element type's (int32_t gives i32, uint8_t u8) unless options.dtype names another, to which
/// the values are converted as Tensor::to(DType) converts.
template <TensorElement T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, const TensorOptions& options = {});
template <typename T, size_t N>
requires TensorElement<std::remove_const_t<T>> Tensor from_vector(std::span<T, N> values, const Shape& sizes,
                                                                  const TensorOptions& options = {});
/// A braced list: from_vector({0.1f, 0.2f, 0.3f}, {3}). Its elements are literals, so integers give
/// i64, as in tensor(); a list mixing kinds, from_vector({1, 2.5}, {2}), is promoted as tensor()
/// promotes one (below), and from_vector<double>({1, 2.5}, {2}) names the type instead.
template <LiteralElement T>
Tensor from_vector(std::initializer_list<T> values, const Shape& sizes, const TensorOptions& options = {});

/// A tensor from nested braced lists; the nesting gives the shape (1-D to 4-D):
///   tensor({0.1f, 0.2f, 0.3f})   f32 [3]
///   tensor({{1, 2}, {3, 4}})     i64 [2, 2]
/// The element type picks the dtype (float f32, double f64, integers i64, bool bool) unless
/// options.dtype names another. Lists of one level must have equal lengths: a ragged list throws,
/// naming the row ("tensor: row 1 has 3 elements, expected 2").
template <LiteralElement T> Tensor tensor(std::initializer_list<T> values, const TensorOptions& options = {});
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> values, const TensorOptions& options = {});
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values,
              const TensorOptions& options = {});
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> values,
              const TensorOptions& options = {});

/// One element of a braced list that mixes kinds of literals, such as {1, -2, 0.5f}, which the
/// templates above cannot deduce one element type for. It converts implicitly from any integer,
/// float, double or bool; a list of one type still takes the templates (an exact match).
class MixedLiteral {
 public:
  /// What the literal was written as; the promotion below ranks them in this order.
  enum class Kind : uint8_t { boolean, integer, f32, f64 };
  template <typename I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) constexpr MixedLiteral(I v)
      : kind_(Kind::integer), int_(static_cast<int64_t>(v)), real_(static_cast<double>(v)) {}
  constexpr MixedLiteral(bool v) : kind_(Kind::boolean), int_(v ? 1 : 0), real_(v ? 1.0 : 0.0) {}
  constexpr MixedLiteral(float v) : kind_(Kind::f32), int_(0), real_(v) {}
  constexpr MixedLiteral(double v) : kind_(Kind::f64), int_(0), real_(v) {}
  constexpr Kind kind() const { return kind_; }
  /// The value of an integer or bool literal, exact.
  constexpr int64_t int_value() const { return int_; }
  /// The value as a double (a float literal widened exactly).
  constexpr double real_value() const { return real_; }

 private:
  Kind kind_;
  int64_t int_;
  double real_;
};

/// A mixed list promoted as Python's torch.tensor promotes one: with a double among them f64, else
/// with a float f32, else (integers and bools) i64, an empty list f32; options.dtype, when set,
/// converts from that.
/// tensor({1, -2, 0.5f}) is f32 [3]; tensor({{1, 2}, {3, 4.5}}) f64 [2, 2]. (libtorch's C++
/// tensor() takes such lists too, but only finds the mix out at run time.)
Tensor tensor(std::initializer_list<MixedLiteral> values, const TensorOptions& options = {});
Tensor tensor(std::initializer_list<std::initializer_list<MixedLiteral>> values, const TensorOptions& options = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<MixedLiteral>>> values,
              const TensorOptions& options = {});
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<MixedLiteral>>>> values,
    const TensorOptions& options = {});
/// from_vector({1, 2.5}, {2}): a mixed braced list, promoted as tensor() promotes one (f64 here).
Tensor from_vector(std::initializer_list<MixedLiteral> values, const Shape& sizes, const TensorOptions& options = {});

// ---- template definitions ----
namespace detail {

/// A new tensor of `sizes` and `options` (dtype default `src_dtype`) holding the `count` elements of
/// dtype `src_dtype` at host address `data`, converted. `who` names the caller in errors.
Tensor from_host(const void* data, DType src_dtype, int64_t count, const Shape& sizes, const TensorOptions& options,
                 const char* who);

/// How a literal of type T is stored before the copy: integers widened to int64_t, bool as one byte.
template <typename T>
using LiteralStore =
    std::conditional_t<std::is_same_v<T, bool>, uint8_t, std::conditional_t<std::is_integral_v<T>, int64_t, T>>;

template <typename T> struct IsList : std::false_type {};
template <typename T> struct IsList<std::initializer_list<T>> : std::true_type {};

/// The list at `path[0..depth)` of a literal: "1" in a 2-D literal, "[1][0]" deeper down.
std::string row_name(const std::vector<int64_t>& path, size_t depth);

/// Appends the elements of a nested literal to `out` in row-major order. The first list met at each
/// depth fixes that dim in `sizes` (-1 until then); every later list of that depth must match it.
/// path[d] is the index of the current list among its siblings at depth d + 1. (Both vectors are
/// sized up front: push_back here trips GCC 12's -Warray-bounds false positive once inlined.)
template <typename L, typename S>
void flatten_literal(const L& list, size_t depth, Shape& sizes, std::vector<int64_t>& path, std::vector<S>& out) {
  if constexpr (IsList<L>::value) {
    const auto n = static_cast<int64_t>(list.size());
    if (sizes[depth] < 0) sizes[depth] = n;
    EMBER_CHECK(n == sizes[depth], "tensor: row ", row_name(path, depth), " has ", n, " elements, expected ",
                sizes[depth]);
    path[depth] = 0;
    for (const auto& item : list) {
      flatten_literal(item, depth + 1, sizes, path, out);
      ++path[depth];
    }
  } else {
    out.push_back(static_cast<S>(list));
  }
}

template <typename T, typename L>
Tensor tensor_from_literal(const L& values, size_t depth, const TensorOptions& options) {
  Shape sizes(depth, -1);
  std::vector<int64_t> path(depth, 0);
  std::vector<LiteralStore<T>> flat;
  flatten_literal(values, 0, sizes, path, flat);
  for (int64_t& s : sizes) s = s < 0 ? 0 : s;  // dims below an empty list: size 0
  return from_host(flat.data(), literal_dtype<T>(), static_cast<int64_t>(flat.size()), sizes, options, "tensor");
}

}  // namespace detail

template <TensorElement T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, const TensorOptions& options) {
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: unpack to bytes
    const std::vector<uint8_t> bytes(values.begin(), values.end());
    return detail::from_host(bytes.data(), DType::boolean, static_cast<int64_t>(bytes.size()), sizes, options,
                             "from_vector");
  } else {
    return detail::from_host(values.data(), dtype_of<T>(), static_cast<int64_t>(values.size()), sizes, options,
                             "from_vector");
  }
}

template <typename T, size_t N>
requires TensorElement<std::remove_const_t<T>> Tensor from_vector(std::span<T, N> values, const Shape& sizes,
                                                                  const TensorOptions& options) {
  return detail::from_host(values.data(), dtype_of<std::remove_const_t<T>>(), static_cast<int64_t>(values.size()),
                           sizes, options, "from_vector");
}

template <LiteralElement T>
Tensor from_vector(std::initializer_list<T> values, const Shape& sizes, const TensorOptions& options) {
  const std::vector<detail::LiteralStore<T>> stored(values.begin(), values.end());
  return detail::from_host(stored.data(), literal_dtype<T>(), static_cast<int64_t>(stored.size()), sizes, options,
                           "from_vector");
}

template <LiteralElement T> Tensor tensor(std::initializer_list<T> values, const TensorOptions& options) {
  return detail::tensor_from_literal<T>(values, 1, options);
}
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> values, const TensorOptions& options) {
  return detail::tensor_from_literal<T>(values, 2, options);
}
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values,
              const TensorOptions& options) {
  return detail::tensor_from_literal<T>(values, 3, options);
}
template <LiteralElement T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> values,
              const TensorOptions& options) {
  return detail::tensor_from_literal<T>(values, 4, options);
}

}  // namespace ember
