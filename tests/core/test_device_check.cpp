// The bookkeeping of the device checks (core/device_check.h), driven through a fake Backend whose
// "device" is the test: it writes a slot's record the way a kernel would and decides when an
// event completes. The CUDA side (mapped memory, events, kernels raising) is in
// tests/cuda/test_stream_cuda.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ember/core/device_check.h>
#include <ember/core/error.h>
#include <ember/core/stream.h>
#include "support/error_of.h"

using ember::DeviceCheckContext;
using ember::DeviceCheckInfo;
using ember::DeviceCheckRegistry;
using ember::DeviceErrorSlot;

namespace {

constexpr int kSlots = DeviceCheckRegistry::kSlots;
constexpr int kWords = DeviceCheckRegistry::kRecordWords;

struct FakeDevice {
  std::vector<int64_t> records = std::vector<int64_t>(static_cast<size_t>(kSlots * kWords), -7);
  std::vector<unsigned long long> claims = std::vector<unsigned long long>(kSlots, 0);
  std::vector<bool> done;  // per event id (1-based handles)
  std::vector<int> released;  // event ids handed back
  int waits = 0;
  bool complete_on_record = false;

  /// What a kernel does: claim the slot with its ticket, write (a, b), raise the flag.
  void raise(const DeviceErrorSlot& s, int64_t a, int64_t b) {
    if (*s.claim >= s.ticket) return;
    *s.claim = s.ticket;
    s.record[1] = a;
    s.record[2] = b;
    s.record[0] = 1;
  }
  void finish_all() { done.assign(done.size(), true); }
};

class FakeBackend final : public DeviceCheckRegistry::Backend {
 public:
  explicit FakeBackend(FakeDevice* d) : d_(d) {}
  int64_t* host_records() override { return d_->records.data(); }
  int64_t* device_records(int) override { return d_->records.data(); }
  unsigned long long* claims(int) override { return d_->claims.data(); }
  void* record_event(int, void*) override {
    d_->done.push_back(d_->complete_on_record);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(d_->done.size()));
  }
  bool event_done(void* e) override { return d_->done[id(e) - 1]; }
  void event_wait(void* e) override {
    ++d_->waits;
    d_->done[id(e) - 1] = true;
  }
  void event_release(int, void* e) override { d_->released.push_back(static_cast<int>(id(e))); }

 private:
  static size_t id(void* e) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(e)); }
  FakeDevice* d_;
};

std::string describe_index(const DeviceCheckInfo& info, int64_t a, int64_t b) {
  return std::string(info.op) + ": index " + std::to_string(a) + " at " + std::to_string(b) + " is out of range [0, " +
         std::to_string(info.arg0) + ")";
}

const DeviceCheckInfo kGather{"gather (fake)", 10, 0, &describe_index};
const DeviceCheckInfo kOther{"other (fake)", 0, 0, nullptr};
void* const kStream = reinterpret_cast<void*>(0x100);

struct Fixture {
  FakeDevice dev;
  DeviceCheckRegistry reg{std::make_unique<FakeBackend>(&dev)};
  Fixture() { reg.set_synchronous(false); }
  /// reserve + submit one check; `raise` writes (a, b) as its kernel.
  DeviceErrorSlot run(const DeviceCheckInfo& info, bool raise = false, int64_t a = 0, int64_t b = 0) {
    int slot = -1;
    const DeviceErrorSlot s = reg.reserve(0, slot);
    if (raise) dev.raise(s, a, b);
    reg.submit(slot, info, 0, kStream);
    return s;
  }
};

}  // namespace

TEST_CASE("device checks: a reserved slot is cleared and gets a fresh ticket on every reuse", "[cpu]") {
  Fixture f;
  int slot = -1;
  const DeviceErrorSlot a = f.reg.reserve(0, slot);
  REQUIRE(slot >= 0);
  CHECK(a.claim == f.dev.claims.data() + slot);
  CHECK(a.record == f.dev.records.data() + slot * kWords);
  for (int i = 0; i < kWords; ++i) CHECK(a.record[i] == 0);  // was -7
  CHECK(a.ticket == 1);
  f.reg.cancel(slot);
  int again = -1;
  const DeviceErrorSlot b = f.reg.reserve(0, again);
  CHECK(again == slot);  // the cancelled slot is handed out next
  CHECK(b.ticket == 2);  // a claim word left at 1 by an earlier raise cannot block this use
  f.dev.claims[static_cast<size_t>(slot)] = 1;
  f.dev.raise(b, 5, 6);
  CHECK(b.record[0] == 1);
}

