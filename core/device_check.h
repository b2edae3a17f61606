#pragma once
// Checks that only a kernel can make (an index out of range, a class target outside [0, C)),
// reported without making the host wait.
//
// A launcher that validates data on the device takes a DeviceCheck before its launch. The check
// owns a slot: a record {raised, a, b} in host memory that the GPU writes directly (mapped pinned
// memory) and a claim word in device memory, handed to the kernel as a DeviceErrorSlot. A kernel
// that finds bad data raises the slot (core/cuda/device_check.cuh): the first thread to claim it
// writes two values (the bad index, the row), then the flag. After the launch, launched() records
// an event on the stream and puts the check on a pending list; nothing waits. At the next natural
// synchronization — Stream::synchronize, synchronize(Device), Event::synchronize, a copy to the
// host such as item() or to(cpu) — the pending checks whose event has completed are read, and the
// first raised one becomes an ember::Error naming the op, which call of it raised the flag, the
// device, and the thread's DeviceCheckContext label ("DataLoader batch 12") if one was set.
//
// So a bad index in a training step surfaces when the loss is read, not at the index_select that
// caused it. To stop at the op itself, set EMBER_SYNC_DEVICE_CHECKS=1 (or call
// set_sync_device_checks(true)): each check is then read right after its kernel, at the price of a
// host synchronization per check.
//
// The bookkeeping (slots, tickets, the pending list, messages) is independent of CUDA: the memory
// and events come from a Backend, which is CUDA in production and a host fake in the CPU tests.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ember/core/stream.h>

namespace ember {

/// Where a kernel reports (plain data, passed to kernels by value).
struct DeviceErrorSlot {
  unsigned long long* claim = nullptr;  // device memory: the first raiser moves it to `ticket`
  int64_t* record = nullptr;  // device-side address of the host record {raised, a, b, unused}
  unsigned long long ticket = 0;  // this check's use of the slot (grows with every reuse)
};

struct DeviceCheckInfo;
/// The first line of the error for a raised record holding (a, b).
using DeviceCheckDescribe = std::string (*)(const DeviceCheckInfo& info, int64_t a, int64_t b);

/// What a launcher says about its check, for the message.
struct DeviceCheckInfo {
  const char* op = "";  // e.g. "index_select (cuda)"; must outlive the check (a string literal)
  int64_t arg0 = 0, arg1 = 0;  // op-specific context for describe (the dim size, the classes)
  DeviceCheckDescribe describe = nullptr;  // null: "<op>: a device-side check failed (a, b)"
};

/// Slots, tickets and the pending list of device checks (one process-wide instance,
/// device_check_registry(); tests make their own over a fake Backend).
class DeviceCheckRegistry {
 public:
  /// Memory and events for the checks.
  class Backend {
   public:
    virtual ~Backend() = default;
    /// kSlots host records of kRecordWords int64 each, readable by the host.
    virtual int64_t* host_records() = 0;
    /// The same records as `device` addresses them (mapped memory's device pointer).
    virtual int64_t* device_records(int device) = 0;
    /// kSlots claim words in `device`'s memory, zero before their first use.
    virtual unsigned long long* claims(int device) = 0;
    /// An event that completes once the work queued so far on `stream` (of `device`) is done.
    virtual void* record_event(int device, void* stream) = 0;
    /// Whether the event has completed (never waits).
    virtual bool event_done(void* event) = 0;
    /// Blocks the host until the event completes.
    virtual void event_wait(void* event) = 0;
    /// The event may be reused.
    virtual void event_release(int device, void* event) = 0;
  };

  static constexpr int kSlots = 1024;
  static constexpr int kRecordWords = 4;  // {raised, a, b, unused}

  /// A null backend makes a registry that has nothing to check (CPU-only builds).
  explicit DeviceCheckRegistry(std::unique_ptr<Backend> backend);
  ~DeviceCheckRegistry();
  DeviceCheckRegistry(const DeviceCheckRegistry&) = delete;
  DeviceCheckRegistry& operator=(const DeviceCheckRegistry&) = delete;

