#pragma once
// Element conversion shared by the CPU and CUDA copy/cast kernels, so both devices cast alike:
// floating targets round to nearest (16-bit types through float), floating -> integer truncates
// toward zero through i64 (narrow integer targets wrap), anything -> bool is `!= 0`, bool -> number
// gives 0 or 1. Floating values i64 cannot hold convert as CUDA's conversion instruction does them:
// NaN to 0, the rest saturated to i64's range (C++ leaves them undefined; found by UBSan).
#include <cstdint>
#include <type_traits>

#include <ember/core/half.h>

namespace ember::kernels {

template <typename T> inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Floating s truncated toward zero to i64; NaN gives 0 and values beyond i64's range its limits.
template <typename S> EMBER_HOST_DEVICE inline int64_t float_to_i64(S s) {
  constexpr S two63 = S(9223372036854775808.0);  // 2^63: exact in float and double
  return s != s ? int64_t(0) : s >= two63 ? INT64_MAX : s < -two63 ? INT64_MIN : static_cast<int64_t>(s);
}

/// src converted to D under the rules above.
template <typename D, typename S> EMBER_HOST_DEVICE inline D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_reduced_float_v<S>) {
    return convert<D>(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (is_reduced_float_v<D>) {
    return D(static_cast<float>(s));
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    return static_cast<D>(float_to_i64(s));
  } else {
    return static_cast<D>(s);
  }
}

/// The type arithmetic on T is done in: float for f16/bf16, T otherwise.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

}  // namespace ember::kernels
