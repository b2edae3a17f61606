#pragma once
// Multi-process tests: start `world` copies of this test binary, each running one hidden child
// test case as one rank of a job on 127.0.0.1 (the variables a launcher sets: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), wait for them with a time limit (ranks
// still running then are killed and the test fails), and read what each printed.
//
//   TEST_CASE("pg child", "[.pg_child]") {
//     testing::run_scenario("EMBER_PG_SCENARIO", {{"collectives", collectives_child}});
//   }
//   testing::Ranks job("[.pg_child]", 3, {"EMBER_PG_SCENARIO=collectives"});
//   if (job.wait_all(60)) job.check_all_passed();
//
// An exit code of 0 proves nothing by itself: a child whose filter or scenario matched nothing runs
// no assertion and exits 0. So an unknown scenario fails the child (run_scenario), and
// check_all_passed() wants each child's Catch2 summary line "All tests passed (N assertions ...)"
// with N > 0 besides its exit code.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ember/parallel/init.h>
#include <ember/parallel/store.h>

#include "support/spawn_self.h"
#include "support/temp_dir.h"

namespace ember::testing {

/// A port on 127.0.0.1 that was free a moment ago (the system's choice for port 0).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// In a child: the job's store at MASTER_ADDR:MASTER_PORT (hosted by rank 0), for a child that
/// makes several groups (each init_process_group without a store would host its own).
inline std::shared_ptr<parallel::TcpStore> store_from_env(double timeout_s) {
  parallel::TcpStoreOptions o;
  o.host = std::getenv("MASTER_ADDR");
  o.port = std::atoi(std::getenv("MASTER_PORT"));
  o.is_server = std::atoi(std::getenv("RANK")) == 0;
  o.timeout_s = timeout_s;
  return std::make_shared<parallel::TcpStore>(o);
}

/// InitOptions for a tcp group of one process (rank 0 of 1) on a free port of 127.0.0.1.
inline parallel::InitOptions group_of_one_options(double timeout_s) {
  parallel::InitOptions o;
  o.backend = "tcp";
  o.rank.rank = 0;
  o.rank.world_size = 1;
  o.rank.master_addr = "127.0.0.1";
  o.rank.master_port = free_port();
  o.timeout_s = timeout_s;
  return o;
}

/// In a child test case: runs the scenario that the environment variable `var` names. A missing or
/// unknown name fails the child (naming the known ones), so a misspelled scenario cannot pass.
inline void run_scenario(const char* var, const std::vector<std::pair<std::string, std::function<void()>>>& scenarios) {
  const char* value = std::getenv(var);
  const std::string name = value ? value : "";
  for (const auto& [known, run] : scenarios) {
    if (known == name) return run();
  }
  std::string names;
  for (const auto& s : scenarios) names += (names.empty() ? "" : ", ") + s.first;
  FAIL("unknown scenario '" << name << "' in " << var << " (known: " << names << ")");
}

/// The number of assertions a child's output says passed: N of Catch2's "All tests passed (N
/// assertions in M test cases)", printed only when every test case it ran passed; 0 when the line
/// is missing (a failure, a crash, no matching test case, or no assertion at all).
inline int64_t assertions_passed(const std::string& output) {
  static const std::regex line(R"(All tests passed \((\d+) assertions? in \d+ test cases?\))");
  std::smatch m;
  return std::regex_search(output, m, line) ? std::stoll(m[1].str()) : 0;
}

/// The ranks of one job, each a child process running `filter`.
class Ranks {
 public:
  Ranks(const std::string& filter, int world, const std::vector<std::string>& env) : world_(world) {
    const std::string port = std::to_string(free_port());
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> e = env;
      e.insert(e.end(),
               {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(r),
                "LOCAL_WORLD_SIZE=" + std::to_string(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port});
      logs_.push_back((dir_.path() / ("rank" + std::to_string(r) + ".log")).string());
      pids_.push_back(spawn_self(filter, e, logs_.back()));
      status_.push_back(-1);
    }
  }
  ~Ranks() {
    for (int r = 0; r < world_; ++r) {
      if (status_[size_t(r)] != -1) continue;
      ::kill(pids_[size_t(r)], SIGKILL);
      ::waitpid(pids_[size_t(r)], nullptr, 0);
    }
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  /// Waits until every rank has exited, at most `limit_s` seconds; returns false (after killing
  /// the ones left, and failing a CHECK that names them) when time ran out.
  bool wait_all(double limit_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    for (;;) {
      bool running = false;
      for (int r = 0; r < world_; ++r) running = !poll(r) || running;
      if (!running) return true;
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int r = 0; r < world_; ++r) {
      if (status_[size_t(r)] != -1) continue;
      FAIL_CHECK("rank " << r << " still ran after " << limit_s << " s; killed. Its output:\n" << output(r));
      ::kill(pids_[size_t(r)], SIGKILL);
      ::waitpid(pids_[size_t(r)], &status_[size_t(r)], 0);
    }
    return false;
  }
  /// Reaps rank r if it has exited; true once it has.
  bool poll(int r) {
    if (status_[size_t(r)] != -1) return true;
    int st = 0;
    if (::waitpid(pids_[size_t(r)], &st, WNOHANG) != pids_[size_t(r)]) return false;
    status_[size_t(r)] = st;
    return true;
  }
  /// Sends `sig` to rank r.
  void kill(int r, int sig) { ::kill(pids_[size_t(r)], sig); }
  /// Exit code of rank r (-1 when it was killed by a signal or has not exited).
  int exit_code(int r) const {
    const int st = status_[size_t(r)];
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  /// Everything rank r printed so far.
  std::string output(int r) const { return read_text(logs_[size_t(r)]); }
  /// Whether rank r exited with 0 after passing at least one assertion (assertions_passed).
  bool passed(int r) const { return exit_code(r) == 0 && assertions_passed(output(r)) > 0; }
  /// Checks that every rank passed(), showing the output of those that did not.
  void check_all_passed() const {
    for (int r = 0; r < world_; ++r) {
      const std::string out = output(r);
      INFO("rank " << r << " output:\n" << out);
      CHECK(exit_code(r) == 0);
      CHECK(assertions_passed(out) > 0);
    }
  }

 private:
  int world_;
  TempDir dir_;
  std::vector<std::string> logs_;
  std::vector<pid_t> pids_;
  std::vector<int> status_;
};

}  // namespace ember::testing
