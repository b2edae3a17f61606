// Graceful stop on SIGTERM / SIGINT (train/signals.h).
//
// The handler does only async-signal-safe work: it stores the signal number in a lock-free atomic
// (the training loop polls it between steps) and, for a SIGINT while a stop is already pending,
// restores the default action and re-raises. SA_RESTART keeps the loader's blocking reads and
// waits from failing with EINTR: the flag is polled, nothing needs interrupting.
#include <ember/train/signals.h>

#include <signal.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <ember/core/error.h>

namespace ember::train {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic int");
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free atomic bool");

std::atomic<int> g_stop_signal{0};  // 0: no stop requested
std::atomic<bool> g_guard_alive{false};  // one guard at a time
struct sigaction g_prev_term;  // the handlers a guard replaced, restored by its destructor
struct sigaction g_prev_int;

extern "C" void on_stop_signal(int sig) {
  const int saved_errno = errno;  // sigaction/raise may set errno under the interrupted code
  if (sig == SIGINT && g_stop_signal.load() != 0) {
    // Second Ctrl-C: the run is stuck or the user will not wait; die the default way.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, nullptr);
    raise(SIGINT);  // blocked while this handler runs; delivered (and fatal) when it returns
  } else {
    int expected = 0;  // the first signal names the stop
    g_stop_signal.compare_exchange_strong(expected, sig);
  }
  errno = saved_errno;
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  EMBER_CHECK(!g_guard_alive.exchange(true),
              "StopSignalGuard: another guard is already installed (one guard at a time)");
  g_stop_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // Block the other stop signal during the handler so the two cannot interleave.
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &g_prev_term) != 0) {
    const int err = errno;
    g_guard_alive.store(false);
    EMBER_FAIL("StopSignalGuard: sigaction(SIGTERM) failed: ", std::strerror(err));
  }
  if (sigaction(SIGINT, &sa, &g_prev_int) != 0) {
    const int err = errno;
    sigaction(SIGTERM, &g_prev_term, nullptr);
    g_guard_alive.store(false);
    EMBER_FAIL("StopSignalGuard: sigaction(SIGINT) failed: ", std::strerror(err));
  }
}

StopSignalGuard::~StopSignalGuard() {
  // The stop flag stays set: the caller reads stop_signal() after the loop has unwound.
  sigaction(SIGINT, &g_prev_int, nullptr);
  sigaction(SIGTERM, &g_prev_term, nullptr);
  g_guard_alive.store(false);
}

bool stop_requested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

int stop_signal() { return g_stop_signal.load(); }

void clear_stop_request() { g_stop_signal.store(0); }

const char* signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  // Per-thread storage: the pointer stays valid until this thread's next call.
  thread_local char buf[32];
  std::snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

}  // namespace ember::train
