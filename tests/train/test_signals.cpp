// Graceful-stop signals (train/signals.h): a SIGTERM or SIGINT under a guard sets the flag and the
// process survives; the previous handlers come back when the guard goes; a second SIGINT while a
// stop is pending kills the process the default way (checked in a forked child).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include <ember/core/error.h>
#include <ember/train/signals.h>

using ember::train::clear_stop_request;
using ember::train::signal_name;
using ember::train::stop_requested;
using ember::train::stop_signal;
using ember::train::StopSignalGuard;

namespace {

volatile std::sig_atomic_t g_test_handler_calls = 0;
volatile std::sig_atomic_t g_test_handler_sig = 0;
extern "C" void test_handler(int sig) {
  g_test_handler_calls = g_test_handler_calls + 1;
  g_test_handler_sig = sig;
}

// Installs test_handler for `sig` while alive, then puts back whatever was there.
struct TestHandler {
  int sig;
  struct sigaction prev {};
  explicit TestHandler(int s) : sig(s) {
    struct sigaction sa {};
    sa.sa_handler = test_handler;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(sig, &sa, &prev) == 0);
    g_test_handler_calls = 0;
    g_test_handler_sig = 0;
  }
  ~TestHandler() { sigaction(sig, &prev, nullptr); }
};

}  // namespace

TEST_CASE("StopSignalGuard turns SIGTERM into a stop request and restores the previous handler", "[cpu]") {
  TestHandler previous(SIGTERM);
  clear_stop_request();
  {
    StopSignalGuard guard;
    CHECK_FALSE(stop_requested());
    CHECK(stop_signal() == 0);
    REQUIRE(std::raise(SIGTERM) == 0);  // the guard's handler runs before raise returns
    CHECK(stop_requested());
    CHECK(stop_signal() == SIGTERM);
    CHECK(g_test_handler_calls == 0);  // the previous handler was replaced, not chained
    clear_stop_request();
    CHECK_FALSE(stop_requested());
    CHECK(stop_signal() == 0);
  }
  // The flag survives the guard (the caller reads it after unwinding); the old handler is back.
  REQUIRE(std::raise(SIGTERM) == 0);
  CHECK(g_test_handler_calls == 1);
  CHECK(g_test_handler_sig == SIGTERM);
  CHECK_FALSE(stop_requested());  // no guard, so this SIGTERM was not a stop request
}

TEST_CASE("StopSignalGuard turns one SIGINT into a stop request", "[cpu]") {
  TestHandler previous(SIGINT);
  {
    StopSignalGuard guard;
    CHECK_FALSE(stop_requested());  // a new guard starts clear
    REQUIRE(std::raise(SIGINT) == 0);
    CHECK(stop_requested());
    CHECK(stop_signal() == SIGINT);
    CHECK(g_test_handler_calls == 0);
  }
  CHECK(stop_signal() == SIGINT);
  clear_stop_request();
  REQUIRE(std::raise(SIGINT) == 0);
  CHECK(g_test_handler_calls == 1);
  CHECK(g_test_handler_sig == SIGINT);
}

TEST_CASE("StopSignalGuard allows one guard at a time and a new guard after the old one", "[cpu]") {
  {
    StopSignalGuard guard;
    CHECK_THROWS_WITH(StopSignalGuard(), Catch::Contains("another guard"));
  }
  CHECK_NOTHROW(StopSignalGuard());
  clear_stop_request();
}

namespace {

// Forks a child that installs a guard, raises `first` (which must only set the flag), then SIGINT
// (which must kill it); returns the child's wait status. Only async-signal-safe calls run between
// fork and _exit (the guard does sigaction and atomics).
int status_after_signal_then_sigint(int first) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    StopSignalGuard guard;
    ::raise(first);
    if (stop_signal() != first) ::_exit(3);
    ::raise(SIGINT);  // must not return
    ::_exit(4);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("A SIGINT while a stop is pending kills the process by SIGINT", "[cpu]") {
  for (int first : {SIGINT, SIGTERM}) {
    const int status = status_after_signal_then_sigint(first);
    INFO("first " << signal_name(first) << ", child status " << status
                  << (WIFEXITED(status) ? " (exited " + std::to_string(WEXITSTATUS(status)) + ")" : ""));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGINT);
  }
}

TEST_CASE("A second SIGTERM keeps the stop request and the process alive", "[cpu]") {
  TestHandler previous_int(SIGINT);
  TestHandler previous_term(SIGTERM);
  {
    StopSignalGuard guard;
    REQUIRE(std::raise(SIGTERM) == 0);
    REQUIRE(std::raise(SIGTERM) == 0);  // only a SIGINT is fatal while a stop is pending
    CHECK(stop_signal() == SIGTERM);
    CHECK(g_test_handler_calls == 0);
  }
  clear_stop_request();
}

TEST_CASE("signal_name names the stop signals and numbers the rest", "[cpu]") {
  CHECK(std::string(signal_name(SIGTERM)) == "SIGTERM");
  CHECK(std::string(signal_name(SIGINT)) == "SIGINT");
  CHECK(std::string(signal_name(SIGUSR1)) == "signal " + std::to_string(SIGUSR1));
  CHECK(std::string(signal_name(0)) == "signal 0");
}
