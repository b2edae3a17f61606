// Profiling off: no events recorded and no allocation per op. This file replaces the global
// operator new (for the whole test program: it only counts, on the thread that asks, then calls
// malloc as the default does) to count the allocations around many RecordScopes, with and
// without the input-shapes helper, while no profile records; the same loop under a profile must
// count allocations, so the test cannot pass with a counter that sees nothing. Under a sanitizer
// (which brings its own operator new) the replacement is left out and the case reports itself
// skipped.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <new>
#include <string>

#include <ember/core/record.h>
#include <ember/ember.h>
#include <ember/profiler/profile.h>

#include "support/skip.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EMBER_COUNT_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define EMBER_COUNT_NEW 0
#endif
#endif
#ifndef EMBER_COUNT_NEW
#define EMBER_COUNT_NEW 1
#endif

namespace {
thread_local bool t_counting = false;  // trivially initialised: no TLS constructor runs in new
thread_local long t_allocations = 0;
}  // namespace

#if EMBER_COUNT_NEW
void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

using namespace ember;
using namespace ember::profiler;

namespace {

constexpr int kScopes = 10'000;

// Allocations on this thread while `body` runs.
template <class Body> long allocations_in(Body&& body) {
  t_allocations = 0;
  t_counting = true;
  body();
  t_counting = false;
  return t_allocations;
}

// What the ops do: a scope per op (const char* and std::string names, the category's, the user
// macro), the op's inputs attached.
void scopes(const Tensor& x, const Tensor& w, const std::string& dynamic_name) {
  for (int i = 0; i < kScopes; ++i) {
    RecordScope op("conv2d", Category::op);
    op.inputs(x, w, Tensor());
    RecordScope named(dynamic_name, Category::backward);
    EMBER_PROFILE_SCOPE("a user's block");
  }
}

}  // namespace

TEST_CASE("profiler off: no events recorded, no allocation per op", "[cpu][profiler]") {
  if (!EMBER_COUNT_NEW) EMBER_SKIP("a sanitizer replaces operator new itself: no allocation counter here");
  const Tensor x = randn({32, 1, 28, 28}), w = randn({16, 1, 3, 3});
  const std::string name = "a backward node with a long name, past the small-string buffer";
  REQUIRE_FALSE(recording());
  CHECK(allocations_in([&] { scopes(x, w, name); }) == 0);
  CHECK(take_events().empty());

  // The positive control: the same loop under a profile recording shapes allocates (events,
  // their names past the small-string buffer, the formatted shapes).
  Profile p({.record_shapes = true});
  const long recording_allocations = allocations_in([&] { scopes(x, w, name); });
  p.stop();
  CHECK(recording_allocations >= kScopes);
  CHECK(p.spans().size() == 3 * kScopes);

  // And off again afterwards.
  CHECK(allocations_in([&] { scopes(x, w, name); }) == 0);
}
