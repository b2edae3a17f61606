// DType metadata and the 16-bit float conversions. The references here are computed in double
// from first principles (exponent, quantum, round-half-even via nearbyint) and share no code
// with core/half.h.
#include <catch2/catch.hpp>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include <ember/core/dtype.h>
#include <ember/core/half.h>

using ember::BFloat16;
using ember::DType;
using ember::Half;

namespace {

float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Value of a format with `mant_bits` explicit mantissa bits and minimum normal exponent `emin`,
// rounded to nearest even from x; returns +-inf past the largest finite value.
double round_to_format(double x, int mant_bits, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  double a = std::fabs(x);
  int e = std::max(static_cast<int>(std::floor(std::log2(a))), emin);
  // floor(log2) of an exact power of two can be off by one in libm; fix it up exactly.
  while (e > emin && std::ldexp(1.0, e) > a) --e;
  while (std::ldexp(1.0, e + 1) <= a) ++e;
  double quantum = std::ldexp(1.0, e - mant_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // FE_TONEAREST: ties to even
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

constexpr double kHalfMax = 65504.0;
const double kBf16Max = std::ldexp(255.0, 120);  // (2 - 2^-7) * 2^127

double half_ref(float f) { return round_to_format(f, 10, -14, kHalfMax); }
double bf16_ref(float f) { return round_to_format(f, 7, -126, kBf16Max); }

// Decodes a binary16 pattern independently: sign, 5-bit exponent, 10-bit mantissa.
double decode_half(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31) v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(man, -24);
  else v = std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

void check_half(float f) {
  INFO("f = " << f << " bits 0x" << std::hex << bits_of(f));
  Half h(f);
  double ref = half_ref(f);
  double got = decode_half(h.bits);
  if (std::isnan(ref)) {
    CHECK(std::isnan(got));
    return;
  }
  CHECK(got == ref);
  CHECK(std::signbit(got) == std::signbit(static_cast<double>(f)));  // incl. -0 and underflow to -0
  CHECK(static_cast<double>(static_cast<float>(h)) == ref);
}

void check_bf16(float f) {
  INFO("f = " << f << " bits 0x" << std::hex << bits_of(f));
  BFloat16 b(f);
  double ref = bf16_ref(f);
  double got = static_cast<float>(b);
  if (std::isnan(ref)) {
    CHECK(std::isnan(got));
    return;
  }
  CHECK(got == ref);
  CHECK(std::signbit(got) == std::signbit(static_cast<double>(f)));
}

}  // namespace

TEST_CASE("dtype sizes, names and parsing", "[cpu]") {
  CHECK(ember::dtype_size(DType::f32) == 4);
  CHECK(ember::dtype_size(DType::f64) == 8);
  CHECK(ember::dtype_size(DType::f16) == 2);
  CHECK(ember::dtype_size(DType::bf16) == 2);
  CHECK(ember::dtype_size(DType::i32) == 4);
  CHECK(ember::dtype_size(DType::i64) == 8);
  CHECK(ember::dtype_size(DType::u8) == 1);
  CHECK(ember::dtype_size(DType::boolean) == 1);
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean})
    CHECK(ember::dtype_from_string(ember::dtype_name(t)) == t);
  CHECK(std::string(ember::dtype_name(DType::boolean)) == "bool");
  try {
    ember::dtype_from_string("float32");
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(std::string(e.what()).find("'float32'") != std::string::npos);
  }
  CHECK(ember::is_floating(DType::bf16));
  CHECK_FALSE(ember::is_floating(DType::i64));
  CHECK(ember::dtype_of<ember::CppType<DType::f16>::type>() == DType::f16);
}

