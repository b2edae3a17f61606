// Streams and events on the CPU: one implicit stream with a null handle, host-clock events, and
// clear errors (never a silent fallback) for CUDA devices when no GPU is usable.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/stream.h>

#include "support/skip.h"

using ember::Device;
using ember::Event;
using ember::Stream;

TEST_CASE("the CPU stream is the null stream and synchronizes trivially", "[cpu]") {
  Stream s = ember::current_stream(Device::cpu());
  CHECK(s.device() == Device::cpu());
  CHECK(s.handle() == nullptr);
  CHECK(s == Stream());
  CHECK_NOTHROW(s.synchronize());
  CHECK_NOTHROW(ember::synchronize(Device::cpu()));
  CHECK(ember::new_stream(Device::cpu()) == Stream());
  {
    ember::StreamGuard g(Stream{});
    ember::DeviceGuard d(Device::cpu());
    CHECK(ember::current_stream(Device::cpu()) == Stream());
  }
  CHECK_NOTHROW(ember::set_current_stream(Stream()));
}

TEST_CASE("CPU events time with the host clock", "[cpu]") {
  Event start, end;
  CHECK(start.query());
  CHECK_THROWS_AS(start.elapsed_ms(end), ember::Error);  // never recorded
  start.record(Stream());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  end.record(Stream());
  const float ms = start.elapsed_ms(end);
  CHECK(ms >= 29.0f);
  CHECK(ms < 30000.0f);
  CHECK(end.query());
  CHECK_NOTHROW(end.synchronize());
  CHECK_NOTHROW(end.wait(Stream()));
  // Moving keeps the timestamp; the moved-from event is unrecorded again.
  Event moved(std::move(end));
  CHECK(start.elapsed_ms(moved) == Approx(ms));
  CHECK_THROWS_AS(start.elapsed_ms(end), ember::Error);
  Event assigned;
  assigned = std::move(moved);
  CHECK(start.elapsed_ms(assigned) == Approx(ms));
}

TEST_CASE("CUDA streams and guards fail clearly without a GPU", "[cpu]") {
  if (ember::cuda_device_count() > 0) EMBER_SKIP("a GPU is usable here: the [cuda] tests cover this machine");
  const std::string why = ember::cuda_compiled() ? "no usable CUDA GPU" : "no CUDA support";
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const ember::Error& e) {
      return e.what();
    }
    return "<no exception>";
  };
  CHECK(message([] { ember::current_stream(Device::cuda(0)); }).find(why) != std::string::npos);
  CHECK(message([] { ember::new_stream(Device::cuda(0)); }).find(why) != std::string::npos);
  CHECK(message([] { ember::synchronize(Device::cuda(1)); }).find("cuda:1") != std::string::npos);
  CHECK(message([] { ember::DeviceGuard g(Device::cuda(0)); }).find(why) != std::string::npos);
  CHECK(message([] {
          Event e;
          e.record(Stream(Device::cuda(0), nullptr));
        }).find(why) != std::string::npos);
}

TEST_CASE("host_synchronizations counts waits for CUDA work only", "[cpu]") {
  const uint64_t n = ember::host_synchronizations();
  // The CPU's stream and events are synchronous: nothing to wait for, nothing counted.
  Stream().synchronize();
  ember::synchronize(Device::cpu());
  Event e;
  e.record(Stream());
  e.synchronize();
  e.wait(Stream());
  CHECK(ember::host_synchronizations() == n);
  ember::detail::note_host_synchronization();  // what a wait outside core/stream.cpp reports
  CHECK(ember::host_synchronizations() == n + 1);
}
