#pragma once
// Counter-based random numbers (Philox-4x32-10). A draw is a pure function of (seed, counter), so
// the same seed and offset give the same numbers on CPU and GPU, in any thread order.
//
// Layout convention shared by every sampling kernel: element i of a request uses the 4-lane block
// at counter (offset + i / 4), lane i % 4. A request of n elements advances the generator's offset
// by ceil(n / 4).
#include <cstdint>
#include <mutex>

#include <ember/core/half.h>  // EMBER_HOST_DEVICE

namespace ember {

struct Philox4 {
  uint32_t v[4];
};

/// Philox-4x32 with 10 rounds: 4 random 32-bit words for a 128-bit counter and 64-bit key.
EMBER_HOST_DEVICE inline Philox4 philox4x32(uint64_t seed, uint64_t counter_lo, uint64_t counter_hi = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// Uniform float in [0, 1) from 32 random bits (24 bits of mantissa, so exactly representable).
EMBER_HOST_DEVICE inline float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

/// Element i of a stream starting at `offset` (see the layout convention above).
EMBER_HOST_DEVICE inline uint32_t philox_element(uint64_t seed, uint64_t offset, uint64_t i) {
  return philox4x32(seed, offset + i / 4).v[i % 4];
}

/// SplitMix64's finalizer: mixes a 64-bit value into a well-spread key. Used to derive independent
/// Philox keys from one user seed (xor a per-purpose salt first, then mix).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Seed and running offset of one Generator: all of a counter-based generator's state (what a
/// checkpoint saves to continue the same stream of numbers).
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const RngState&, const RngState&) = default;
};

/// A seed and a running offset. Thread-safe: reserve() hands out disjoint counter ranges.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_offset(uint64_t offset);
  /// Seed and offset read together (under the generator's lock).
  RngState state() const;
  /// Continues from a saved state (seed and offset together).
  void set_state(const RngState& st);
  /// Returns the current offset and advances it by ceil(n / 4) blocks.
  uint64_t reserve(uint64_t n);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator used when none is passed.
Generator& default_generator();
/// Seeds the default generator (and resets its offset).
void manual_seed(uint64_t seed);

}  // namespace ember
