// Device checks read without stalling (design notes in core/device_check.h).
//
// Slot life: free -> reserve() (record cleared, new ticket) -> submit() (event recorded, pending)
// -> poll() once the event completed (record read, slot and event freed). A slot's ticket grows
// with every reuse, so the device claim word (atomicMax to the ticket) never needs resetting.
// One mutex guards everything; backend calls happen under it.
#include <ember/core/device_check.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include <ember/core/cuda_graph.h>
#include <ember/core/error.h>

namespace ember {
namespace {

thread_local std::string t_context;  // the innermost DeviceCheckContext label of this thread

std::string default_describe(const DeviceCheckInfo& info, int64_t a, int64_t b) {
  return std::string(info.op) + ": a device-side check failed (values " + std::to_string(a) + ", " + std::to_string(b) +
         ")";
}

bool env_synchronous() {
  const char* v = std::getenv("EMBER_SYNC_DEVICE_CHECKS");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace

DeviceCheckRegistry::DeviceCheckRegistry(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), tickets_(kSlots, 0), synchronous_(env_synchronous()) {
  free_.reserve(kSlots);
  for (int i = kSlots - 1; i >= 0; --i) free_.push_back(i);
}

DeviceCheckRegistry::~DeviceCheckRegistry() = default;  // pending events belong to the backend

int64_t* DeviceCheckRegistry::record(int slot) const {
  return backend_->host_records() + static_cast<size_t>(slot) * kRecordWords;
}

DeviceErrorSlot DeviceCheckRegistry::reserve(int device, int& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(backend_ != nullptr, "device checks need CUDA, which this ember build does not have");
  if (free_.empty()) poll_locked(false);
  if (free_.empty()) {
    detail::check_not_capturing("a device check's wait for a free slot");
    // Every slot is pending on work not yet done: some stream has not been synchronized for
    // kSlots checks. Wait for the oldest one.
    backend_->event_wait(pending_.front().event);
    detail::note_host_synchronization();
    poll_locked(false);
  }
  EMBER_ASSERT(!free_.empty(), "device checks: no slot is free after the oldest check completed");
  slot = free_.back();
  free_.pop_back();
  volatile int64_t* r = record(slot);
  for (int i = 0; i < kRecordWords; ++i) r[i] = 0;
  // The clear must be visible before the kernel that may raise the slot is launched.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  DeviceErrorSlot s;
  s.claim = backend_->claims(device) + slot;
  s.record = backend_->device_records(device) + static_cast<size_t>(slot) * kRecordWords;
  s.ticket = ++tickets_[static_cast<size_t>(slot)];
  return s;
}

void DeviceCheckRegistry::cancel(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

void DeviceCheckRegistry::submit(int slot, const DeviceCheckInfo& info, int device, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  void* event = nullptr;
  try {
    event = backend_->record_event(device, stream);
  } catch (...) {
    free_.push_back(slot);
    throw;
  }
  pending_.push_back(Pending{slot, device, event, info, ++calls_[info.op], t_context});
  if (synchronous_) {
    detail::check_not_capturing("a synchronous device check (EMBER_SYNC_DEVICE_CHECKS)");
    backend_->event_wait(event);
    detail::note_host_synchronization();
    poll_locked(false);
    throw_if_failed_locked();
  }
}

void DeviceCheckRegistry::complete_locked(const Pending& p) {
  const volatile int64_t* r = record(p.slot);
  if (r[0] != 0) {
    std::atomic_thread_fence(std::memory_order_acquire);  // a and b were written before the flag
    const int64_t a = r[1], b = r[2];
    if (failure_.empty()) {
      failure_ = (p.info.describe ? p.info.describe : &default_describe)(p.info, a, b) +
                 " (found on cuda:" + std::to_string(p.device) + " by call " + std::to_string(p.call) + " of " +
                 p.info.op + (p.context.empty() ? std::string() : ", " + p.context) +
                 (synchronous_ ? ")" : "; reported at the next synchronization)");
    } else {
      ++more_failures_;
    }
  }
  free_.push_back(p.slot);
  backend_->event_release(p.device, p.event);
}

void DeviceCheckRegistry::poll_locked(bool wait) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (wait && !backend_->event_done(it->event)) {
      backend_->event_wait(it->event);
      detail::note_host_synchronization();
    }
    if (backend_->event_done(it->event)) {
      complete_locked(*it);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void DeviceCheckRegistry::throw_if_failed_locked() {
  if (failure_.empty()) return;
  std::string msg = std::move(failure_);
  if (more_failures_ > 0) msg += " (and " + std::to_string(more_failures_) + " more failed device checks)";
  failure_.clear();
  more_failures_ = 0;
  EMBER_FAIL(msg);
}

void DeviceCheckRegistry::poll() {
  if (detail::capturing()) return;  // no event queries inside a capture; the next wait after it reads them
  std::lock_guard<std::mutex> lock(mu_);
  if (!backend_) return;
  poll_locked(false);
  // While an exception unwinds the stack (a destructor synchronizing), keep the failure for the
  // next synchronization rather than terminate.
  if (std::uncaught_exceptions() == 0) throw_if_failed_locked();
}

void DeviceCheckRegistry::wait_all() {
  detail::check_not_capturing("flush_device_checks");
  std::lock_guard<std::mutex> lock(mu_);
  if (!backend_) return;
  poll_locked(true);
  if (std::uncaught_exceptions() == 0) throw_if_failed_locked();
}

size_t DeviceCheckRegistry::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

void DeviceCheckRegistry::set_synchronous(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  synchronous_ = on;
}

bool DeviceCheckRegistry::synchronous() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synchronous_;
}

DeviceCheckRegistry& device_check_registry() {
  // Never destroyed: checks may be polled from static destructors after main.
  static DeviceCheckRegistry* r = new DeviceCheckRegistry(detail::make_cuda_device_check_backend());
  return *r;
}

// ---- DeviceCheck ----

DeviceCheck::DeviceCheck(const DeviceCheckInfo& info, Stream stream) : info_(info), stream_(stream) {
  EMBER_CHECK(stream.device().is_cuda(), info.op, ": device checks are for CUDA streams, got one on ",
              stream.device().str());
  // Inside a CUDA graph capture the check is not armed: its kernels get a null slot and skip
  // reporting (a slot's ticket and event are host state that a replay would not renew; the
  // values were checked by the eager warm-up steps). docs/cuda_graphs.md.
  if (detail::capturing()) return;
  slot_ = device_check_registry().reserve(stream.device().index(), index_);
}

DeviceCheck::~DeviceCheck() {
  if (index_ < 0) return;
  // No launched(): the launch, or work queued after it, threw. A kernel queued before the throw
  // may still raise the slot, so the slot is not handed back now (the next check to take it would
  // read that raise as its own): it is retired as a submitted check is, once the stream has passed
  // this point, and a raise is reported under this op's name.
  try {
    device_check_registry().submit(index_, info_, stream_.device().index(), stream_.handle());
  } catch (...) {
    // The exception in flight says more (recording the event failed, or a synchronous check raised).
  }
}

void DeviceCheck::launched() {
  if (index_ < 0 && slot_.claim == nullptr) return;  // not armed (inside a capture)
  EMBER_ASSERT(index_ >= 0, info_.op, ": DeviceCheck::launched() called twice");
  const int slot = index_;
  index_ = -1;  // from here the registry owns the slot, whatever submit() does
  device_check_registry().submit(slot, info_, stream_.device().index(), stream_.handle());
}

void check_device_errors() { device_check_registry().poll(); }
void flush_device_checks() { device_check_registry().wait_all(); }
void set_sync_device_checks(bool on) { device_check_registry().set_synchronous(on); }
bool sync_device_checks() { return device_check_registry().synchronous(); }

DeviceCheckContext::DeviceCheckContext(std::string label) : prev_(std::exchange(t_context, std::move(label))) {}
DeviceCheckContext::~DeviceCheckContext() { t_context = std::move(prev_); }

}  // namespace ember
