// DistributedSampler: shares disjoint and covering, equal lengths, reshuffled by set_epoch, the
// padding counted once by real_size(), drop_last, state round trips and bad settings.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <ember/core/error.h>
#include <ember/data/distributed_sampler.h>
#include "support/error_of.h"

using namespace ember;
using Catch::Contains;
using ember::testing::error_of;

namespace {

std::vector<data::DistributedSampler> all_ranks(int64_t n, int ws, data::DistributedSamplerOptions o) {
  std::vector<data::DistributedSampler> v;
  for (int r = 0; r < ws; ++r) v.emplace_back(n, r, ws, o);
  return v;
}

}  // namespace

TEST_CASE("DistributedSampler: shares are disjoint, cover the dataset and have equal lengths", "[cpu][data]") {
  for (int64_t n : {0, 1, 2, 7, 10, 11, 12, 1001}) {
    for (int ws : {1, 2, 3, 4}) {
      for (bool shuffle : {false, true}) {
        CAPTURE(n, ws, shuffle);
        const auto ranks = all_ranks(n, ws, {.shuffle = shuffle, .seed = 5});
        std::map<int64_t, int> seen;  // index -> times over all ranks (real positions only)
        std::multiset<int64_t> all;  // every index handed out, padding included
        for (const auto& s : ranks) {
          const auto idx = s.indices(3);
          REQUIRE(static_cast<int64_t>(idx.size()) == s.size());
          CHECK(s.size() == (n + ws - 1) / ws);  // same number of steps on every rank
          for (size_t k = 0; k < idx.size(); ++k) {
            REQUIRE(idx[k] >= 0);
            REQUIRE(idx[k] < n);
            all.insert(idx[k]);
            if (static_cast<int64_t>(k) < s.real_size()) ++seen[idx[k]];
          }
        }
        // Real positions: every index exactly once over all ranks.
        CHECK(static_cast<int64_t>(seen.size()) == n);
        for (const auto& [i, times] : seen) CHECK(times == 1);
        // Padding: only enough to make the shares equal (less than one per rank).
        CHECK(static_cast<int64_t>(all.size()) - n < std::max<int64_t>(ws, 1));
        CHECK(static_cast<int64_t>(all.size()) == ranks[0].size() * ws);
      }
    }
  }
}

TEST_CASE("DistributedSampler: real_size counts a sharded test set exactly once", "[cpu][data]") {
  // 10 examples over 4 ranks: shares of 3, padded positions 10 and 11 fall on ranks 2 and 3.
  const auto ranks = all_ranks(10, 4, {.shuffle = false});
  CHECK(ranks[0].real_size() == 3);
  CHECK(ranks[1].real_size() == 3);
  CHECK(ranks[2].real_size() == 2);
  CHECK(ranks[3].real_size() == 2);
  CHECK(ranks[0].indices(0) == std::vector<int64_t>{0, 4, 8});
  CHECK(ranks[2].indices(0) == std::vector<int64_t>{2, 6, 0});  // last one is padding: index 0 again
  // Fewer examples than ranks: padding wraps around the order.
  const auto tiny = all_ranks(2, 4, {.shuffle = false});
  CHECK(tiny[3].indices(0) == std::vector<int64_t>{1});
  CHECK(tiny[2].real_size() == 0);
  CHECK(tiny[1].real_size() == 1);
}

TEST_CASE("DistributedSampler: drop_last trims to a multiple of world_size, no padding", "[cpu][data]") {
  const auto ranks = all_ranks(11, 4, {.shuffle = true, .seed = 9, .drop_last = true});
  std::set<int64_t> seen;
  for (const auto& s : ranks) {
    CHECK(s.size() == 2);
    CHECK(s.real_size() == 2);
    for (int64_t i : s.indices(0)) CHECK(seen.insert(i).second);  // never twice
  }
  CHECK(seen.size() == 8);
  CHECK_THAT(error_of([] { data::DistributedSampler(3, 0, 4, {.drop_last = true}); }),
             Contains("drop_last with 3 examples and world_size 4 leaves every rank empty"));
}

TEST_CASE("DistributedSampler: set_epoch reshuffles the same way on every rank, the seed matters", "[cpu][data]") {
  const auto ranks = all_ranks(100, 2, {.shuffle = true, .seed = 1});
  CHECK(ranks[0].indices(0) != ranks[0].indices(1));
  CHECK(ranks[0].indices(4) == data::DistributedSampler(100, 0, 2, {.seed = 1}).indices(4));
  CHECK(ranks[0].indices(0) != data::DistributedSampler(100, 0, 2, {.seed = 2}).indices(0));
  // The shares are interleaved slices of RandomSampler's permutation for (seed, epoch).
  const auto perm = data::random_permutation(100, 1, 2);
  const auto r1 = ranks[1].indices(2);
  for (size_t k = 0; k < r1.size(); ++k) CHECK(r1[k] == perm[1 + 2 * k]);
}

TEST_CASE("DistributedSampler: state round trip, a different split is refused", "[cpu][data]") {
  data::DistributedSampler s(50, 1, 3, {.seed = 7});
  s.set_epoch(4);
  s.set_position(6);
  data::DistributedSampler t(50, 1, 3, {.seed = 7});
  t.load_state_dict(s.state_dict());
  CHECK(t.epoch() == 4);
  CHECK(t.position() == 6);
  // Rank 0 writes the checkpoint every rank resumes from: the rank is not part of the state.
  data::DistributedSampler other_rank(50, 2, 3, {.seed = 7});
  other_rank.load_state_dict(s.state_dict());
  CHECK(other_rank.position() == 6);
  CHECK(other_rank.indices(4) != t.indices(4));
  data::DistributedSampler other_seed(50, 1, 3, {.seed = 8});
  CHECK_THAT(error_of([&] { other_seed.load_state_dict(s.state_dict()); }), Contains("\"seed\" is 7"));
  data::DistributedSampler other_world(50, 1, 2, {.seed = 7});
  CHECK_THAT(error_of([&] { other_world.load_state_dict(s.state_dict()); }), Contains("entry \"size\" is 17"));
  CHECK(other_world.epoch() == 0);  // nothing changed
}

TEST_CASE("DistributedSampler: bad settings name the value", "[cpu][data]") {
  CHECK_THAT(error_of([] { data::DistributedSampler(10, 2, 2); }),
             Contains("expected 0 <= rank < world_size = 2, got rank 2"));
  CHECK_THAT(error_of([] { data::DistributedSampler(10, 0, 0); }), Contains("expected world_size >= 1, got 0"));
  CHECK_THAT(error_of([] { data::DistributedSampler(-1, 0, 1); }), Contains("expected dataset_size >= 0, got -1"));
}
