// Streams, events and device guards. The CPU has one implicit stream (null handle) on which all
// work is synchronous, so synchronizing it is a no-op and CPU events are host timestamps. CUDA
// work goes through the small internal API of core/cuda/runtime.h, which a CPU-only build
// defines to throw a clear "no CUDA support" error.
#include <ember/core/stream.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/device_check.h>
#include <ember/core/error.h>

namespace ember {
namespace {

// The current stream of each CUDA device for this thread (null = the legacy default stream).
thread_local std::vector<void*> t_current_streams;

double host_now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

std::atomic<uint64_t> g_host_syncs{0};

/// After every host wait for CUDA work: count it, and report device checks that failed meanwhile.
void after_host_wait() {
  detail::note_host_synchronization();
  check_device_errors();
}

}  // namespace

uint64_t host_synchronizations() { return g_host_syncs.load(std::memory_order_relaxed); }
void detail::note_host_synchronization() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }

// Every host wait checks first that no CUDA graph is being captured on this thread (waiting would
// invalidate the capture): the check runs for CPU no-ops too, so that the CPU tests exercise it.
void Stream::synchronize() const {
  detail::check_not_capturing("Stream::synchronize");
  if (device_.is_cpu()) return;
  device_.validate();
  detail::cuda_stream_synchronize(device_.index(), handle_);
  after_host_wait();
}

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream();
  device.validate();
  const size_t i = static_cast<size_t>(device.index());
  return Stream(device, i < t_current_streams.size() ? t_current_streams[i] : nullptr);
}

void set_current_stream(Stream s) {
  if (s.device().is_cpu()) {
    EMBER_CHECK(s.handle() == nullptr, "set_current_stream: a CPU stream must have a null handle, got ", s.handle());
    return;
  }
  s.device().validate();
  const size_t i = static_cast<size_t>(s.device().index());
  if (t_current_streams.size() <= i) t_current_streams.resize(i + 1, nullptr);
  t_current_streams[i] = s.handle();
}

Stream new_stream(Device device) {
  if (device.is_cpu()) return Stream();
  device.validate();
  return Stream(device, detail::cuda_pool_stream(device.index()));
}

void synchronize(Device device) {
  detail::check_not_capturing("synchronize(device)");
  if (device.is_cpu()) return;
  device.validate();
  detail::cuda_device_synchronize(device.index());
  after_host_wait();
}

// ---- guards ----

StreamGuard::StreamGuard(Stream s) : prev_(current_stream(s.device())) { set_current_stream(s); }

StreamGuard::~StreamGuard() {
  try {
    set_current_stream(prev_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~StreamGuard could not restore the previous stream: %s\n", e.what());
  }
}

DeviceGuard::DeviceGuard(Device d) {
  if (d.is_cpu()) return;
  d.validate();
  prev_ = detail::cuda_get_device();
  if (prev_ != d.index()) detail::cuda_set_device(d.index());
}

DeviceGuard::~DeviceGuard() {
  if (prev_ < 0) return;
  try {
    detail::cuda_set_device(prev_);
  } catch (const std::exception& e) {
    // During process exit, once the CUDA runtime is unloading, there is no device to restore.
    if (!detail::cuda_runtime_unloading())
      std::fprintf(stderr, "ember: ~DeviceGuard could not restore cuda:%d: %s\n", prev_, e.what());
  }
}

// ---- events ----
// A CUDA event's handle is created on first record() on a CUDA stream (on that stream's device);
// an event never recorded has no handle and, on the CPU, host_time_ms_ == 0.

Event::~Event() {
  if (handle_) detail::cuda_event_destroy(device_.index(), handle_);
}

Event::Event(Event&& o) noexcept : device_(o.device_), handle_(o.handle_), host_time_ms_(o.host_time_ms_) {
  o.handle_ = nullptr;
  o.host_time_ms_ = 0;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (handle_) detail::cuda_event_destroy(device_.index(), handle_);
    device_ = o.device_;
    handle_ = o.handle_;
    host_time_ms_ = o.host_time_ms_;
    o.handle_ = nullptr;
    o.host_time_ms_ = 0;
  }
  return *this;
}

void Event::record(Stream s) {
  if (s.device().is_cpu()) {
    // CPU work is synchronous: everything queued "before" is already done.
    if (handle_) detail::cuda_event_destroy(device_.index(), handle_);
    handle_ = nullptr;
    device_ = Device::cpu();
    host_time_ms_ = host_now_ms();
    return;
  }
  s.device().validate();
  if (handle_ && device_ != s.device()) {  // events must be recorded on their own device
    detail::cuda_event_destroy(device_.index(), handle_);
    handle_ = nullptr;
  }
  if (!handle_) handle_ = detail::cuda_event_create(s.device().index());
  device_ = s.device();
  host_time_ms_ = 0;
  detail::cuda_event_record(device_.index(), handle_, s.handle());
}

void Event::wait(Stream s) const {
  if (s.device().is_cpu()) detail::check_not_capturing("Event::wait on the CPU");
  if (!handle_) return;  // a CPU or never-recorded event: nothing outstanding to wait for
  if (s.device().is_cpu()) {
    detail::cuda_event_synchronize(handle_);  // the CPU "stream" waits by blocking the host
    after_host_wait();
    return;
  }
  s.device().validate();
  detail::cuda_event_wait(handle_, s.device().index(), s.handle());
}

void Event::synchronize() const {
  detail::check_not_capturing("Event::synchronize");
  if (!handle_) return;
  detail::cuda_event_synchronize(handle_);
  after_host_wait();
}

bool Event::query() const { return handle_ ? detail::cuda_event_query(handle_) : true; }

float Event::elapsed_ms(const Event& end) const {
  const bool this_cuda = handle_ != nullptr, end_cuda = end.handle_ != nullptr;
  EMBER_CHECK(this_cuda || host_time_ms_ != 0, "Event::elapsed_ms: the start event was never recorded");
  EMBER_CHECK(end_cuda || end.host_time_ms_ != 0, "Event::elapsed_ms: the end event was never recorded");
  EMBER_CHECK(this_cuda == end_cuda && device_ == end.device_, "Event::elapsed_ms: start was recorded on ",
              device_.str(), " and end on ", end.device_.str(), "; both must be on the same device");
  if (this_cuda) return detail::cuda_event_elapsed_ms(handle_, end.handle_);
  return static_cast<float>(end.host_time_ms_ - host_time_ms_);
}

}  // namespace ember
