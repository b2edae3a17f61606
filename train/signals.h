#pragma once
// Graceful stop on SIGTERM / SIGINT (Slurm preemption, scancel, Ctrl-C): the handler only sets a
// flag; the training loop finishes its current step, writes last.ckpt and exits non-zero.
#include <atomic>

namespace ember::train {

/// Installs handlers for SIGTERM and SIGINT while alive and restores the previous ones after.
/// A second SIGINT while a stop is pending restores the default action and re-raises (so a user
/// can still kill a stuck run with two Ctrl-C). One guard at a time.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;
};

/// True once SIGTERM or SIGINT arrived under a guard.
bool stop_requested();
/// The signal number that requested the stop (0: none).
int stop_signal();
/// Clears the flag (tests; a new guard also clears it).
void clear_stop_request();
/// "SIGTERM", "SIGINT", or "signal N".
const char* signal_name(int sig);

}  // namespace ember::train
