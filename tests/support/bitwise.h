#pragma once
// Bit-exact comparisons for tests whose claim is "exactly the same numbers", not "close": resumed
// vs uninterrupted training runs, checkpoints written by two runs, an op run twice or on another
// number of threads (the determinism tests).
//
//   ember::testing::require_identical(a.model->state_dict(), b.model->state_dict(), "model");
//   ember::testing::check_same({y, x.grad()}, {y2, x2.grad()}, "conv2d run twice");
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/state_dict.h>
#include <ember/core/tensor.h>

namespace ember::testing {

/// The raw bytes of `t` (any device, any strides) in row-major element order: equal vectors mean
/// equal bit patterns (NaN payloads and signed zeros included, unlike ==).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.detach().to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel() * static_cast<int64_t>(c.element_size()));
}

/// CHECKs that `a` and `b` hold the same names and, under each name, tensors of the same dtype,
/// shape and bytes; `what` ("model", "optimizer", ...) labels the failures.
inline void require_identical(const StateDict& a, const StateDict& b, const char* what) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(what << " entry " << name);
    REQUIRE(b.count(name) == 1);
    const Tensor& u = b.at(name);
    CHECK(t.dtype() == u.dtype());
    CHECK(t.sizes() == u.sizes());
    const bool same_bytes = bytes_of(t) == bytes_of(u);  // a bool: Catch would print every byte
    CHECK(same_bytes);
  }
}

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

}  // namespace ember::testing
