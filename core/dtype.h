#pragma once
// Element types. Tensors carry one of these; kernels switch on it with EMBER_DISPATCH_* below.
#include <cstddef>
#include <cstdint>
#include <string>

#include <ember/core/error.h>
#include <ember/core/half.h>

namespace ember {

/// Element type of a tensor. `boolean` is stored as one byte holding 0 or 1.
enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 0;
}
/// Short name as printed in errors: "f32", "i64", ...
const char* dtype_name(DType t);
/// Parses a name produced by dtype_name.
DType dtype_from_string(const std::string& s);
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
/// The dtype both operands of a binary op are converted to (PyTorch-like promotion:
/// float beats integer, wider beats narrower; f16 with bf16 gives f32).
DType promote_types(DType a, DType b);

/// C++ type for a DType.
template <DType> struct CppType;
template <> struct CppType<DType::f32> { using type = float; };
template <> struct CppType<DType::f64> { using type = double; };
template <> struct CppType<DType::f16> { using type = Half; };
template <> struct CppType<DType::bf16> { using type = BFloat16; };
template <> struct CppType<DType::i32> { using type = int32_t; };
template <> struct CppType<DType::i64> { using type = int64_t; };
template <> struct CppType<DType::u8> { using type = uint8_t; };
template <> struct CppType<DType::boolean> { using type = bool; };

/// DType of a C++ type.
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

}  // namespace ember

// EMBER_DISPATCH_ALL(dtype, "opname", [&]<typename scalar_t>() { ... }) calls the lambda with
// scalar_t bound to the dtype's C++ type. The FLOAT variant accepts f32/f64/f16/bf16 only.
// (clang-format 14 re-indents a run of case macros differently on every pass, so not here.)
// clang-format off
#define EMBER_DISPATCH_CASE_(DT, ...) \
  case ::ember::DType::DT:            \
    return __VA_ARGS__.template operator()<typename ::ember::CppType<::ember::DType::DT>::type>();

#define EMBER_DISPATCH_ALL(dtype, name, ...)                              \
  [&] {                                                                   \
    switch (dtype) {                                                      \
      EMBER_DISPATCH_CASE_(f32, __VA_ARGS__)                              \
      EMBER_DISPATCH_CASE_(f64, __VA_ARGS__)                              \
      EMBER_DISPATCH_CASE_(f16, __VA_ARGS__)                              \
      EMBER_DISPATCH_CASE_(bf16, __VA_ARGS__)                             \
      EMBER_DISPATCH_CASE_(i32, __VA_ARGS__)                              \
      EMBER_DISPATCH_CASE_(i64, __VA_ARGS__)                              \
      EMBER_DISPATCH_CASE_(u8, __VA_ARGS__)                               \
      EMBER_DISPATCH_CASE_(boolean, __VA_ARGS__)                          \
    }                                                                     \
    EMBER_FAIL(name, ": unsupported dtype ", ::ember::dtype_name(dtype)); \
  }()

#define EMBER_DISPATCH_FLOAT(dtype, name, ...)                                                               \
  [&] {                                                                                                      \
    switch (dtype) {                                                                                         \
      EMBER_DISPATCH_CASE_(f32, __VA_ARGS__)                                                                 \
      EMBER_DISPATCH_CASE_(f64, __VA_ARGS__)                                                                 \
      EMBER_DISPATCH_CASE_(f16, __VA_ARGS__)                                                                 \
      EMBER_DISPATCH_CASE_(bf16, __VA_ARGS__)                                                                \
      default: break;                                                                                        \
    }                                                                                                        \
    EMBER_FAIL(name, ": expected a floating dtype (f32, f64, f16, bf16), got ", ::ember::dtype_name(dtype)); \
  }()
// clang-format on
