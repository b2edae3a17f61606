#pragma once
// Helpers of the determinism tests (tests/kernels/test_determinism.cpp, tests/cuda/test_determinism_cuda.cpp):
// lists of outputs compared byte for byte, and integer indices from a fixed seed.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/factory.h>
#include "support/bitwise.h"

namespace ember::testing {

using Outputs = std::vector<Tensor>;

/// CHECKs that a and b hold tensors of equal shapes and bytes; `what` labels the failures.
inline void check_same(const Outputs& a, const Outputs& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(what << ": output " << i << " of shape " << a[i].shape_str());
    REQUIRE(a[i].sizes() == b[i].sizes());
    const bool same_bytes = bytes_of(a[i]) == bytes_of(b[i]);  // a bool: Catch would print every byte
    CHECK(same_bytes);
  }
}

/// n indices in [0, d) (i64, on the CPU) from a fixed seed: many duplicates when n >> d.
inline Tensor seeded_indices(int64_t n, int64_t d, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(d));
  }
  return from_vector(v, {n});
}

}  // namespace ember::testing
