// CUDA graphs' CPU behaviour (core/cuda_graph.h): capture on the CPU is an error naming the device,
// and the capture bookkeeping (detail::CaptureScope: what cuda::Graph enters while it captures)
// turns every host wait into an error naming the innermost op, before anything waits. The
// allocator's private pools are tested in test_caching_allocator.cpp; captures on a GPU in
// tests/cuda/test_cuda_graph_cuda.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/cuda_graph.h>
#include <ember/core/device_check.h>
#include <ember/core/record.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/random.h>
#include <ember/layers/dropout.h>
#include <ember/optim/adam.h>
#include <ember/optim/sgd.h>

#include "support/error_of.h"

using namespace ember;
using Catch::Contains;
using ember::testing::error_of;

namespace {

constexpr const char* kWaitText =
    "cannot run while a CUDA graph is being captured (it makes the host wait for the GPU)";

// A device-check backend whose events never complete: a wait would be visible as a call.
struct Slots {
  std::vector<int64_t> records =
      std::vector<int64_t>(static_cast<size_t>(DeviceCheckRegistry::kSlots * DeviceCheckRegistry::kRecordWords), 0);
  std::vector<unsigned long long> claims = std::vector<unsigned long long>(DeviceCheckRegistry::kSlots, 0);
  int waits = 0;
};

class NeverDone final : public DeviceCheckRegistry::Backend {
 public:
  explicit NeverDone(Slots* s) : s_(s) {}
  int64_t* host_records() override { return s_->records.data(); }
  int64_t* device_records(int) override { return s_->records.data(); }
  unsigned long long* claims(int) override { return s_->claims.data(); }
  void* record_event(int, void*) override { return reinterpret_cast<void*>(uintptr_t{1}); }
  bool event_done(void*) override { return false; }
  void event_wait(void*) override { ++s_->waits; }
  void event_release(int, void*) override {}

 private:
  Slots* s_;
};

uint32_t scope_flags() { return profiler::detail::g_scope_flags.load(std::memory_order_relaxed); }

}  // namespace

TEST_CASE("cuda::Graph on the CPU: capture is an error naming the device", "[cpu]") {
  cuda::Graph g;
  CHECK_THAT(error_of([&] { g.capture_begin(Device::cpu()); }),
             Contains("cuda::Graph: capture needs a CUDA device; got cpu"));
  CHECK_THAT(error_of([&] { cuda::GraphCapture capture(g, Device::cpu()); }), Contains("got cpu"));
  CHECK_THAT(error_of([&] { g.capture_begin(Stream()); }), Contains("got cpu"));
  CHECK_FALSE(g.capturing());
  CHECK_FALSE(g.captured());
  CHECK_FALSE(detail::capturing());
  CHECK_THAT(error_of([&] { g.replay(); }), Contains("cuda::Graph::replay: nothing captured"));
  CHECK_THAT(error_of([&] { g.capture_end(); }), Contains("no capture in progress"));
  g.reset();  // nothing to free
  if (!cuda_compiled()) CHECK_THAT(error_of([&] { g.capture_begin(Device::cuda(0)); }), Contains("no CUDA support"));
}

