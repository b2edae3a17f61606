#pragma once
// Streams and events. A Stream names a CUDA stream on a device (the CPU has one implicit stream
// whose handle is null). Each CUDA device has a current stream per host thread, the legacy
// default stream unless set otherwise. All work ember launches goes on the current stream.
#include <cstdint>

#include <ember/core/device.h>

namespace ember {

class Stream {
 public:
  constexpr Stream() = default;
  constexpr Stream(Device device, void* handle) : device_(device), handle_(handle) {}
  Device device() const { return device_; }
  /// The cudaStream_t (null: the default stream, or the CPU).
  void* handle() const { return handle_; }
  /// Blocks the host until all work queued on this stream is done, then reports a device check
  /// that failed meanwhile (core/device_check.h) as an Error.
  void synchronize() const;
  friend bool operator==(const Stream& a, const Stream& b) = default;

 private:
  Device device_ = Device::cpu();
  void* handle_ = nullptr;
};

/// The current stream of `device` for this thread.
Stream current_stream(Device device);
/// Sets the current stream for its device on this thread.
void set_current_stream(Stream s);
/// A non-blocking stream on `device` from a process-wide pool (never destroyed). The pool hands
/// out 32 distinct streams per device, then reuses them round-robin (CPU: the null stream).
Stream new_stream(Device device);
/// Blocks until all work on `device` is done (no-op for the CPU).
void synchronize(Device device);

/// How many times ember made the host wait for CUDA work since the process started: every
/// Stream::synchronize, synchronize(Device), Event::synchronize and Event::wait on the CPU of a
/// CUDA event, which is also how copies to and from the host (item(), to(cpu)) wait, and the waits
/// of device checks (core/device_check.h). CPU no-ops are not counted, nor the implicit waits of
/// cudaMalloc/cudaFree (the caching allocator avoids those in steady state). A training step
/// should leave it unchanged until its loss is read; [cuda] tests check that.
uint64_t host_synchronizations();

namespace detail {
/// Adds one to host_synchronizations() (for waits made outside this file).
void note_host_synchronization();
}  // namespace detail

/// Makes `s` current for its device until the guard leaves scope.
class StreamGuard {
 public:
  explicit StreamGuard(Stream s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

/// Makes `d` the current CUDA device of this thread until the guard leaves scope (no-op for CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

/// A CUDA event (timing enabled). On the CPU, record() takes a host timestamp.
class Event {
 public:
  Event() = default;
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  void record(Stream s);
  /// Makes future work on `s` wait for this event.
  void wait(Stream s) const;
  void synchronize() const;
  bool query() const;
  /// Milliseconds between two recorded events.
  float elapsed_ms(const Event& end) const;

 private:
  Device device_ = Device::cpu();
  void* handle_ = nullptr;  // cudaEvent_t
  double host_time_ms_ = 0;  // CPU events
};

}  // namespace ember
