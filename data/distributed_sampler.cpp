#include <ember/data/distributed_sampler.h>

#include <algorithm>
#include <sstream>

#include <ember/core/error.h>

namespace ember::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size,
                                       DistributedSamplerOptions options)
    : n_(dataset_size), rank_(rank), world_size_(world_size), options_(options) {
  EMBER_CHECK(dataset_size >= 0, "DistributedSampler: expected dataset_size >= 0, got ", dataset_size);
  EMBER_CHECK(world_size >= 1, "DistributedSampler: expected world_size >= 1, got ", world_size);
  EMBER_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: expected 0 <= rank < world_size = ", world_size,
              ", got rank ", rank);
  const int64_t ws = world_size;
  share_ = options.drop_last ? n_ / ws : (n_ + ws - 1) / ws;
  EMBER_CHECK(!(options.drop_last && n_ > 0 && share_ == 0), "DistributedSampler: drop_last with ", n_,
              " examples and world_size ", ws, " leaves every rank empty");
  // Positions rank, rank + ws, ... below n are real; with drop_last every kept position is.
  const int64_t real_positions = n_ > rank ? (n_ - rank + ws - 1) / ws : 0;
  real_ = options.drop_last ? share_ : std::min(share_, real_positions);
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = random_permutation(n_, options_.seed, epoch);
  } else {
    order.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) order[static_cast<size_t>(i)] = i;
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(share_));
  for (int64_t k = 0; k < share_; ++k) {
    const int64_t pos = rank_ + k * world_size_;  // position in the padded order
    // Padding repeats the order from its start (cyclically when n < world_size).
    mine.push_back(order[static_cast<size_t>(pos % n_)]);
  }
  return mine;
}

std::string DistributedSampler::name() const {
  std::ostringstream os;
  os << "DistributedSampler(n=" << n_ << ", rank=" << rank_ << ", world_size=" << world_size_
     << ", shuffle=" << (options_.shuffle ? "true" : "false") << ", seed=" << options_.seed
     << ", drop_last=" << (options_.drop_last ? "true" : "false") << ")";
  return os.str();
}

std::vector<std::pair<std::string, int64_t>> DistributedSampler::extra_state() const {
  return {{"seed", static_cast<int64_t>(options_.seed)},
          {"shuffle", options_.shuffle ? 1 : 0},
          {"drop_last", options_.drop_last ? 1 : 0},
          {"world_size", world_size_}};
}

}  // namespace ember::data
