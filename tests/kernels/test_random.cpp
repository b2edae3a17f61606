// Sampling: Philox known answers, the documented element layout, exact reproducibility, and
// statistics with bounds derived from the sample size (5 standard errors).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include <ember/core/thread_pool.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/random.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Uniform in [0, 1) from 32 bits as documented in core/rng.h, written out independently.
double unit(uint32_t bits) { return static_cast<double>(bits >> 8) / 16777216.0; }

uint32_t philox_word(uint64_t seed, uint64_t offset, int64_t i) {
  return philox4x32(seed, offset + static_cast<uint64_t>(i) / 4).v[i % 4];
}

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

}  // namespace

TEST_CASE("random: philox4x32-10 known answers (Random123 test vectors)", "[cpu]") {
  Philox4 r = philox4x32(0, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  r = philox4x32(~0ull, ~0ull, ~0ull);
  CHECK(r.v[0] == 0x408f276du);
  CHECK(r.v[1] == 0x41c83b0eu);
  CHECK(r.v[2] == 0xa20bc7c6u);
  CHECK(r.v[3] == 0x6d5451fdu);
  r = philox4x32(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull);
  CHECK(r.v[0] == 0xd16cfe09u);
  CHECK(r.v[1] == 0x94fdccebu);
  CHECK(r.v[2] == 0x5001e420u);
  CHECK(r.v[3] == 0x24126ea1u);
}

TEST_CASE("random: rand for seed 0 is pinned to the philox words", "[cpu]") {
  Generator gen(0);
  Tensor t = rand({10}, {.dtype = DType::f32}, gen);
  const auto v = to_f64(t);
  // The first block's words are the known answer above: (word >> 8) / 2^24.
  CHECK(v[0] == 0x6627e8 / 16777216.0);
  CHECK(v[1] == 0xe169c5 / 16777216.0);
  CHECK(v[2] == 0xbc57ac / 16777216.0);
  CHECK(v[3] == 0x9b00db / 16777216.0);
  for (int64_t i = 0; i < 10; ++i) CHECK(v[i] == unit(philox_word(0, 0, i)));
  CHECK(gen.offset() == 3);  // ceil(10 / 4) blocks

  // The next request starts at block 3.
  const auto w = to_f64(rand({5}, {.dtype = DType::f32}, gen));
  for (int64_t i = 0; i < 5; ++i) CHECK(w[i] == unit(philox_word(0, 3, i)));
  CHECK(gen.offset() == 5);

  // f64 uses the same 24-bit uniforms; lo/hi rescale in double.
  Generator g2(0);
  Tensor d = empty({6}, {.dtype = DType::f64});
  kernels::uniform_(d, -2.0, 3.0, g2);
  const auto dv = to_f64(d);
  for (int64_t i = 0; i < 6; ++i) CHECK(dv[i] == -2.0 + 5.0 * unit(philox_word(0, 0, i)));
}

TEST_CASE("random: same seed and offset reproduce exactly, any thread count", "[cpu]") {
  const int threads = num_threads();
  Generator a(1234), b(1234);
  set_num_threads(1);
  const auto x = to_f64(randn({300001}, {.dtype = DType::f32}, a));
  set_num_threads(threads > 1 ? threads : 2);
  const auto y = to_f64(randn({300001}, {.dtype = DType::f32}, b));
  set_num_threads(threads);
  CHECK(x == y);
  CHECK(a.offset() == b.offset());
  // Rewinding the offset replays the stream; a different seed gives different numbers.
  a.set_offset(0);
  CHECK(to_f64(randn({300001}, {.dtype = DType::f32}, a)) == x);
  Generator c(1235);
  CHECK(to_f64(randn({8}, {.dtype = DType::f32}, c)) != std::vector<double>(x.begin(), x.begin() + 8));
  // The default generator through manual_seed.
  manual_seed(99);
  const auto p = to_f64(rand({7}));
  manual_seed(99);
  CHECK(to_f64(rand({7})) == p);
  // Empty requests do not advance the generator.
  Generator e(5);
  kernels::uniform_(empty({0, 3}), 0, 1, e);
  CHECK(e.offset() == 0);
}

TEST_CASE("random: uniform statistics", "[cpu]") {
  const int64_t n = int64_t{1} << 20;
  const double nn = static_cast<double>(n);
  Generator gen(7);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const auto v = to_f64(rand({n}, {.dtype = dt}, gen));
    double lo = 1, hi = 0;
    for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x);
    CHECK(lo >= 0.0);
    CHECK(hi < 1.0);  // f16 rounds ~n/4096 draws up to 1.0 unless they are stepped back below 1
    const Moments m = moments(v);
    // U[0,1): mean 1/2, var 1/12; se(var) = sqrt((mu4 - sigma^4) / n) with mu4 = 1/80.
    // The 16-bit dtypes round each draw (bias < half an ulp near 1: 2^-9 for bf16).
    const double bias = dt == DType::bf16 ? 1.0 / 512 : dt == DType::f16 ? 1.0 / 4096 : 0.0;
    CHECK(std::fabs(m.mean - 0.5) < 5 * std::sqrt(1.0 / 12 / nn) + bias);
    CHECK(std::fabs(m.var - 1.0 / 12) < 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / nn) + bias);
    // 10 bins, each count within 5 binomial standard deviations of n/10.
    if (dt == DType::f32 || dt == DType::f64) {
      std::vector<double> bins(10, 0);
      for (double x : v) bins[static_cast<size_t>(x * 10)] += 1;
      for (double c : bins) CHECK(std::fabs(c - nn / 10) < 5 * std::sqrt(nn * 0.1 * 0.9));
    }
  }
  Tensor t = empty({n}, {.dtype = DType::f32});
  kernels::uniform_(t, -2.0, 3.0, gen);
  const Moments m = moments(to_f64(t));
  CHECK(std::fabs(m.mean - 0.5) < 5 * std::sqrt(25.0 / 12 / nn));
}

