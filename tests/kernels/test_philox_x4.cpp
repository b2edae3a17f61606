// The 4-wide SSE2 Philox (kernels/cpu/philox_x4.h) against the scalar philox4x32 of core/rng.h.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include <ember/kernels/cpu/philox_x4.h>

#include "support/skip.h"

#if EMBER_HAVE_PHILOX_X4
TEST_CASE("philox4x32_x4 equals four scalar philox4x32 calls, across 32- and 64-bit counter wraps", "[cpu][random]") {
  const std::vector<uint64_t> seeds = {0, 1, 1234, 0xFFFFFFFFull, 0x9E3779B97F4A7C15ull, ~0ull};
  const std::vector<uint64_t> counters = {0,         77,       0xFFFFFFFEull, 0xFFFFFFFFull, 0x123456789ABCDEFull,
                                          ~0ull - 2, ~0ull - 1};
  int mismatches = 0, checked = 0;
  for (uint64_t seed : seeds)
    for (uint64_t counter : counters) {
      __m128i w[4];
      ember::kernels::cpu::philox4x32_x4(seed, counter, w);
      uint32_t words[4][4];
      for (int l = 0; l < 4; ++l) _mm_storeu_si128(reinterpret_cast<__m128i*>(words[l]), w[l]);
      for (int j = 0; j < 4; ++j) {
        const ember::Philox4 ref = ember::philox4x32(seed, counter + static_cast<uint64_t>(j));
        for (int l = 0; l < 4; ++l, ++checked) mismatches += words[l][j] != ref.v[l];
      }
    }
  CHECK(checked == 6 * 7 * 16);
  CHECK(mismatches == 0);
}
#else
TEST_CASE("philox4x32_x4 equals four scalar philox4x32 calls, across 32- and 64-bit counter wraps", "[cpu][random]") {
  EMBER_SKIP("no SSE2 on this host: the scalar Philox path is the only one; nothing to compare");
}
#endif
