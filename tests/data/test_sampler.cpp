// Samplers: orders per epoch, reproducibility, uniformity, and state round trips.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <ember/core/error.h>
#include <ember/data/sampler.h>
#include <ember/kernels/factory.h>

using namespace ember;
using Catch::Contains;

namespace {
bool is_permutation_of_n(std::vector<int64_t> v, int64_t n) {
  if (int64_t(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[size_t(i)] != i) return false;
  return true;
}
}  // namespace

TEST_CASE("SequentialSampler: 0..n-1 every epoch", "[cpu][data]") {
  data::SequentialSampler s(5);
  CHECK(s.size() == 5);
  CHECK(s.indices(0) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(s.indices(7) == s.indices(0));
  CHECK(data::SequentialSampler(0).indices(0).empty());
}

TEST_CASE("RandomSampler: a new permutation each epoch, reproducible from the seed", "[cpu][data]") {
  const int64_t n = 1001;
  data::RandomSampler a(n, 42), b(n, 42), c(n, 43);
  std::vector<int64_t> e0 = a.indices(0), e1 = a.indices(1);
  CHECK(is_permutation_of_n(e0, n));
  CHECK(is_permutation_of_n(e1, n));
  CHECK(e0 != e1);
  CHECK(b.indices(0) == e0);  // same seed, same epoch
  CHECK(b.indices(1) == e1);
  CHECK(a.indices(0) == e0);  // pure: asking again gives the same
  CHECK(c.indices(0) != e0);
  std::vector<int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(e0 != iota);
  CHECK(data::random_permutation(n, 42, 1) == e1);
}

TEST_CASE("RandomSampler: each value lands at each position uniformly", "[cpu][data]") {
  // n = 5 over 5000 epochs: count[pos][v] ~ Binomial(5000, 1/5); every count within 5 sigma.
  const int64_t n = 5, epochs = 5000;
  data::RandomSampler s(n, 7);
  std::vector<std::vector<int>> count(n, std::vector<int>(n, 0));
  for (int64_t e = 0; e < epochs; ++e) {
    auto v = s.indices(e);
    for (int64_t p = 0; p < n; ++p) ++count[size_t(p)][size_t(v[size_t(p)])];
  }
  const double mean = epochs / double(n), sigma = std::sqrt(epochs * (1.0 / n) * (1 - 1.0 / n));
  for (auto& row : count)
    for (int c : row) CHECK(std::abs(c - mean) < 5 * sigma);
}

TEST_CASE("Sampler state: epoch and position round trip, mismatches are errors", "[cpu][data]") {
  data::RandomSampler s(100, 0xfedcba9876543210ULL);  // a seed above 2^63 survives the i64 entry
  s.set_epoch(3);
  s.set_position(17);
  StateDict st = s.state_dict();
  CHECK(st.size() == 4);
  data::RandomSampler r(100, 0xfedcba9876543210ULL);
  r.load_state_dict(st);
  CHECK(r.epoch() == 3);
  CHECK(r.position() == 17);
  s.set_epoch(4);
  CHECK(s.position() == 0);

  data::RandomSampler other_seed(100, 1);
  CHECK_THROWS_WITH(other_seed.load_state_dict(st), Contains("\"seed\"") && Contains("this sampler has 1"));
  data::RandomSampler other_size(99, 0xfedcba9876543210ULL);
  CHECK_THROWS_WITH(other_size.load_state_dict(st), Contains("\"size\" is 100") && Contains("99"));
  StateDict missing = st;
  missing.erase("position");
  CHECK_THROWS_WITH(r.load_state_dict(missing), Contains("missing entry \"position\""));
  StateDict extra = st;
  extra["bogus"] = from_vector(std::vector<int64_t>{1}, {1});
  CHECK_THROWS_WITH(r.load_state_dict(extra), Contains("unexpected entry \"bogus\""));
  StateDict bad_pos = st;
  bad_pos["position"] = from_vector(std::vector<int64_t>{101}, {1});
  CHECK_THROWS_WITH(r.load_state_dict(bad_pos), Contains("\"position\" is 101"));
  // A failed load changes nothing.
  CHECK(r.epoch() == 3);
  CHECK(r.position() == 17);
  // A sequential sampler has no seed entry.
  data::SequentialSampler q(100);
  CHECK_THROWS_WITH(q.load_state_dict(st), Contains("unexpected entry \"seed\""));
  CHECK_THROWS_WITH(s.set_position(101), Contains("0..100"));
}
