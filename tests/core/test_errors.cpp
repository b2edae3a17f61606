// EMBER_CHECK / EMBER_ASSERT / EMBER_FAIL: what() is the caller's text on the first line and the
// source location (relative to the source root) on the second; the exception is ember::Error.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/kernels/factory.h>

namespace {

std::string message_of(void (*fn)()) {
  try {
    fn();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("EMBER_CHECK: the user's message on the first line, the relative source location on the second", "[cpu]") {
  int line = 0;
  std::string msg;
  try {
    int rows = 3;
    line = __LINE__ + 1;
    EMBER_CHECK(rows == 4, "expected 4 rows, got ", rows, " (shape [", rows, ", 2])");
  } catch (const ember::Error& e) {
    msg = e.what();
    CHECK(e.line() == line);
    CHECK(contains(e.file(), "test_errors.cpp"));
  }
  const size_t nl = msg.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(msg.substr(0, nl) == "expected 4 rows, got 3 (shape [3, 2])");
  CHECK(contains(msg.substr(nl + 1), "test_errors.cpp:" + std::to_string(line)));
  CHECK(msg.rfind("  at ", nl + 1) == nl + 1);
  // A check with a message does not repeat its condition or the macro's name.
  CHECK_FALSE(contains(msg, "rows == 4"));
  CHECK_FALSE(contains(msg, "EMBER_CHECK"));
}

TEST_CASE("Error: message, file and line apart, checks inside the library name files relative to the source root",
          "[cpu]") {
  try {
    EMBER_CHECK(1 + 1 == 3, "optim.lrr: unknown key; did you mean optim.lr?");
    FAIL("EMBER_CHECK did not throw");
  } catch (const ember::Error& e) {
    CHECK(e.message() == "optim.lrr: unknown key; did you mean optim.lr?");
    CHECK(std::string(e.what()).rfind(e.message() + "\n  at ", 0) == 0);
  }
  const ember::Error plain("no location");
  CHECK(plain.message() == "no location");
  CHECK(std::string(plain.what()) == "no location");
  CHECK(plain.file().empty());
  CHECK(plain.line() == 0);
  // A shape error raised inside libember (compiled with -fmacro-prefix-map): one clean first line, and
  // the location relative to the source root, never an absolute build path.
  try {
    (void)ember::zeros({2, 3}).view({4});
    FAIL("view did not throw");
  } catch (const ember::Error& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == e.message().size());
    CHECK(contains(e.message(), "[2, 3]"));
    CHECK(!e.file().empty());
    CHECK(e.file().front() != '/');
    CHECK_FALSE(contains(what, "EMBER_CHECK"));
  }
  // Headers compiled into a user's program are named from the ember/ prefix on.
  CHECK(ember::detail::source_relative("/opt/x/include/ember/core/tensor.h") == "core/tensor.h");
  CHECK(ember::detail::source_relative("/home/u/b/include-root/ember/kernels/copy.h") == "kernels/copy.h");
  CHECK(ember::detail::source_relative("core/tensor.cpp") == "core/tensor.cpp");
}

TEST_CASE("EMBER_CHECK passes silently and does not evaluate the message when true", "[cpu]") {
  int evaluated = 0;
  auto side_effect = [&] {
    ++evaluated;
    return "x";
  };
  REQUIRE_NOTHROW([&] { EMBER_CHECK(1 + 1 == 2, "never shown ", side_effect()); }());
  CHECK(evaluated == 0);
  REQUIRE_THROWS_AS([&] { EMBER_CHECK(1 + 1 == 3, "shown ", side_effect()); }(), ember::Error);
  CHECK(evaluated == 1);
}

TEST_CASE("EMBER_CHECK without a message names the condition on the first line", "[cpu]") {
  std::string msg = message_of([] { EMBER_CHECK(2 < 1); });
  CHECK(msg.rfind("EMBER_CHECK(2 < 1) failed\n  at ", 0) == 0);
}

TEST_CASE("EMBER_ASSERT marks an internal error", "[cpu]") {
  std::string msg = message_of([] { EMBER_ASSERT(false, "block list corrupt"); });
  CHECK(contains(msg, "internal error"));
  CHECK(contains(msg, "block list corrupt"));
  CHECK(contains(msg, "EMBER_ASSERT(false)"));  // internal errors keep the condition for the bug report
  CHECK(contains(msg, "test_errors.cpp"));
  REQUIRE_NOTHROW([] { EMBER_ASSERT(true, "fine"); }());
}

TEST_CASE("EMBER_FAIL always throws with its message", "[cpu]") {
  std::string msg = message_of([] { EMBER_FAIL("unknown key '", "lr", "' at ", 7); });
  CHECK(contains(msg, "unknown key 'lr' at 7"));
  CHECK(contains(msg, "test_errors.cpp"));
}

TEST_CASE("ember::Error is a std::runtime_error", "[cpu]") {
  try {
    EMBER_CHECK(false, "boom");
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(contains(e.what(), "boom"));
    CHECK(dynamic_cast<const ember::Error*>(&e) != nullptr);
  }
}

TEST_CASE("error_text: a check's message alone, a bug's, another exception's and EMBER_DEBUG's with the location",
          "[cpu]") {
  ::unsetenv("EMBER_DEBUG");
  auto text_of = [](void (*fn)()) {
    try {
      fn();
    } catch (const std::exception& e) {
      return ember::error_text(e);
    }
    return std::string("<no exception>");
  };
  const auto check = [] { EMBER_CHECK(1 + 1 == 3, "epochs: expected an integer >= 1, found 0"); };
  const auto assertion = [] { EMBER_ASSERT(1 + 1 == 3, "a broken invariant"); };
  const auto other = [] { throw std::runtime_error("disk on fire"); };
  CHECK(text_of(check) == "epochs: expected an integer >= 1, found 0");
  CHECK(text_of(+[] { EMBER_FAIL("a run directory in use"); }) == "a run directory in use");
  const std::string bug = text_of(assertion);
  CHECK(contains(bug, "internal error: a broken invariant\n  at "));
  CHECK(contains(bug, "(EMBER_ASSERT(1 + 1 == 3))"));
  CHECK(text_of(other) == "disk on fire");
  ::setenv("EMBER_DEBUG", "1", 1);
  const std::string debug = text_of(check);
  CHECK(contains(debug, "found 0\n  at "));
  CHECK(contains(debug, "test_errors.cpp:"));
  ::setenv("EMBER_DEBUG", "0", 1);
  CHECK(text_of(check) == "epochs: expected an integer >= 1, found 0");
  ::unsetenv("EMBER_DEBUG");
}
