// The CUDA side of core/: device discovery, the per-device caching allocator over cudaMalloc,
// streams, events and guards. Runs only where a GPU is usable (main_cuda.cpp skips otherwise).
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include <ember/core/caching_allocator.h>
#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/stream.h>
#include <ember/core/tensor.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

using ember::Device;
using ember::Event;
using ember::Stream;

TEST_CASE("CUDA devices are discovered and validated", "[cuda][core]") {
  REQUIRE(ember::cuda_compiled());
  CHECK(ember::cuda_available());
  CHECK(ember::cuda_unavailable_reason().empty());
  const int n = ember::cuda_device_count();
  REQUIRE(n > 0);
  CHECK(Device::best() == Device::cuda(0));
  CHECK_NOTHROW(Device::cuda(n - 1).validate());
  try {
    Device::cuda(n).validate();
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(std::string(e.what()).find("only " + std::to_string(n) + " CUDA device(s)") != std::string::npos);
  }
  CHECK_NOTHROW(ember::DeviceGuard(Device::cuda(n - 1)));
}

TEST_CASE("the CUDA caching allocator reuses blocks per stream", "[cuda][core]") {
  ember::CachingAllocator& a = ember::cuda_caching_allocator(0);
  CHECK(&a == &ember::cuda_caching_allocator(0));  // one allocator per device
  CHECK(&ember::allocator_for(Device::cuda(0)) == static_cast<ember::Allocator*>(&a));
  const auto before = a.stats();
  void* first;
  {
    ember::DataPtr p = a.allocate(12345);
    REQUIRE(p.get() != nullptr);
    first = p.get();
    CHECK(a.stats().allocated == before.allocated + ember::CachingAllocator::round_size(12345));
  }
  CHECK(a.stats().allocated == before.allocated);
  const auto mid = a.stats();
  // Same rounded size (12345 and 12700 both round to 12800), same (default) stream: best fit is
  // the very block just freed. (12000 would round to 12288, which any cached 12288-byte fragment
  // left by earlier tests would fit better.)
  REQUIRE(ember::CachingAllocator::round_size(12700) == ember::CachingAllocator::round_size(12345));
  ember::DataPtr q = a.allocate(12700);
  CHECK(q.get() == first);
  CHECK(a.stats().num_backend_allocs == mid.num_backend_allocs);
  CHECK(a.stats().cache_hits == mid.cache_hits + 1);
  q.reset();
  // On another stream the freed block is not handed out.
  Stream s = ember::new_stream(Device::cuda(0));
  ember::StreamGuard guard(s);
  ember::DataPtr r = a.allocate(12700);
  CHECK(r.get() != first);
  r.reset();
  a.empty_cache();
  CHECK(a.stats().reserved <= mid.reserved);
}

TEST_CASE("CUDA out of memory names the device and the size, and leaves the allocator usable", "[cuda][core]") {
  ember::CachingAllocator& a = ember::cuda_caching_allocator(0);
  const size_t huge = size_t(1) << 50;  // 1 PiB
  try {
    a.allocate(huge);
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("out of memory on cuda:0") != std::string::npos);
    CHECK(msg.find(std::to_string(huge) + " bytes") != std::string::npos);
    CHECK(msg.find(" free of ") != std::string::npos);  // cudaMemGetInfo's figures
  }
  ember::DataPtr p = a.allocate(4096);
  CHECK(p.get() != nullptr);
  CHECK_NOTHROW(ember::synchronize(Device::cuda(0)));  // no sticky error left behind
}

TEST_CASE("CUDA streams: current stream per thread, guards, new streams", "[cuda][core]") {
  const Device d = Device::cuda(0);
  Stream def = ember::current_stream(d);
  CHECK(def.device() == d);
  CHECK(def.handle() == nullptr);  // the legacy default stream until set otherwise
  Stream s1 = ember::new_stream(d), s2 = ember::new_stream(d);
  CHECK(s1.handle() != nullptr);
  CHECK(s2.handle() != nullptr);
  CHECK(s1.handle() != s2.handle());
  {
    ember::StreamGuard g(s1);
    CHECK(ember::current_stream(d) == s1);
    {
      ember::StreamGuard g2(s2);
      CHECK(ember::current_stream(d) == s2);
    }
    CHECK(ember::current_stream(d) == s1);
  }
  CHECK(ember::current_stream(d) == def);
  CHECK_NOTHROW(s1.synchronize());
  CHECK_NOTHROW(def.synchronize());
}