TEST_CASE("random: normal statistics and the Box-Muller pairing", "[cpu]") {
  const int64_t n = int64_t{1} << 20;
  const double nn = static_cast<double>(n);
  Generator gen(11);
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    const uint64_t off = gen.offset();
    Tensor t = empty({n}, {.dtype = dt});
    kernels::normal_(t, 3.0, 2.0, gen);
    const auto v = to_f64(t);
    const Moments m = moments(v);
    CHECK(std::fabs(m.mean - 3.0) < 5 * 2.0 / std::sqrt(nn));
    CHECK(std::fabs(m.var - 4.0) < 5 * 4.0 * std::sqrt(2.0 / nn));  // se of var for a normal
    double within = 0;
    for (double x : v) within += std::fabs(x - 3.0) < 2.0;
    const double p1 = 0.6826894921370859;
    CHECK(std::fabs(within / nn - p1) < 5 * std::sqrt(p1 * (1 - p1) / nn));
    // Layout: elements 2k, 2k+1 share u1 = 1 - unit(word 2k) and u2 = unit(word 2k+1).
    for (int64_t i = 0; i < 64; i += 2) {
      const double u1 = 1.0 - unit(philox_word(11, off, i));
      const double u2 = unit(philox_word(11, off, i + 1));
      const double r = std::sqrt(-2.0 * std::log(u1)), th = 2 * M_PI * u2;
      const double slack = loose_tol(DType::f32) * (1 + r);
      CHECK(std::fabs((v[i] - 3.0) / 2.0 - r * std::cos(th)) < slack);
      CHECK(std::fabs((v[i + 1] - 3.0) / 2.0 - r * std::sin(th)) < slack);
    }
  }
  Tensor h = randn({4096}, {.dtype = DType::bf16}, gen);
  for (double x : to_f64(h)) CHECK(std::isfinite(x));
}

TEST_CASE("random: bernoulli", "[cpu]") {
  const int64_t n = int64_t{1} << 20;
  const double nn = static_cast<double>(n), p = 0.3;
  for (DType dt : {DType::f32, DType::boolean, DType::i64, DType::f16}) {
    INFO(dtype_name(dt));
    Generator gen(21);
    Tensor t = empty({n}, {.dtype = dt});
    kernels::bernoulli_(t, p, gen);
    const auto v = to_f64(t);
    double ones = 0;
    bool exact = true;
    for (int64_t i = 0; i < n; ++i) {
      ones += v[i];
      exact = exact && v[i] == (unit(philox_word(21, 0, i)) < p ? 1.0 : 0.0);
    }
    CHECK(exact);
    CHECK(std::fabs(ones / nn - p) < 5 * std::sqrt(p * (1 - p) / nn));
  }
  Generator gen(1);
  Tensor all = empty({100}), none = empty({100});
  kernels::bernoulli_(all, 1.0, gen);
  kernels::bernoulli_(none, 0.0, gen);
  for (double x : to_f64(all)) CHECK(x == 1.0);
  for (double x : to_f64(none)) CHECK(x == 0.0);
}

TEST_CASE("random: non-contiguous targets get the values of their logical order", "[cpu]") {
  Generator a(3), b(3);
  Tensor buf = zeros({5, 7});
  Tensor view = as_strided_raw(buf, {7, 5}, {1, 7}, 0);  // transpose
  kernels::uniform_(view, 0, 1, a);
  Tensor ref = empty({7, 5});
  kernels::uniform_(ref, 0, 1, b);
  CHECK(to_f64(view) == to_f64(ref));
  CHECK(a.offset() == b.offset());
}

TEST_CASE("random: argument errors", "[cpu]") {
  CHECK_THROWS_WITH(kernels::uniform_(empty({3}, {.dtype = DType::i32}), 0, 1), Catch::Contains("floating"));
  CHECK_THROWS_WITH(kernels::normal_(empty({3}), 0, -1), Catch::Contains("std"));
  CHECK_THROWS_WITH(kernels::bernoulli_(empty({3}), 1.5), Catch::Contains("1.5"));
  CHECK_THROWS_WITH(kernels::uniform_(empty({3}), 2, 1), Catch::Contains("lo <= hi"));
}
