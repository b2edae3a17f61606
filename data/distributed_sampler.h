#pragma once
// DistributedSampler: each of world_size ranks visits its own share of one per-epoch order of the
// dataset, so that the shares are disjoint and together cover every index. The order is
// RandomSampler's permutation for (seed, epoch) when shuffling (every rank computes the same one),
// else 0..n-1. So that all ranks run the same number of steps, the order is padded by repeating its
// first indices up to a multiple of world_size, or trimmed to one with drop_last. Rank r takes
// positions r, r + world_size, r + 2 world_size, ... of the padded order.
//
// Padding means a few samples are seen twice per epoch. For training that is harmless; for
// evaluation, real_size() tells how many of this rank's indices are real (they come first), so
// summed counts over ranks see every test sample exactly once.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ember/data/sampler.h>

namespace ember::data {

/// Options of a DistributedSampler.
struct DistributedSamplerOptions {
  bool shuffle = true;  // a new permutation each epoch (set_epoch), the same on every rank
  uint64_t seed = 0;  // must be the same on every rank
  bool drop_last = false;  // trim to a multiple of world_size instead of padding
};

class DistributedSampler : public Sampler {
 public:
  /// The share of `rank` (0 <= rank < world_size) of a dataset of `dataset_size` examples.
  DistributedSampler(int64_t dataset_size, int rank, int world_size, DistributedSamplerOptions options = {});
  /// Indices this rank yields per epoch: ceil(n / world_size), or floor with drop_last.
  int64_t size() const override { return share_; }
  /// This rank's share of `epoch`'s order (see the top of this file).
  std::vector<int64_t> indices(int64_t epoch) const override;
  std::string name() const override;
  /// How many of this rank's indices (the first ones) are not padding: the number of examples this
  /// rank should count when the shares are summed to evaluate the whole dataset once.
  int64_t real_size() const { return real_; }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t dataset_size() const { return n_; }
  const DistributedSamplerOptions& options() const { return options_; }

 protected:
  /// seed, shuffle, drop_last and world_size: a resume must use the same split. Not the rank: the
  /// position is the same on every rank, so rank 0's checkpoint resumes every rank.
  std::vector<std::pair<std::string, int64_t>> extra_state() const override;

 private:
  int64_t n_;
  int rank_;
  int world_size_;
  DistributedSamplerOptions options_;
  int64_t share_ = 0;
  int64_t real_ = 0;
};

}  // namespace ember::data
