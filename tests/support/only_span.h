#pragma once
// The one span of a profile with a given name (tests/profiler/, tests/cuda/test_profile_cuda.cpp):
// REQUIREs that there is exactly one.
#include <catch2/catch.hpp>

#include <string>

#include <ember/profiler/profile.h>

namespace ember::testing {

inline const profiler::Span& only_span(const profiler::Profile& p, const std::string& name) {
  const profiler::Span* found = nullptr;
  for (const profiler::Span& s : p.spans())
    if (s.event.name == name) {
      INFO("span " << name);
      REQUIRE(found == nullptr);
      found = &s;
    }
  INFO("span " << name);
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace ember::testing