TEST_CASE("CUDA events record, order streams and time", "[cuda][core]") {
  const Device d = Device::cuda(0);
  Stream s1 = ember::new_stream(d), s2 = ember::new_stream(d);
  Event start, end;
  start.record(s1);
  end.record(s1);
  end.wait(s2);  // s2 waits for s1's work so far
  end.synchronize();
  CHECK(start.query());
  CHECK(end.query());
  const float ms = start.elapsed_ms(end);
  CHECK(ms >= 0.0f);
  CHECK(ms < 10000.0f);
  Event moved(std::move(end));
  CHECK(start.elapsed_ms(moved) == ms);
  // Mixing a CPU and a CUDA event is an error naming both devices.
  Event host;
  host.record(Stream());
  try {
    start.elapsed_ms(host);
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("cuda:0") != std::string::npos);
    CHECK(msg.find("cpu") != std::string::npos);
  }
}

namespace {

/// Keeps `s` busy for a while: 200 fills of 256 MiB, 50 GiB of writes (over 15 ms even at an
/// H200's 4.8 TB/s), queued in about a millisecond of host time.
void keep_busy(const Stream& s, ember::Tensor& scratch) {
  ember::StreamGuard g(s);
  for (int i = 0; i < 200; ++i) ember::kernels::fill(scratch, static_cast<double>(i));
}

}  // namespace

TEST_CASE("record_stream keeps a freed block from reuse until the other stream's work is done", "[cuda][core]") {
  const Device d = Device::cuda(0);
  ember::CachingAllocator& a = ember::cuda_caching_allocator(0);
  const Stream side = ember::new_stream(d);
  ember::Tensor scratch = ember::empty({int64_t(64) << 20}, {.dtype = ember::DType::f32, .device = d});
  ember::synchronize(d);
  void* first;
  {
    ember::Tensor t = ember::empty({1 << 16}, {.dtype = ember::DType::f32, .device = d});  // current stream's pool
    first = t.data_ptr();
    keep_busy(side, scratch);
    {
      ember::StreamGuard g(side);
      ember::kernels::fill(t, 1.0);  // t is written on the side stream, behind the long fills
    }
    ember::record_stream(t.storage(), side);
  }
  CHECK(a.stats().pending_frees == 1);
  {
    // The side stream is still busy (the host got here in microseconds): not handed out again.
    ember::Tensor u = ember::empty({1 << 16}, {.dtype = ember::DType::f32, .device = d});
    CHECK(u.data_ptr() != first);
  }
  side.synchronize();
  ember::Tensor v = ember::empty({1 << 16}, {.dtype = ember::DType::f32, .device = d});
  CHECK(v.data_ptr() == first);  // done now: back in its pool at the next allocation
  CHECK(a.stats().pending_frees == 0);
  CHECK_THROWS_WITH(ember::record_stream(v.storage(), Stream(Device::cuda(1), nullptr)),
                    Catch::Contains("cuda:1") || Catch::Contains("only 1"));
}

TEST_CASE("stream checks report a block freed after an unrecorded use on another stream", "[cuda][core]") {
  const Device d = Device::cuda(0);
  ember::CachingAllocator& a = ember::cuda_caching_allocator(0);
  const bool was = ember::stream_checks_enabled();
  ember::set_stream_checks(true);
  const Stream side = ember::new_stream(d);
  const uint64_t before = a.stats().unrecorded_cross_stream_frees;
  {
    ember::Tensor t = ember::empty({1000}, {.dtype = ember::DType::f32, .device = d});
    ember::StreamGuard g(side);
    ember::kernels::fill(t, 2.0);  // the launch notes the use of t on `side`
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == before + 1);
  {
    ember::Tensor t = ember::empty({1000}, {.dtype = ember::DType::f32, .device = d});
    {
      ember::StreamGuard g(side);
      ember::kernels::fill(t, 2.0);
    }
    ember::record_stream(t.storage(), side);
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == before + 1);
  side.synchronize();
  ember::set_stream_checks(was);
}
