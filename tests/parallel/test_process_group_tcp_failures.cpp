// Failures of the tcp backend end in errors, never hangs (real processes on 127.0.0.1):
// - SIGKILL one rank inside a long all_reduce: the others raise well within the timeout, naming
//   the op and the dead rank (3 ranks: all neighbours of the dead one; 4 ranks: rank 0 is not,
//   and learns of it through the store);
// - a rank that skips a collective: the others time out naming it and its last collective;
// - EMBER_DISTRIBUTED_DEBUG=1: a mismatch names both ranks and both calls, on every rank.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <ember/ember.h>
#include <ember/parallel/init.h>

#include "parallel/multiproc.h"

using namespace ember;
using namespace ember::parallel;

namespace {

// Runs `fn`; prints "ERROR: <message>" when it throws an ember::Error (what the parent checks).
template <typename Fn> void report(Fn fn) {
  try {
    fn();
    std::cout << "NO ERROR" << std::endl;
  } catch (const Error& e) {
    std::cout << "ERROR: " << e.message() << std::endl;
  }
}

// The job's store (rank 0 hosts it) and a tcp group on it (timeout from EMBER_COLLECTIVE_TIMEOUT).
std::shared_ptr<ProcessGroup> start(const std::shared_ptr<Store>& store) {
  InitOptions o;
  o.backend = "tcp";
  o.store = store;
  return init_process_group(o);
}

// Every surviving rank reports here before exiting and waits (bounded) for all `expected` reports: a
// rank that exited earlier would close its connections under ranks still diagnosing (their timeout
// would read as "closed its connection"). Rank 0 hosts the store, so it leaves last, once every
// rank has seen the count.
void finish(Store& store, int rank, int expected) {
  auto wait_for = [&](const char* key) {
    for (int i = 0; i < 3000 && std::stoll(store.get(key)) < expected; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(std::stoll(store.get(key)) >= expected);  // every surviving rank got here
  };
  store.add("finished", 1);
  wait_for("finished");
  store.add("left", 1);
  if (rank == 0) wait_for("left");
}

void kill_child() {
  auto store = testing::store_from_env(60);
  auto pg = start(store);
  Tensor t = ones({int64_t(1) << 22});  // 16 MiB: each all_reduce takes a while on loopback
  pg->all_reduce(t)->wait();
  std::cout << "READY" << std::endl;
  report([&] {
    for (int i = 0; i < 100000; ++i) pg->all_reduce(t)->wait();
  });
  finish(*store, pg->rank(), pg->world_size() - 1);
}

void skip_child() {
  auto store = testing::store_from_env(60);
  auto pg = start(store);
  Tensor t = ones({1000});
  pg->all_reduce(t)->wait();
  if (pg->rank() == 1) {
    // Skips all_reduce #2; with debug on, calls a different collective instead.
    if (std::getenv("EMBER_DISTRIBUTED_DEBUG")) {
      report([&] { pg->broadcast(zeros({10}, {.dtype = DType::i64}), 0)->wait(); });
    }  // else it skips all_reduce #2 and waits in finish() until the others have timed out
  } else {
    report([&] { pg->all_reduce(t)->wait(); });
  }
  finish(*store, pg->rank(), pg->world_size());
}

void debug_child() {
  auto store = testing::store_from_env(60);
  auto pg = start(store);
  auto second = start(store);
  for (int i = 0; i < 11; ++i) pg->barrier()->wait();
  report([&] {
    if (pg->rank() == 0) {
      pg->broadcast(zeros({10}, {.dtype = DType::i64}), 0)->wait();
    } else {
      pg->all_reduce(zeros({4096}))->wait();
    }
  });
  // Same op, shape and dtype, different reduce op: the message shows the ops.
  report([&] { second->all_reduce(zeros({8}), pg->rank() == 0 ? ReduceOp::sum : ReduceOp::max)->wait(); });
  // The group is unusable after the failure, and says why.
  report([&] { pg->barrier()->wait(); });
  finish(*store, pg->rank(), pg->world_size());
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("tcp process group failure child", "[.pg_fail_child]") {
  testing::run_scenario("EMBER_PG_SCENARIO", {{"kill", kill_child}, {"skip", skip_child}, {"debug", debug_child}});
}

TEST_CASE("tcp process group: SIGKILL of one rank inside a long all_reduce ends the others with an error",
          "[multiproc][parallel]") {
  for (auto [world, victim] : {std::pair{3, 1}, std::pair{4, 2}}) {
    INFO("world " << world << ", killing rank " << victim);
    // The timeout is long: the error must come from the dead connection, not from the timeout.
    testing::Ranks job("[.pg_fail_child]", world, {"EMBER_PG_SCENARIO=kill", "EMBER_COLLECTIVE_TIMEOUT=30"});
    const auto start = std::chrono::steady_clock::now();
    bool ready = false;
    while (!ready && seconds_since(start) < 60) {
      ready = true;
      for (int r = 0; r < world; ++r) ready = ready && job.output(r).find("READY") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(ready);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside a later all_reduce
    job.kill(victim, SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    REQUIRE(job.wait_all(25));
    CHECK(seconds_since(killed) < 10.0);
    for (int r = 0; r < world; ++r) {
      if (r == victim) continue;
      const std::string out = job.output(r);
      INFO("rank " << r << " output:\n" << out);
      CHECK(job.exit_code(r) == 0);
      CHECK(out.find("ERROR: all_reduce #") != std::string::npos);
      CHECK(out.find("on (4194304,) f32 failed on rank " + std::to_string(r)) != std::string::npos);
      // Its own view ("rank 1 closed its connection", "the connection to rank 1 was reset") or the
      // first report of a neighbour, which names the same rank.
      CHECK(out.find("rank " + std::to_string(victim) + " ") != std::string::npos);
      CHECK(out.find("exited or was killed") != std::string::npos);
    }
  }
}

TEST_CASE("tcp process group: a rank that skips a collective is named by the others' timeout",
          "[multiproc][parallel]") {
  testing::Ranks job("[.pg_fail_child]", 3, {"EMBER_PG_SCENARIO=skip", "EMBER_COLLECTIVE_TIMEOUT=1.5"});
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(job.wait_all(30));
  CHECK(seconds_since(start) < 15.0);
  for (int r : {0, 2}) {
    const std::string out = job.output(r);
    INFO("rank " << r << " output:\n" << out);
    CHECK(job.exit_code(r) == 0);
    CHECK(out.find("ERROR: all_reduce #2 on (1000,) f32 timed out after 1.5 s on rank " + std::to_string(r) +
                   ": rank 1 has not called it (its last collective was all_reduce #1 on (1000,) f32)") !=
          std::string::npos);
  }
  CHECK(job.exit_code(1) == 0);
}

TEST_CASE("tcp process group: EMBER_DISTRIBUTED_DEBUG=1 names both ranks and both calls of a mismatch",
          "[multiproc][parallel]") {
  {
    testing::Ranks job("[.pg_fail_child]", 2, {"EMBER_PG_SCENARIO=debug", "EMBER_DISTRIBUTED_DEBUG=1"});
    REQUIRE(job.wait_all(60));
    job.check_all_passed();
    const std::string out0 = job.output(0), out1 = job.output(1);
    INFO("rank 0:\n" << out0 << "\nrank 1:\n" << out1);
    CHECK(out0.find(
              "ERROR: rank 1 called all_reduce #12 on (4096,) f32 while rank 0 called broadcast #12 on (10,) i64") !=
          std::string::npos);
    CHECK(out1.find(
              "ERROR: rank 0 called broadcast #12 on (10,) i64 while rank 1 called all_reduce #12 on (4096,) f32") !=
          std::string::npos);
    CHECK(out0.find("ERROR: rank 1 called all_reduce #1 on (8,) f32 with op max while rank 0 called all_reduce #1 on "
                    "(8,) f32 with op sum") != std::string::npos);
    CHECK(out0.find("ERROR: barrier #13 on rank 0: the process group is unusable after an earlier failure: rank 1 "
                    "called all_reduce #12") != std::string::npos);
  }
  {
    // A rank that skips all_reduce #2 and calls broadcast instead: caught at once, not by a timeout.
    testing::Ranks job("[.pg_fail_child]", 3,
                       {"EMBER_PG_SCENARIO=skip", "EMBER_COLLECTIVE_TIMEOUT=30", "EMBER_DISTRIBUTED_DEBUG=1"});
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(job.wait_all(60));
    CHECK(seconds_since(start) < 10.0);
    job.check_all_passed();
    for (int r : {0, 2}) {
      INFO("rank " << r << ":\n" << job.output(r));
      CHECK(job.output(r).find("ERROR: rank 1 called broadcast #2 on (10,) i64 while rank " + std::to_string(r) +
                               " called all_reduce #2 on (1000,) f32") != std::string::npos);
    }
    INFO("rank 1:\n" << job.output(1));
    CHECK(job.output(1).find("ERROR: rank 0 called all_reduce #2 on (1000,) f32 while rank 1 called broadcast #2 on "
                             "(10,) i64") != std::string::npos);
  }
}