TEST_CASE("inside a capture, host waits throw naming the innermost op, before waiting", "[cpu]") {
  CHECK(scope_flags() == 0);  // the scopes' off cost stays one load: no flag while nothing captures
  {
    detail::CaptureScope capture;
    CHECK(detail::capturing());
    CHECK((scope_flags() & profiler::detail::kCapturing) != 0);
    profiler::RecordScope outer("linear", profiler::Category::op);
    {
      profiler::RecordScope op("cross_entropy", profiler::Category::op);
      const std::string sync = error_of([] { Stream().synchronize(); });
      CHECK_THAT(sync, Contains(std::string("Stream::synchronize ") + kWaitText) && Contains("in op cross_entropy"));
      CHECK_THAT(error_of([] { synchronize(Device::cpu()); }), Contains("synchronize(device)") && Contains(kWaitText));
      Event e;
      e.record(Stream());
      CHECK_THAT(error_of([&] { e.synchronize(); }), Contains("Event::synchronize") && Contains("in op cross_entropy"));
      CHECK_THAT(error_of([&] { e.wait(Stream()); }), Contains("Event::wait on the CPU"));
      CHECK_THAT(error_of([] { flush_device_checks(); }), Contains("flush_device_checks") && Contains(kWaitText));

      // A synchronous device check would wait for its kernel: it throws first (no wait reached).
      Slots slots;
      DeviceCheckRegistry registry(std::make_unique<NeverDone>(&slots));
      registry.set_synchronous(true);
      int slot = -1;
      registry.reserve(0, slot);
      CHECK_THAT(error_of([&] {
                   registry.submit(slot, {"cross_entropy (fake)", 0, 0, nullptr}, 0, nullptr);
                 }),
                 Contains("a synchronous device check") && Contains("in op cross_entropy"));
      CHECK(slots.waits == 0);
    }
    CHECK_THAT(error_of([] { Stream().synchronize(); }), Contains("in op linear"));  // the stack popped
  }
  CHECK_FALSE(detail::capturing());
  CHECK(scope_flags() == 0);
  Stream().synchronize();  // after the capture: fine again
  {
    detail::CaptureScope capture;  // no op open
    CHECK_THAT(error_of([] { Stream().synchronize(); }), Contains("outside any op"));
  }
}

TEST_CASE("inside a capture, device checks are not armed", "[cpu]") {
  detail::CaptureScope capture;
  if (!cuda_compiled() || cuda_device_count() == 0) {
    // DeviceCheck needs a CUDA stream; the registry is not even reached while capturing.
    CHECK_THROWS(DeviceCheck({"x (fake)", 0, 0, nullptr}, Stream()));
    SUCCEED("the armed/unarmed slot is checked on a GPU (tests/cuda/test_cuda_graph_cuda.cpp)");
    return;
  }
  DeviceCheck check({"x (cuda)", 0, 0, nullptr}, current_stream(Device::cuda(0)));
  CHECK(check.slot().claim == nullptr);
  check.launched();  // nothing registered
}

TEST_CASE("inside a capture: random sampling cannot be captured, dropout, SGD and Adam can", "[cpu]") {
  Tensor t = zeros({8});
  Tensor p = ones({4}).requires_grad_();
  p.set_grad(ones({4}));
  optim::Adam adam({p});
  optim::SGD sgd({p}, {.lr = 0.5});
  optim::SGD momentum({p}, {.lr = 0.5, .momentum = 0.9});
  layers::Dropout dropout(0.5);
  adam.step();  // the warm-up: Adam's state exists before the capture
  Generator& gen = default_generator();
  const uint64_t before = gen.offset();
  {
    detail::CaptureScope capture;
    profiler::RecordScope op("init", profiler::Category::op);
    CHECK_THAT(error_of([&] { kernels::uniform_(t, 0, 1); }),
               Contains("uniform_ cannot be captured in a CUDA graph") && Contains("in op init"));
    // State created inside a capture would be reset by every replay (its zero fill is recorded).
    optim::Adam fresh({p});
    CHECK_THAT(error_of([&] { fresh.step(); }), Contains("Adam cannot be captured in a CUDA graph") &&
                                                    Contains("parameter 0's state") && Contains("eager step first"));
    CHECK_THAT(error_of([&] { momentum.step(); }), Contains("SGD cannot be captured") && Contains("'momentum_buffer'"));
    CHECK(fresh.state(0).empty());
    CHECK(momentum.state(0).empty());
    adam.step();  // on a GPU its kernel reads the replay number (tests/cuda/test_cuda_graph_cuda.cpp)
    sgd.step();  // host scalars only: capturable (its lr is baked; a new lr re-captures)
    dropout.train();
    Tensor y = dropout.forward(ones({16}));  // its offset moves as usual; a Graph replays it forward
    CHECK(y.numel() == 16);
  }
  for (int64_t i = 0; i < p.numel(); ++i) CHECK(p.data<float>()[i] < 0.5f);  // Adam and SGD both moved it
  CHECK(adam.state_dict().size() > 0);
  CHECK(gen.offset() == before + 4);  // 16 elements: 4 Philox blocks
}
