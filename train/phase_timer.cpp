// Per-epoch phase timers (train/phase_timer.h).
//
// CPU device: every phase is steady_clock time (CPU ops run synchronously on the calling thread).
// CUDA device: every phase but data wait is a pair of ember::Events recorded on the device's
// current stream; the pairs are read once, after a synchronize, in finish_epoch(). Host time would
// only measure kernel launches there. The pairs come from a pool that is reused every epoch, so
// after the first epoch a step allocates nothing.
#include <ember/train/phase_timer.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/stream.h>

#if defined(EMBER_WITH_CUDA)
#include <nvtx3/nvToolsExt.h>
#endif

namespace ember::train {

namespace {

using Clock = std::chrono::steady_clock;

// Data wait above 1/kInputBoundDivisor of the step is reported as the input bottleneck (compared
// as wait * divisor > total, which is exact for the boundary case, unlike total * 0.2).
constexpr double kInputBoundDivisor = 5.0;

int index_of(Phase p) {
  const int i = static_cast<int>(p);
  EMBER_CHECK(i >= 0 && i < kNumPhases, "PhaseTimers: phase index ", i, " is out of range [0, ", kNumPhases, ")");
  return i;
}

}  // namespace

const char* phase_name(Phase p) {
  static constexpr const char* kNames[kNumPhases] = {"data_wait", "h2d", "forward", "backward", "optimizer"};
  return kNames[index_of(p)];
}

double PhaseTotals::step_seconds() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

bool PhaseTotals::input_bound() const {
  const double total = step_seconds();
  return total > 0 && (*this)[Phase::DataWait] * kInputBoundDivisor > total;
}

std::string PhaseTotals::verdict() const {
  if (!input_bound()) return "";
  const double pct = 100.0 * (*this)[Phase::DataWait] / step_seconds();
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "input-bound: data wait is %.0f%% of the step; raise data.workers or set data.resident", pct);
  return buf;
}

struct PhaseTimers::Impl {
  /// One device-timed phase: events recorded at begin() and end() on the current stream.
  struct EventPair {
    Phase phase = Phase::Forward;
    Event begin, end;
  };

  Device device;
  bool gpu = false;
  bool open = false;
  Phase open_phase = Phase::DataWait;
  Clock::time_point open_start;  // host time of begin(), used for host-timed phases
  bool open_on_device = false;  // the open phase's begin event is pool[used]
  PhaseTotals totals;  // host-timed phases accumulate here as they end
  std::vector<EventPair> pool;  // grows during the first epoch, reused afterwards
  size_t used = 0;  // pairs recorded this epoch
  std::exception_ptr deferred;  // an error of end_in_scope(), for the next begin()/finish_epoch()

  explicit Impl(Device d) : device(d), gpu(d.is_cuda()) {}

  void rethrow_deferred() {
    if (deferred) std::rethrow_exception(std::exchange(deferred, nullptr));
  }
};

PhaseTimers::PhaseTimers(Device device) : impl_(std::make_unique<Impl>(device)) {
  // Fail here, not on the first step, when a CUDA device is named but cannot be used.
  if (device.is_cuda()) device.validate();
}

PhaseTimers::~PhaseTimers() {
#if defined(EMBER_WITH_CUDA)
  // A phase begun without a Scope and never ended (the trainer's data wait when the loader
  // throws) still has its NVTX range pushed on this thread; pop it so ranges pushed later by this
  // thread do not nest under it in Nsight Systems.
  if (impl_ && impl_->open) nvtxRangePop();
#endif
}

void PhaseTimers::begin(Phase p) {
  Impl& m = *impl_;
  m.rethrow_deferred();
  index_of(p);  // rejects an out-of-range phase before any state changes
  EMBER_CHECK(!m.open, "PhaseTimers::begin(", phase_name(p), "): phase ", phase_name(m.open_phase),
              " is still open; end(", phase_name(m.open_phase), ") first (phases do not nest)");
#if defined(EMBER_WITH_CUDA)
  nvtxRangePushA(phase_name(p));
#endif
  // Data wait is host time even on a GPU: it is the host blocked on the loader.
  m.open_on_device = m.gpu && p != Phase::DataWait;
  if (m.open_on_device) {
    if (m.used == m.pool.size()) m.pool.emplace_back();
    Impl::EventPair& pair = m.pool[m.used];
    pair.phase = p;
    try {
      pair.begin.record(current_stream(m.device));
    } catch (...) {
#if defined(EMBER_WITH_CUDA)
      nvtxRangePop();
#endif
      throw;
    }
  } else {
    m.open_start = Clock::now();
  }
  m.open_phase = p;
  m.open = true;
}

void PhaseTimers::end(Phase p) {
  Impl& m = *impl_;
  EMBER_CHECK(m.open, "PhaseTimers::end(", phase_name(p), "): no phase is open (begin(", phase_name(p),
              ") was not called or it already ended)");
  EMBER_CHECK(m.open_phase == p, "PhaseTimers::end(", phase_name(p), "): the open phase is ", phase_name(m.open_phase),
              ", not ", phase_name(p));
  m.open = false;
#if defined(EMBER_WITH_CUDA)
  nvtxRangePop();
#endif
  if (!m.open_on_device) {
    m.totals.seconds[index_of(p)] += std::chrono::duration<double>(Clock::now() - m.open_start).count();
    return;
  }
  // A Scope ending during unwinding (a step threw) must not throw again, which would terminate:
  // then the half-recorded pair is simply dropped from this epoch's totals.
  if (std::uncaught_exceptions() > 0) {
    try {
      m.pool[m.used].end.record(current_stream(m.device));
      ++m.used;
    } catch (...) {
    }
    return;
  }
  m.pool[m.used].end.record(current_stream(m.device));
  ++m.used;
}

void PhaseTimers::end_in_scope(Phase p) noexcept {
  try {
    end(p);
  } catch (...) {
    // ~Scope is noexcept, so throwing here would call std::terminate. On a GPU, recording the end
    // event is where an asynchronous fault of the phase's kernels (an illegal address) surfaces;
    // keep it so the caller still gets an ember::Error. During unwinding the step's own
    // exception is the one to report.
    if (std::uncaught_exceptions() == 0 && !impl_->deferred) impl_->deferred = std::current_exception();
  }
}

void PhaseTimers::step_done() { ++impl_->totals.steps; }

PhaseTotals PhaseTimers::finish_epoch() {
  Impl& m = *impl_;
  m.rethrow_deferred();
  EMBER_CHECK(!m.open, "PhaseTimers::finish_epoch: phase ", phase_name(m.open_phase),
              " is still open; end it before finishing the epoch");
  PhaseTotals out = m.totals;
  if (m.used > 0) {
    // Events complete in stream order; one device synchronize makes every pair readable.
    synchronize(m.device);
    for (size_t k = 0; k < m.used; ++k) {
      const Impl::EventPair& pair = m.pool[k];
      out.seconds[index_of(pair.phase)] += static_cast<double>(pair.begin.elapsed_ms(pair.end)) / 1000.0;
    }
  }
  m.totals = PhaseTotals{};
  m.used = 0;
  return out;
}

}  // namespace ember::train