TEST_CASE("promote_types: float beats integer, wider beats narrower", "[cpu]") {
  CHECK(ember::promote_types(DType::f32, DType::f32) == DType::f32);
  CHECK(ember::promote_types(DType::i64, DType::f16) == DType::f16);
  CHECK(ember::promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(ember::promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(ember::promote_types(DType::bf16, DType::f16) == DType::f32);
  CHECK(ember::promote_types(DType::f16, DType::f32) == DType::f32);
  CHECK(ember::promote_types(DType::boolean, DType::u8) == DType::u8);
  CHECK(ember::promote_types(DType::i32, DType::u8) == DType::i32);
  CHECK(ember::promote_types(DType::i32, DType::i64) == DType::i64);
}

TEST_CASE("Half: every bit pattern decodes exactly and round-trips through float", "[cpu]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = Half::to_float(h);
    const double ref = decode_half(h);
    if (std::isnan(ref)) {
      if (!std::isnan(f)) FAIL("0x" << std::hex << i << " should decode to NaN");
      uint16_t back = Half::from_float(f);
      if (!((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0))
        FAIL("NaN 0x" << std::hex << i << " came back as 0x" << back);
      continue;
    }
    if (static_cast<double>(f) != ref) FAIL("0x" << std::hex << i << " decodes to " << f << ", expected " << ref);
    if (std::signbit(f) != ((h & 0x8000) != 0)) FAIL("sign of 0x" << std::hex << i);
    const uint16_t back = Half::from_float(f);
    if (back != h) FAIL("0x" << std::hex << i << " round-tripped to 0x" << back);
  }
  SUCCEED("all 65536 patterns");
}

TEST_CASE("Half: round to nearest even at ties, subnormals, overflow, inf, NaN", "[cpu]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  // Exact values and ties between neighbours (1 + k/1024 ± half a quantum).
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 6.103515625e-05f /* min normal */, 1.0f + 1.0f / 2048,
                  1.0f + 3.0f / 2048, 1.0f + 5.0f / 2048, 2048.0f + 1.0f, 2048.0f + 3.0f})
    check_half(f);
  CHECK(Half(1.0f + 1.0f / 2048).bits == 0x3c00);  // tie: rounds down to even
  CHECK(Half(1.0f + 3.0f / 2048).bits == 0x3c02);  // tie: rounds up to even
  // Subnormals: 2^-24 is the smallest; 2^-25 is a tie that rounds to 0; 1.5 * 2^-25 rounds up.
  CHECK(Half(std::ldexp(1.0f, -24)).bits == 0x0001);
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0x0000);
  CHECK(Half(-std::ldexp(1.0f, -25)).bits == 0x8000);
  CHECK(Half(std::ldexp(1.5f, -25)).bits == 0x0001);
  CHECK(Half(std::ldexp(3.0f, -25)).bits == 0x0002);  // tie between 1 and 2 quanta: even is 2
  CHECK(Half(std::ldexp(5.0f, -25)).bits == 0x0002);  // tie between 2 and 3 quanta: even is 2
  CHECK(Half(std::ldexp(1023.5f, -24)).bits == 0x0400);  // largest subnormal + half rounds to min normal
  CHECK(Half(1e-10f).bits == 0x0000);
  // Overflow: 65519.99 stays finite, 65520 (the tie with 65536) goes to inf.
  CHECK(Half(65519.0f).bits == 0x7bff);
  CHECK(Half(65520.0f).bits == 0x7c00);
  CHECK(Half(-65520.0f).bits == 0xfc00);
  CHECK(Half(1e30f).bits == 0x7c00);
  CHECK(Half(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(Half(-std::numeric_limits<float>::infinity()).bits == 0xfc00);
  Half nan(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan.bits & 0x7c00) == 0x7c00);
  CHECK((nan.bits & 0x03ff) != 0);
  CHECK(std::isnan(static_cast<float>(nan)));
  CHECK(std::isnan(static_cast<float>(Half(float_from_bits(0x7f800001u)))));  // signalling NaN stays NaN
}

TEST_CASE("Half: random floats of every magnitude match the float64 reference", "[cpu]") {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) check_half(float_from_bits(bits(rng)));
  // Concentrate on the half range, where rounding matters: exponents 2^-26 .. 2^16.
  std::uniform_real_distribution<float> expo(-26.0f, 16.5f);
  std::uniform_real_distribution<float> unit(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = std::ldexp(unit(rng), static_cast<int>(std::floor(expo(rng))));
    check_half(i % 2 ? f : -f);
  }
}

TEST_CASE("BFloat16: every bit pattern round-trips through float", "[cpu]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    BFloat16 x;
    x.bits = b;
    const float f = x;
    if (bits_of(f) != (i << 16)) FAIL("0x" << std::hex << i << " widened wrongly");
    const uint16_t back = BFloat16::from_float(f);
    if (std::isnan(f)) {
      if (!((back & 0x7f80) == 0x7f80 && (back & 0x7f) != 0))
        FAIL("NaN 0x" << std::hex << i << " came back as 0x" << back);
      continue;
    }
    if (back != b) FAIL("0x" << std::hex << i << " round-tripped to 0x" << back);
  }
  SUCCEED("all 65536 patterns");
}

TEST_CASE("BFloat16: round to nearest even, subnormals, overflow, inf, NaN", "[cpu]") {
  CHECK(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);  // tie: down to even
  CHECK(BFloat16(1.0f + std::ldexp(3.0f, -8)).bits == 0x3f82);  // tie: up to even
  CHECK(BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits == 0x3f81);  // above the tie
  CHECK(BFloat16(float_from_bits(0x00008000u)).bits == 0x0000);  // subnormal tie: down to even 0
  CHECK(BFloat16(float_from_bits(0x00018000u)).bits == 0x0002);  // subnormal tie: up to even
  CHECK(BFloat16(float_from_bits(0x7f7fffffu)).bits == 0x7f80);  // FLT_MAX rounds to inf
  CHECK(BFloat16(float_from_bits(0x7f7f7fffu)).bits == 0x7f7f);  // just below the tie: finite
  CHECK(BFloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(BFloat16(-std::numeric_limits<float>::infinity()).bits == 0xff80);
  CHECK(BFloat16(-0.0f).bits == 0x8000);
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    BFloat16 n(float_from_bits(nan_bits));
    CHECK(std::isnan(static_cast<float>(n)));  // never truncated to inf
  }
}

TEST_CASE("BFloat16: random floats match the float64 reference", "[cpu]") {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 300000; ++i) check_bf16(float_from_bits(bits(rng)));
}
