#pragma once
// Per-example random numbers for data augmentation. A stream is a pure function of
// (seed, example index, epoch), drawn from the counter-based Philox generator, so an example gets
// the same crop and flip in a given epoch whichever worker thread, batch or device handles it:
// epochs are reproducible and independent of the number of workers.
#include <cstdint>

#include <ember/core/rng.h>

namespace ember::data {

class RandomStream {
 public:
  RandomStream() = default;
  RandomStream(uint64_t seed, uint64_t example, uint64_t epoch) : seed_(seed), example_(example), epoch_(epoch) {}

  /// The next 32 random bits. Draw k uses lane k % 4 of the Philox block at counter
  /// (lo = example, hi = epoch << 32 | k / 4).
  uint32_t next_u32() {
    if (lane_ == 4) {
      block_ = philox4x32(seed_, example_, (epoch_ << 32) | (counter_ & 0xffffffffu));
      ++counter_;
      lane_ = 0;
    }
    return block_.v[lane_++];
  }
  /// Uniform in [0, 1) (24 random bits, exact in f32).
  float uniform() { return uint_to_unit_float(next_u32()); }
  /// Uniform integer in [0, n) for n >= 1 (64 random bits reduced modulo n; the bias is below
  /// n / 2^64, far below anything augmentation can notice).
  int64_t randint(int64_t n) {
    uint64_t hi = next_u32(), lo = next_u32();
    return static_cast<int64_t>(((hi << 32) | lo) % static_cast<uint64_t>(n));
  }

 private:
  uint64_t seed_ = 0, example_ = 0, epoch_ = 0;
  uint64_t counter_ = 0;
  Philox4 block_{};
  int lane_ = 4;
};

}  // namespace ember::data
