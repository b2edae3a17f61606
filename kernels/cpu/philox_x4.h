#pragma once
// Philox-4x32-10 for four consecutive counters at once with SSE2 (part of every x86-64 CPU), for
// the CPU kernels that draw one Philox block per 4 elements (dropout). The scalar philox4x32 of
// core/rng.h spends its time in 20 dependent 32x32->64-bit multiplies per block; here each
// _mm_mul_epu32 does two of them, and four blocks run side by side. Results are bit-identical to
// philox4x32 (checked against it in tests/kernels/test_philox_x4.cpp).
#include <cstdint>

#include <ember/core/rng.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define EMBER_HAVE_PHILOX_X4 1

namespace ember::kernels::cpu {

/// Lane j of out[w] = word w of philox4x32(seed, counter + j), j = 0..3 (no carry into the high
/// 64 bits of the counter, like philox4x32's counter_hi = 0).
inline void philox4x32_x4(uint64_t seed, uint64_t counter, __m128i out[4]) {
  const uint64_t c[4] = {counter, counter + 1, counter + 2, counter + 3};
  __m128i c0 = _mm_setr_epi32(int(uint32_t(c[0])), int(uint32_t(c[1])), int(uint32_t(c[2])), int(uint32_t(c[3])));
  __m128i c1 = _mm_setr_epi32(int(uint32_t(c[0] >> 32)), int(uint32_t(c[1] >> 32)), int(uint32_t(c[2] >> 32)),
                              int(uint32_t(c[3] >> 32)));
  __m128i c2 = _mm_setzero_si128(), c3 = _mm_setzero_si128();
  const __m128i m0 = _mm_set1_epi32(int(0xD2511F53u)), m1 = _mm_set1_epi32(int(0xCD9E8D57u));
  const __m128i lo_mask = _mm_set1_epi64x(0x00000000FFFFFFFFLL);
  const __m128i hi_mask = _mm_set1_epi64x(int64_t(0xFFFFFFFF00000000ULL));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  // hi/lo 32 bits of a * m for each 32-bit lane of a: even lanes from one _mm_mul_epu32, odd
  // lanes (shifted down into even position) from another, then put back in place.
  auto mul_hi_lo = [&](__m128i a, __m128i m, __m128i& hi, __m128i& lo) {
    const __m128i even = _mm_mul_epu32(a, m);
    const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), m);
    hi = _mm_or_si128(_mm_srli_epi64(even, 32), _mm_and_si128(odd, hi_mask));
    lo = _mm_or_si128(_mm_and_si128(even, lo_mask), _mm_slli_epi64(odd, 32));
  };
  for (int r = 0; r < 10; ++r) {
    __m128i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, m0, hi0, lo0);
    mul_hi_lo(c2, m1, hi1, lo1);
    const __m128i key0 = _mm_set1_epi32(int(k0)), key1 = _mm_set1_epi32(int(k1));
    c0 = _mm_xor_si128(_mm_xor_si128(hi1, c1), key0);
    c1 = lo1;
    c2 = _mm_xor_si128(_mm_xor_si128(hi0, c3), key1);
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

}  // namespace ember::kernels::cpu

#endif  // __SSE2__
