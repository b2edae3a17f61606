// The multi-process harness itself (parallel/multiproc.h): a child passes only when it exits with 0
// after passing at least one assertion. A misspelled scenario fails the child, naming the known
// ones; a filter that matches no test case and a child that asserts nothing both exit 0 (Catch2's
// way) and are still not counted as passed.
#include <catch2/catch.hpp>

#include <string>

#include "parallel/multiproc.h"

using Catch::Contains;

TEST_CASE("multiproc child", "[.multiproc_child]") {
  ember::testing::run_scenario("EMBER_MULTIPROC_SCENARIO",
                               {{"asserts", [] { CHECK(std::string("ab").size() == 2); }}, {"silent", [] {}}});
}

TEST_CASE("multiproc: a child passes only after exit 0 and at least one passed assertion", "[multiproc][parallel]") {
  using ember::testing::Ranks;
  {
    Ranks job("[.multiproc_child]", 2, {"EMBER_MULTIPROC_SCENARIO=asserts"});
    REQUIRE(job.wait_all(60));
    job.check_all_passed();
    CHECK(job.passed(0));
    CHECK(job.passed(1));
    CHECK(ember::testing::assertions_passed(job.output(1)) == 1);
  }
  {
    Ranks job("[.multiproc_child]", 1, {"EMBER_MULTIPROC_SCENARIO=assert"});  // misspelled
    REQUIRE(job.wait_all(60));
    const std::string out = job.output(0);
    INFO("child output:\n" << out);
    CHECK(job.exit_code(0) != 0);
    CHECK_FALSE(job.passed(0));
    // Catch2 wraps the message at 80 columns: after "asserts," comes a line break.
    CHECK_THAT(out, Contains("unknown scenario 'assert' in EMBER_MULTIPROC_SCENARIO (known: asserts,"));
  }
  {
    Ranks job("[.multiproc_child]", 1, {"EMBER_MULTIPROC_SCENARIO=silent"});  // runs, asserts nothing
    REQUIRE(job.wait_all(60));
    INFO("child output:\n" << job.output(0));
    CHECK(job.exit_code(0) == 0);
    CHECK_FALSE(job.passed(0));
  }
  {
    Ranks job("[.no_such_child]", 1, {});  // a renamed tag: no test case matches
    REQUIRE(job.wait_all(60));
    INFO("child output:\n" << job.output(0));
    CHECK(job.exit_code(0) == 0);
    CHECK_FALSE(job.passed(0));
  }
}

TEST_CASE("multiproc: assertions_passed reads Catch2's summary line only when everything passed", "[cpu][parallel]") {
  using ember::testing::assertions_passed;
  CHECK(assertions_passed("===\nAll tests passed (12 assertions in 1 test case)\n\n") == 12);
  CHECK(assertions_passed("All tests passed (1 assertion in 2 test cases)") == 1);
  CHECK(assertions_passed("test cases: 1 | 1 passed\nassertions: - none -\n") == 0);
  CHECK(assertions_passed("test cases: 1 | 1 failed\nassertions: 3 | 2 passed | 1 failed\n") == 0);
  CHECK(assertions_passed("No test cases matched '[.x_child]'\n") == 0);
}