TEST_CASE("device checks: nothing is read before the work completes, then the first raise is thrown once", "[cpu]") {
  Fixture f;
  f.run(kGather);
  const DeviceErrorSlot s = f.run(kGather, true, 12, 3);
  f.dev.raise(s, 99, 99);  // a second thread of the same kernel: the claim is taken, nothing changes
  CHECK(f.reg.pending() == 2);
  CHECK_NOTHROW(f.reg.poll());  // the events have not completed: no message yet
  CHECK(f.reg.pending() == 2);
  f.dev.finish_all();
  const std::string msg = ember::testing::error_of([&] { f.reg.poll(); });
  INFO(msg);
  CHECK(msg.find("gather (fake): index 12 at 3 is out of range [0, 10)") != std::string::npos);
  CHECK(msg.find("call 2 of gather (fake)") != std::string::npos);  // the second call raised it
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("reported at the next synchronization") != std::string::npos);
  CHECK(f.reg.pending() == 0);
  CHECK(f.dev.released.size() == 2);
  CHECK_NOTHROW(f.reg.poll());  // reported once
  CHECK_NOTHROW(f.run(kGather));  // the slot is free again
}

TEST_CASE("device checks: the context label, several failures, and the default message", "[cpu]") {
  Fixture f;
  {
    DeviceCheckContext outer("epoch 1");
    DeviceCheckContext ctx("DataLoader batch 7");
    f.run(kGather, true, -1, 0);
  }
  f.run(kOther, true, 4, 5);
  f.run(kGather, true, 11, 1);
  f.dev.finish_all();
  std::string msg = ember::testing::error_of([&] { f.reg.poll(); });
  INFO(msg);
  CHECK(msg.find("index -1 at 0") != std::string::npos);
  CHECK(msg.find("DataLoader batch 7") != std::string::npos);
  CHECK(msg.find("epoch 1") == std::string::npos);  // the innermost label only
  CHECK(msg.find("(and 2 more failed device checks)") != std::string::npos);
  f.run(kOther, true, 4, 5);
  f.dev.finish_all();
  msg = ember::testing::error_of([&] { f.reg.poll(); });
  CHECK(msg.find("other (fake): a device-side check failed (values 4, 5)") != std::string::npos);
  CHECK(msg.find("call 2 of other (fake)") != std::string::npos);
  CHECK(msg.find("DataLoader batch 7") == std::string::npos);  // the guards are gone
}

TEST_CASE("device checks: wait_all waits for pending work and counts each wait", "[cpu]") {
  Fixture f;
  f.run(kGather);
  f.run(kGather, true, 20, 0);
  const uint64_t before = ember::host_synchronizations();
  const std::string msg = ember::testing::error_of([&] { f.reg.wait_all(); });
  CHECK(msg.find("index 20") != std::string::npos);
  CHECK(f.dev.waits == 2);
  CHECK(ember::host_synchronizations() == before + 2);
  CHECK(f.reg.pending() == 0);
}

TEST_CASE("device checks: synchronous mode throws at the call", "[cpu]") {
  Fixture f;
  f.reg.set_synchronous(true);
  CHECK(f.reg.synchronous());
  CHECK_NOTHROW(f.run(kGather));
  const uint64_t before = ember::host_synchronizations();
  const std::string msg = ember::testing::error_of([&] { f.run(kGather, true, 30, 2); });
  CHECK(msg.find("index 30 at 2") != std::string::npos);
  CHECK(msg.find("reported at the next synchronization") == std::string::npos);
  CHECK(ember::host_synchronizations() == before + 1);
  CHECK(f.reg.pending() == 0);
}

TEST_CASE("device checks: with every slot pending, reserve waits for the oldest", "[cpu]") {
  Fixture f;
  for (int i = 0; i < kSlots; ++i) f.run(kGather);
  CHECK(f.reg.pending() == static_cast<size_t>(kSlots));
  CHECK(f.dev.waits == 0);
  const uint64_t before = ember::host_synchronizations();
  f.run(kGather);  // one more: the oldest check is waited for and read
  CHECK(f.dev.waits == 1);
  CHECK(ember::host_synchronizations() == before + 1);
  CHECK(f.reg.pending() == static_cast<size_t>(kSlots));
  f.dev.finish_all();
  f.reg.poll();
  CHECK(f.reg.pending() == 0);
}

TEST_CASE("device checks: a poll while an exception unwinds keeps the failure for the next one", "[cpu]") {
  Fixture f;
  f.dev.complete_on_record = true;
  f.run(kGather, true, 40, 0);
  struct PollOnExit {
    DeviceCheckRegistry& r;
    ~PollOnExit() { r.poll(); }  // a destructor that synchronizes
  };
  try {
    PollOnExit p{f.reg};
    throw std::runtime_error("first");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "first");
  }
  CHECK(ember::testing::error_of([&] { f.reg.poll(); }).find("index 40") != std::string::npos);
}

TEST_CASE("device checks: without a backend there is nothing to check", "[cpu]") {
  DeviceCheckRegistry r(nullptr);
  CHECK_NOTHROW(r.poll());
  CHECK_NOTHROW(r.wait_all());
  CHECK(r.pending() == 0);
  int slot = -1;
  CHECK_THROWS_WITH(r.reserve(0, slot), Catch::Contains("need CUDA"));
#ifndef EMBER_WITH_CUDA
  CHECK_NOTHROW(ember::check_device_errors());  // the process-wide registry of a CPU-only build
#endif
}
