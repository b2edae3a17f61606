#include <ember/core/determinism.h>

#include <atomic>

#include <ember/core/error.h>

namespace ember {

namespace {
// Read when an op chooses its path: relaxed, a setting needs no ordering with other memory.
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic(bool on) { g_deterministic.store(on, std::memory_order_relaxed); }
bool deterministic() { return g_deterministic.load(std::memory_order_relaxed); }

namespace detail {

std::string nondeterministic_message(const std::string& op, const std::string& why) {
  std::string m = op + " has no deterministic implementation";
  if (!why.empty()) m += " (" + why + ")";
  m += "; call ember::set_deterministic(false) (or set train.deterministic false) to allow it";
  return m;
}

void alert_nondeterministic(const std::string& op, const std::string& why) {
  if (deterministic()) throw Error(nondeterministic_message(op, why));
}

}  // namespace detail
}  // namespace ember
