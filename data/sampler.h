#pragma once
// Samplers decide the order in which a DataLoader visits a dataset. The order of an epoch is a
// pure function of the sampler's settings and the epoch number; the sampler also keeps the
// progress (epoch, position within it), which its state_dict saves so that a resumed run
// continues mid-epoch with exactly the examples an uninterrupted run would have seen.
//
// A DistributedSampler (parallel/) derives from Sampler: it implements size() and indices()
// (its rank's share of a per-epoch permutation) and adds rank and world size to extra_state().
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/state_dict.h>

namespace ember::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Number of dataset indices one epoch yields.
  virtual int64_t size() const = 0;
  /// The order of `epoch`: size() dataset indices. Pure: the same epoch gives the same order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  /// "RandomSampler(n=60000, seed=1)"
  virtual std::string name() const = 0;

  /// The epoch in progress (starts at 0).
  int64_t epoch() const { return epoch_; }
  /// How many indices of the current epoch have been handed out (0..size()).
  int64_t position() const { return position_; }
  /// Starts `epoch` from its beginning (position 0).
  void set_epoch(int64_t epoch);
  /// Moves within the current epoch (0..size()).
  void set_position(int64_t position);

  /// {"epoch", "position", "size"} plus extra_state(), all i64 tensors of shape [1].
  StateDict state_dict() const;
  /// Restores epoch and position. A missing or unexpected entry, or a setting that differs from
  /// this sampler's (size, seed, ...) is an error naming the entry and both values; nothing is
  /// changed unless every entry matches.
  void load_state_dict(const StateDict& state);

 protected:
  /// Settings a resume must match (e.g. "seed"), saved beside the progress and checked on load.
  virtual std::vector<std::pair<std::string, int64_t>> extra_state() const { return {}; }

 private:
  int64_t epoch_ = 0;
  int64_t position_ = 0;
};

/// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  std::string name() const override;

 private:
  int64_t n_;
};

/// A new uniformly random permutation of 0..n-1 each epoch (Fisher-Yates on Philox numbers keyed
/// by the seed and the epoch), so epoch e's order is reproducible on its own.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  std::string name() const override;
  uint64_t seed() const { return seed_; }

 protected:
  std::vector<std::pair<std::string, int64_t>> extra_state() const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

/// A random permutation of 0..n-1 that depends only on (seed, epoch); RandomSampler's order.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace ember::data
