#pragma once
// Per-element sampling transforms shared by the CPU and CUDA sampling kernels, so both turn the
// same Philox words into the same values (up to the last-ulp differences of each device's libm
// in log/sin/cos). Layout: element i uses block philox4x32(seed, offset + i / 4), lane i % 4.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/rng.h"
#include "kernels/convert.h"

namespace ember::kernels {

/// The representable value of T just below x (x finite).
template <typename T>
EMBER_HOST_DEVICE inline T next_below(T x) {
  if constexpr (is_reduced_float_v<T>) {
    const uint16_t b = x.bits;
    x.bits = (b & 0x7fffu) == 0 ? uint16_t(0x8001u) : (b & 0x8000u) ? uint16_t(b + 1) : uint16_t(b - 1);
  } else if constexpr (sizeof(T) == 4) {
    uint32_t b;
    memcpy(&b, &x, 4);
    b = (b & 0x7fffffffu) == 0 ? 0x80000001u : (b & 0x80000000u) ? b + 1 : b - 1;
    memcpy(&x, &b, 4);
  } else {
    uint64_t b;
    memcpy(&b, &x, 8);
    b = (b & 0x7fffffffffffffffull) == 0 ? 0x8000000000000001ull : (b >> 63) ? b + 1 : b - 1;
    memcpy(&x, &b, 8);
  }
  return x;
}

/// U[lo, hi) in T from 32 random bits: lo + (hi - lo) * u in double, u = uint_to_unit_float(bits).
/// Rounding to a narrow T can land on hi (1 - 2^-24 rounds to 1 in f16); such values step down
/// to the largest T below hi, keeping the interval half-open.
template <typename T>
EMBER_HOST_DEVICE inline T uniform_value(uint32_t bits, double lo, double hi) {
  const double v = lo + (hi - lo) * static_cast<double>(uint_to_unit_float(bits));
  T t = convert<T>(v);
  if (hi > lo && static_cast<double>(static_cast<opmath_t<T>>(t)) >= hi) t = next_below(convert<T>(hi));
  return t;
}

/// Standard normal for `lane` of a Philox block by Box-Muller: lanes (lane & ~1, lane | 1) form the
/// pair; u1 = 1 - unit(first) lies in (0, 1] so log(u1) is finite; u2 = unit(second); even lanes
/// take r * cos(2 pi u2), odd lanes r * sin(2 pi u2), r = sqrt(-2 log u1). Float math.
EMBER_HOST_DEVICE inline float normal_value_f32(const Philox4& r, int lane) {
  const float u1 = 1.0f - uint_to_unit_float(r.v[lane & ~1]);
  const float u2 = uint_to_unit_float(r.v[lane | 1]);
  const float rad = sqrtf(-2.0f * logf(u1));
  const float theta = 6.2831853071795864769f * u2;
  return (lane & 1) ? rad * sinf(theta) : rad * cosf(theta);
}
/// Same as normal_value_f32 in double math (for f64 tensors).
EMBER_HOST_DEVICE inline double normal_value_f64(const Philox4& r, int lane) {
  const double u1 = 1.0 - static_cast<double>(uint_to_unit_float(r.v[lane & ~1]));
  const double u2 = static_cast<double>(uint_to_unit_float(r.v[lane | 1]));
  const double rad = sqrt(-2.0 * log(u1));
  const double theta = 6.283185307179586476925 * u2;
  return (lane & 1) ? rad * sin(theta) : rad * cos(theta);
}

}  // namespace ember::kernels
