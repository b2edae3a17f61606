#pragma once
// EMBER_SKIP(reason): ends the current test case as skipped, never as passed. Debian's Catch2 is
// 2.13, which has no SKIP(); this prints one line
//
//   SKIPPED: <test case name>: <reason>
//
// on stdout and returns from the test case. CTest reads that line: every discovered case has
// SKIP_REGULAR_EXPRESSION "\nSKIPPED: " (tests/CMakeLists.txt), so it is counted as "Skipped" in
// ctest's summary; bench/gpu_check.sh counts the lines of the [cuda] program, which runs many cases
// in one process. Use it at the top level of a TEST_CASE body, before any SECTION: a skip inside
// one section would mark the whole case skipped, so a part that can be skipped on its own is a
// test case of its own.
//
//   TEST_CASE("x on the real data", "[cpu]") {
//     if (!have_data()) EMBER_SKIP(dir << " does not exist (Debian package ...)");
//     ...
//   }
#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>
#include <string>

namespace ember::testing {

/// Prints the skip line for the running test case (what EMBER_SKIP expands to, before it returns).
inline void report_skip(const std::string& reason) {
  std::cout.flush();
  std::cout << "\nSKIPPED: " << Catch::getResultCapture().getCurrentTestName() << ": " << reason << std::endl;
}

}  // namespace ember::testing

#define EMBER_SKIP(reason)                                   \
  do {                                                       \
    std::ostringstream ember_skip_reason_;                   \
    ember_skip_reason_ << reason;                            \
    ::ember::testing::report_skip(ember_skip_reason_.str()); \
    return;                                                  \
  } while (0)
