// EMBER_CHECK / EMBER_ASSERT / EMBER_FAIL: the message carries the caller's text, the failed
// expression, the file and the line, and the exception is ember::Error (a std::runtime_error).
#include <catch2/catch.hpp>

#include <string>

#include <ember/core/error.h>

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

TEST_CASE("EMBER_CHECK message has the text, expression, file and line", "[cpu]") {
  int line = 0;
  std::string msg;
  try {
    int rows = 3;
    line = __LINE__ + 1;
    EMBER_CHECK(rows == 4, "expected 4 rows, got ", rows, " (shape [", rows, ", 2])");
  } catch (const ember::Error& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "expected 4 rows, got 3 (shape [3, 2])"));
  CHECK(contains(msg, "rows == 4"));
  CHECK(contains(msg, "EMBER_CHECK"));
  CHECK(contains(msg, "test_errors.cpp"));
  CHECK(contains(msg, ":" + std::to_string(line)));
}

TEST_CASE("Error::message is the text without the check's location", "[cpu]") {
  try {
    EMBER_CHECK(1 + 1 == 3, "optim.lrr: unknown key; did you mean optim.lr?");
    FAIL("EMBER_CHECK did not throw");
  } catch (const ember::Error& e) {
    CHECK(e.message() == "optim.lrr: unknown key; did you mean optim.lr?");
    CHECK(std::string(e.what()).rfind(e.message() + " [EMBER_CHECK(1 + 1 == 3) at ", 0) == 0);
  }
  const ember::Error plain("no location");
  CHECK(plain.message() == "no location");
  CHECK(std::string(plain.what()) == "no location");
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

TEST_CASE("EMBER_CHECK without a message still names the expression", "[cpu]") {
  std::string msg = message_of([] { EMBER_CHECK(2 < 1); });
  CHECK(contains(msg, "2 < 1"));
  CHECK(contains(msg, "failed"));
}

TEST_CASE("EMBER_ASSERT marks an internal error", "[cpu]") {
  std::string msg = message_of([] { EMBER_ASSERT(false, "block list corrupt"); });
  CHECK(contains(msg, "internal error"));
  CHECK(contains(msg, "block list corrupt"));
  CHECK(contains(msg, "EMBER_ASSERT"));
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
