// Philox-4x32-10 against the Random123 known-answer vectors (kat_vectors, philox4x32 10 rounds),
// and the Generator's counter bookkeeping.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include <ember/core/rng.h>

using ember::Generator;
using ember::philox4x32;

namespace {
// Random123 writes counters and keys as 32-bit words, lowest first; ember packs them as
// counter_lo = c1:c0, counter_hi = c3:c2, seed = k1:k0.
uint64_t pack(uint32_t lo, uint32_t hi) { return (static_cast<uint64_t>(hi) << 32) | lo; }

void check_kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
               std::array<uint32_t, 4> expected) {
  ember::Philox4 r = philox4x32(pack(k0, k1), pack(c0, c1), pack(c2, c3));
  for (int i = 0; i < 4; ++i) {
    INFO("word " << i);
    CHECK(r.v[i] == expected[i]);
  }
}
}  // namespace

TEST_CASE("Philox4x32-10 matches the Random123 known answers", "[cpu]") {
  check_kat(0, 0, 0, 0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  check_kat(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
            {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  // The pi-digits vector.
  check_kat(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
            {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("philox_element follows the 4-lane layout", "[cpu]") {
  const uint64_t seed = 42, offset = 1000;
  for (uint64_t i = 0; i < 37; ++i) {
    ember::Philox4 block = philox4x32(seed, offset + i / 4);
    CHECK(ember::philox_element(seed, offset, i) == block.v[i % 4]);
  }
  // Elements of a request starting at the next block do not repeat the previous request's.
  CHECK(ember::philox_element(seed, offset + 1, 0) == ember::philox_element(seed, offset, 4));
  CHECK(ember::philox_element(seed + 1, offset, 0) != ember::philox_element(seed, offset, 0));
}

TEST_CASE("uint_to_unit_float maps 32 bits onto the unit interval with 24-bit resolution", "[cpu]") {
  CHECK(ember::uint_to_unit_float(0) == 0.0f);
  CHECK(ember::uint_to_unit_float(0xffffffffu) == static_cast<float>(1.0 - std::ldexp(1.0, -24)));
  CHECK(ember::uint_to_unit_float(0xffffffffu) < 1.0f);
  CHECK(ember::uint_to_unit_float(0x80000000u) == 0.5f);
  CHECK(ember::uint_to_unit_float(0x000000ffu) == 0.0f);  // the low 8 bits are dropped
  // Moments of 2^16 draws: mean 1/2 and variance 1/12, within 5 standard errors.
  const int n = 1 << 16;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    double u = ember::uint_to_unit_float(ember::philox_element(7, 0, i));
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    sum_sq += u * u;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  CHECK(std::fabs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::fabs(var - 1.0 / 12) < 5 * std::sqrt(1.0 / 180 / n));  // Var((u - 1/2)^2) = 1/80 - 1/144 = 1/180
}

TEST_CASE("Generator::reserve advances by ceil(n / 4) blocks", "[cpu]") {
  Generator g(123);
  CHECK(g.seed() == 123);
  CHECK(g.offset() == 0);
  CHECK(g.reserve(0) == 0);
  CHECK(g.offset() == 0);
  CHECK(g.reserve(1) == 0);
  CHECK(g.offset() == 1);
  CHECK(g.reserve(4) == 1);
  CHECK(g.offset() == 2);
  CHECK(g.reserve(5) == 2);
  CHECK(g.offset() == 4);
  CHECK(g.reserve(1001) == 4);
  CHECK(g.offset() == 4 + 251);
  CHECK(g.reserve(UINT64_MAX) == 255);  // no wrap-around in the block count
  CHECK(g.offset() == 255 + (UINT64_MAX / 4 + 1));
  g.set_offset(77);
  CHECK(g.offset() == 77);
  g.manual_seed(9);
  CHECK(g.seed() == 9);
  CHECK(g.offset() == 0);
}

TEST_CASE("Generator::reserve hands out disjoint ranges across threads", "[cpu]") {
  Generator g(5);
  const int kThreads = 4, kPerThread = 2000;
  std::vector<std::vector<uint64_t>> starts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) starts[t].push_back(g.reserve(8));  // 2 blocks each
    });
  for (auto& th : threads) th.join();
  std::set<uint64_t> all;
  for (auto& v : starts) all.insert(v.begin(), v.end());
  REQUIRE(all.size() == static_cast<size_t>(kThreads * kPerThread));
  uint64_t expect = 0;
  for (uint64_t s : all) {  // sorted: consecutive ranges of 2 blocks, no gaps or overlaps
    CHECK(s == expect);
    expect += 2;
  }
  CHECK(g.offset() == expect);
}

TEST_CASE("manual_seed resets the default generator", "[cpu]") {
  ember::manual_seed(2024);
  CHECK(ember::default_generator().seed() == 2024);
  CHECK(ember::default_generator().offset() == 0);
  ember::default_generator().reserve(10);
  CHECK(ember::default_generator().offset() == 3);
  ember::manual_seed(2024);
  CHECK(ember::default_generator().offset() == 0);
}
