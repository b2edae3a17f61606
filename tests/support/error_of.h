#pragma once
// The message of the ember::Error a piece of code throws, for tests that check what an error says.
//
//   CHECK_THAT(ember::testing::error_of([&] { read_metrics_file(path); }), Catch::Contains(path));
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include <ember/core/error.h>

namespace ember::testing {

/// Calls `fn` and returns what() of the ember::Error it throws. When it throws none, the check
/// fails (the test goes on) and "" is returned; other exceptions propagate to Catch.
template <typename Fn> std::string error_of(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL_CHECK("expected an ember::Error, none was thrown");
  return "";
}

}  // namespace ember::testing
