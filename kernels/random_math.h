#pragma once
// Per-element sampling transforms shared by the CPU and CUDA sampling kernels, so both turn the
// same Philox words into the same values (up to the last-ulp differences of each device's libm
// in log/sin/cos). Layout: element i uses block philox4x32(seed, offset + i / 4), lane i % 4.
#include <cmath>
#include <cstdint>
#include <cstring>

#include <ember/core/rng.h>
#include <ember/kernels/convert.h>

namespace ember::kernels {

/// The representable value of T just below x (x finite).
template <typename T> EMBER_HOST_DEVICE inline T next_below(T x) {
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
template <typename T> EMBER_HOST_DEVICE inline T uniform_value(uint32_t bits, double lo, double hi) {
  const double v = lo + (hi - lo) * static_cast<double>(uint_to_unit_float(bits));
  T t = convert<T>(v);
  if (hi > lo && static_cast<double>(static_cast<opmath_t<T>>(t)) >= hi) t = next_below(convert<T>(hi));
  return t;
}

/// Standard normals of one Box-Muller pair of a Philox block: lanes (2 * pair, 2 * pair + 1).
/// u1 = 1 - unit(first word) lies in (0, 1] so log(u1) is finite; u2 = unit(second word);
/// r = sqrt(-2 log u1); the even lane gets r * cos(2 pi u2), the odd lane r * sin(2 pi u2).
/// Float math. Computing a pair at once halves the log/sqrt work of normal_value_f32.
EMBER_HOST_DEVICE inline void normal_pair_f32(const Philox4& r, int pair, float& z_even, float& z_odd) {
  const float u1 = 1.0f - uint_to_unit_float(r.v[2 * pair]);
  const float u2 = uint_to_unit_float(r.v[2 * pair + 1]);
  const float rad = sqrtf(-2.0f * logf(u1));
  const float theta = 6.2831853071795864769f * u2;
  z_even = rad * cosf(theta);
  z_odd = rad * sinf(theta);
}
/// Same as normal_pair_f32 in double math (for f64 tensors).
EMBER_HOST_DEVICE inline void normal_pair_f64(const Philox4& r, int pair, double& z_even, double& z_odd) {
  const double u1 = 1.0 - static_cast<double>(uint_to_unit_float(r.v[2 * pair]));
  const double u2 = static_cast<double>(uint_to_unit_float(r.v[2 * pair + 1]));
  const double rad = sqrt(-2.0 * log(u1));
  const double theta = 6.283185307179586476925 * u2;
  z_even = rad * cos(theta);
  z_odd = rad * sin(theta);
}

/// Standard normal for one `lane` of a Philox block: the lane's half of its Box-Muller pair
/// (lanes (lane & ~1, lane | 1)), identical to what normal_pair_f32 gives for that lane.
EMBER_HOST_DEVICE inline float normal_value_f32(const Philox4& r, int lane) {
  float z_even, z_odd;
  normal_pair_f32(r, lane >> 1, z_even, z_odd);
  return (lane & 1) ? z_odd : z_even;
}
/// Same as normal_value_f32 in double math (for f64 tensors).
EMBER_HOST_DEVICE inline double normal_value_f64(const Philox4& r, int lane) {
  double z_even, z_odd;
  normal_pair_f64(r, lane >> 1, z_even, z_odd);
  return (lane & 1) ? z_odd : z_even;
}

}  // namespace ember::kernels
