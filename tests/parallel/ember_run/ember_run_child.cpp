// The program the ember-run tests launch: one rank of a job that prints what it was told, fails,
// kills itself, or waits for a signal, as the test asks.
//
//   ember_run_child print          prints its RankInfo (parallel::discover_rank) and a few test lines
//   ember_run_child exit R CODE    rank R exits with CODE once the others are ready; they sleep
//   ember_run_child kill R SIG     rank R raises SIG once the others are ready; they sleep
//   ember_run_child stubborn R CODE  like exit, but the sleepers ignore SIGTERM
//   ember_run_child wait           every rank waits for SIGINT/SIGTERM, says so and exits 0
//   ember_run_child wait-stubborn  every rank ignores SIGTERM and waits
//   ember_run_child restart R CODE N  attempts before EMBER_RESTART_COUNT=N: like exit R CODE; from
//                                  attempt N on every rank prints its attempt and port and exits 0
//
// A rank that sleeps or waits writes EMBER_RUN_TEST_DIR/ready_R (holding its pid) once its signal
// dispositions are in place, so the tests (and the failing rank) act only on ready processes.
// Every wait ends after kMaxWait, so a launcher that fails to stop the ranks cannot hang a test.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <ember/parallel/env.h>

namespace {

constexpr auto kMaxWait = std::chrono::seconds(30);
volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) { g_signal = sig; }

std::string dir() {
  const char* d = std::getenv("EMBER_RUN_TEST_DIR");
  return d ? d : ".";
}

void mark_ready(int rank) {
  const std::string tmp = dir() + "/tmp_" + std::to_string(rank), path = dir() + "/ready_" + std::to_string(rank);
  std::ofstream(tmp) << ::getpid() << "\n";
  std::filesystem::rename(tmp, path);  // whole, or not there
}

/// Waits until every other rank is ready (or kMaxWait passes).
void wait_for_others(int rank, int world) {
  const auto until = std::chrono::steady_clock::now() + kMaxWait;
  for (int r = 0; r < world; ++r)
    while (r != rank && !std::filesystem::exists(dir() + "/ready_" + std::to_string(r)) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

/// Sleeps until a handled signal arrives or kMaxWait passes.
void sleep_until_signal() {
  const auto until = std::chrono::steady_clock::now() + kMaxWait;
  while (g_signal == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const ember::parallel::RankInfo info = ember::parallel::discover_rank();
  const int rank = info.rank;
  if (mode == "print") {
    std::printf("rank=%d world=%d local=%d local_world=%d addr=%s port=%d source=%s\n", info.rank, info.world_size,
                info.local_rank, info.local_world_size, info.master_addr.c_str(), info.master_port,
                info.source.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "stderr of rank %d\n", rank);
    std::fflush(stderr);
    std::printf("first of two lines\nsecond of two lines\n");
    std::printf("no newline at the end");
    return 0;
  }
  if (mode == "exit" || mode == "kill" || mode == "stubborn") {
    const int target = argc > 2 ? std::atoi(argv[2]) : 0, value = argc > 3 ? std::atoi(argv[3]) : 1;
    if (rank != target) {
      if (mode == "stubborn") ::signal(SIGTERM, SIG_IGN);
      mark_ready(rank);
      sleep_until_signal();
      return 0;
    }
    wait_for_others(rank, info.world_size);
    std::printf("rank %d: %s %d\n", rank, mode == "kill" ? "raising signal" : "exiting with", value);
    std::fflush(stdout);
    if (mode == "kill") ::raise(value);
    return value;
  }
  if (mode == "restart") {
    const char* count = std::getenv("EMBER_RESTART_COUNT");
    const int attempt = count ? std::atoi(count) : -1, target = argc > 2 ? std::atoi(argv[2]) : 0,
              value = argc > 3 ? std::atoi(argv[3]) : 1, succeed_at = argc > 4 ? std::atoi(argv[4]) : 1;
    if (attempt >= succeed_at) {
      std::printf("rank %d: attempt %d, port %d\n", rank, attempt, info.master_port);
      return 0;
    }
    if (rank != target) {
      mark_ready(rank);
      sleep_until_signal();
      return 0;
    }
    wait_for_others(rank, info.world_size);
    std::printf("rank %d: attempt %d exits with %d\n", rank, attempt, value);
    return value;
  }
  if (mode == "wait" || mode == "wait-stubborn") {
    if (mode == "wait") {
      ::signal(SIGINT, on_signal);
      ::signal(SIGTERM, on_signal);
    } else {
      ::signal(SIGTERM, SIG_IGN);
    }
    mark_ready(rank);
    sleep_until_signal();
    if (g_signal != 0) std::printf("rank %d got %s\n", rank, g_signal == SIGINT ? "SIGINT" : "SIGTERM");
    return 0;
  }
  std::fprintf(stderr, "ember_run_child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