  /// Takes a free slot for a check on `device` and clears its record. When all kSlots are pending,
  /// waits for the oldest (a host synchronization; only if a stream is never synchronized).
  DeviceErrorSlot reserve(int device, int& slot);
  /// Gives back a reserved slot no kernel was given (DeviceCheck submits instead: see its destructor).
  void cancel(int slot);
  /// Registers the check of `slot`, whose kernels were queued on `stream`: records an event after
  /// them. In synchronous mode waits for it and throws if the slot was raised.
  void submit(int slot, const DeviceCheckInfo& info, int device, void* stream);
  /// Reads every pending check whose work has completed (never waits); throws the first raised one.
  void poll();
  /// Waits for every pending check (host synchronizations), then throws the first raised one.
  void wait_all();
  /// Checks still waiting for their work to complete.
  size_t pending() const;
  /// Synchronous mode: submit() waits and throws at the call (EMBER_SYNC_DEVICE_CHECKS=1).
  void set_synchronous(bool on);
  bool synchronous() const;

 private:
  struct Pending {
    int slot;
    int device;
    void* event;
    DeviceCheckInfo info;
    uint64_t call;  // info.op's call number
    std::string context;  // the submitting thread's DeviceCheckContext label
  };
  int64_t* record(int slot) const;
  void complete_locked(const Pending& p);  // reads the record, frees slot and event
  void poll_locked(bool wait);
  void throw_if_failed_locked();

  mutable std::mutex mu_;
  std::unique_ptr<Backend> backend_;
  std::vector<unsigned long long> tickets_;  // per slot: the last ticket handed out
  std::vector<int> free_;  // free slot indices
  std::deque<Pending> pending_;
  std::map<const char*, uint64_t> calls_;  // per op: checks submitted so far
  std::string failure_;  // the first raised check not yet thrown
  int more_failures_ = 0;  // raised checks after it
  bool synchronous_ = false;
};

/// The process-wide registry (CUDA memory and events in CUDA builds; empty otherwise).
DeviceCheckRegistry& device_check_registry();

/// One device check around one launch (or a few on the same stream):
///   DeviceCheck check({"index_select (cuda)", D, 0, &describe}, current_stream(dev));
///   kernel<<<..., stream>>>(..., check.slot());
///   check.launched();
class DeviceCheck {
 public:
  /// Reserves a slot for work about to be queued on `stream` (a CUDA stream).
  DeviceCheck(const DeviceCheckInfo& info, Stream stream);
  /// Without launched() (the launch or later work threw), the check is still submitted: a kernel
  /// queued before the throw may raise its slot, which is not reused until the stream passes it.
  ~DeviceCheck();
  DeviceCheck(const DeviceCheck&) = delete;
  DeviceCheck& operator=(const DeviceCheck&) = delete;
  /// What the kernels get.
  const DeviceErrorSlot& slot() const { return slot_; }
  /// Call once the kernels that may raise the slot are queued (see DeviceCheckRegistry::submit).
  void launched();

 private:
  DeviceCheckInfo info_;
  Stream stream_;
  int index_ = -1;
  DeviceErrorSlot slot_;
};

/// Reads the device checks whose work has completed and throws the first raised one (never
/// waits). The stream layer calls it after every host synchronization.
void check_device_errors();
/// Waits for every pending device check, then throws the first raised one.
void flush_device_checks();
/// Synchronous mode (see the top comment); initially on when EMBER_SYNC_DEVICE_CHECKS=1.
void set_sync_device_checks(bool on);
bool sync_device_checks();

/// Labels the device checks this thread submits while the guard lives ("DataLoader batch 12"),
/// so that an error found later says which batch or step raised it. Guards nest; the innermost
/// label is used.
class DeviceCheckContext {
 public:
  explicit DeviceCheckContext(std::string label);
  ~DeviceCheckContext();
  DeviceCheckContext(const DeviceCheckContext&) = delete;
  DeviceCheckContext& operator=(const DeviceCheckContext&) = delete;

 private:
  std::string prev_;
};

namespace detail {
/// The CUDA backend (core/cuda/device_check_cuda.cpp); null in builds without CUDA.
std::unique_ptr<DeviceCheckRegistry::Backend> make_cuda_device_check_backend();
}  // namespace detail

}  // namespace ember
