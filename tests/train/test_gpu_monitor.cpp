// GPU monitor (train/gpu_monitor.h) with an injected fake source: the epoch aggregate (mean
// utilisation, most memory, mean power), take() starting over, failed readings left out (a field
// that failed on its own too), the sampling thread; a monitor without a source (no NVML) samples
// nothing; the metrics line's gpu_* fields absent without readings; NVML absent (or a library that
// is not NVML) gives no source and says why; the verdict with the utilisation. The NVML source
// itself against a stand-in library (support/fake_nvml.cpp): the device lookup CUDA_VISIBLE_DEVICES
// asks for, each reading and its fallback, a failed init or lookup, init and shutdown paired.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/train/gpu_monitor.h>
#include <ember/train/metrics.h>

using namespace ember;
using namespace ember::train;

namespace {

// Hands out the readings it was given, in order (an empty one: a failed reading), then repeats the last.
class FakeSource final : public GpuSource {
 public:
  explicit FakeSource(std::vector<std::optional<GpuSample>> s, std::atomic<int>* calls = nullptr)
      : s_(std::move(s)), calls_(calls) {}
  std::optional<GpuSample> sample() override {
    if (calls_) ++*calls_;
    const std::optional<GpuSample> out = s_[std::min(i_, s_.size() - 1)];
    ++i_;
    return out;
  }
  std::string describe() const override { return "fake"; }

 private:
  std::vector<std::optional<GpuSample>> s_;
  size_t i_ = 0;
  std::atomic<int>* calls_;
};

GpuSample reading(double util, double mem_bytes, std::optional<double> watts) {
  return GpuSample{.util_percent = util, .memory_used_bytes = mem_bytes, .power_watts = watts};
}

// Sets an environment variable for the scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* v) : name(n) {
    if (const char* o = ::getenv(n)) old = o;
    ::setenv(n, v, 1);
  }
  ~ScopedEnv() { old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str()); }
};

// Unsets an environment variable for the scope.
struct ScopedUnset {
  std::string name;
  std::optional<std::string> old;
  explicit ScopedUnset(const char* n) : name(n) {
    if (const char* o = ::getenv(n)) old = o;
    ::unsetenv(n);
  }
  ~ScopedUnset() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
  }
};

// The stand-in NVML library, opened by the test too (the same loaded copy as the monitor's) to read
// what was called.
struct FakeNvml {
  void* lib = ::dlopen(EMBER_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  int (*inits)() = nullptr;
  int (*shutdowns)() = nullptr;
  const char* (*last_lookup)() = nullptr;
  FakeNvml() {
    REQUIRE(lib != nullptr);
    inits = reinterpret_cast<int (*)()>(::dlsym(lib, "fake_nvml_inits"));
    shutdowns = reinterpret_cast<int (*)()>(::dlsym(lib, "fake_nvml_shutdowns"));
    last_lookup = reinterpret_cast<const char* (*)()>(::dlsym(lib, "fake_nvml_last_lookup"));
    REQUIRE((inits && shutdowns && last_lookup));
  }
  ~FakeNvml() { ::dlclose(lib); }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;
};

// The lookup nvml_source makes for CUDA device `index` when CUDA cannot name its PCI bus (no GPU:
// CI's machine): `expected`; on a machine with a GPU, by that GPU's bus id.
std::string lookup_for(int index, const std::string& expected) {
  const std::string bus = ember::detail::cuda_pci_bus_id(index);
  return bus.empty() ? expected : "pci:" + bus;
}

}  // namespace

TEST_CASE("gpu monitor: an epoch's mean utilisation, most memory and mean power", "[cpu]") {
  GpuMonitor mon(std::make_unique<FakeSource>(std::vector<std::optional<GpuSample>>{
                     reading(10, 2e9, 100), reading(20, 5e9, 200), std::nullopt, reading(60, 3e9, 300)}),
                 /*hz=*/0);
  CHECK_FALSE(mon.take().has_value());  // nothing sampled yet: nothing, not zeros
  for (int i = 0; i < 4; ++i) mon.sample_now();
  const std::optional<GpuStats> s = mon.take();
  REQUIRE(s.has_value());
  CHECK(s->samples == 3);  // the failed reading is left out
  CHECK(*s->util_percent == Approx(30));
  CHECK(*s->memory_used_mb == Approx(5000));
  REQUIRE(s->power_watts.has_value());
  CHECK(*s->power_watts == Approx(200));
  // take() starts over: the next epoch's aggregate holds only its own readings.
  mon.sample_now();  // the source repeats its last reading
  const std::optional<GpuStats> next = mon.take();
  REQUIRE(next.has_value());
  CHECK(next->samples == 1);
  CHECK(next->util_percent == 60);
  CHECK(*next->memory_used_mb == Approx(3000));
}

TEST_CASE("gpu monitor: a device without power readings leaves power unset", "[cpu]") {
  GpuAggregate a;
  a.add(reading(50, 1e6, std::nullopt));
  a.add(reading(70, 2e6, std::nullopt));
  const std::optional<GpuStats> s = a.take();
  REQUIRE(s.has_value());
  CHECK(s->util_percent == 60);
  CHECK_FALSE(s->power_watts.has_value());
  EpochMetrics m;
  set_gpu_fields(m, s);
  CHECK(m.gpu_util_percent == 60.0);
  CHECK(m.gpu_memory_used_mb == 2.0);
  CHECK_FALSE(m.gpu_power_watts.has_value());
  const std::string line = to_json_line(m);
  CHECK(line.find("\"gpu_util_percent\":60.0") != std::string::npos);
  CHECK(line.find("gpu_power_watts") == std::string::npos);
  CHECK(parse_epoch_metrics(line, "m", 1) == m);
}

TEST_CASE("gpu monitor: a field whose reading failed is left out of its own mean only", "[cpu]") {
  GpuAggregate a;
  a.add(GpuSample{.util_percent = std::nullopt, .memory_used_bytes = 3e6, .power_watts = 100});  // no utilisation
  a.add(GpuSample{.util_percent = 40, .memory_used_bytes = std::nullopt, .power_watts = 200});  // no memory
  const std::optional<GpuStats> s = a.take();
  REQUIRE(s.has_value());
  CHECK(s->samples == 2);
  CHECK(s->util_percent == 40.0);
  CHECK(s->memory_used_mb == 3.0);
  CHECK(s->power_watts == 150.0);
  // A device that never reports utilisation (a GPU in MIG mode): memory and power, no gpu_util_percent.
  a.add(GpuSample{.util_percent = std::nullopt, .memory_used_bytes = 1e6, .power_watts = std::nullopt});
  const std::optional<GpuStats> t = a.take();
  REQUIRE(t.has_value());
  CHECK_FALSE(t->util_percent.has_value());
  CHECK(t->memory_used_mb == 1.0);
  EpochMetrics m;
  set_gpu_fields(m, t);
  CHECK_FALSE(m.gpu_util_percent.has_value());
  CHECK(m.gpu_memory_used_mb == 1.0);
  CHECK_FALSE(m.gpu_power_watts.has_value());
}

TEST_CASE("gpu monitor: without a source (no NVML) it samples nothing and has no thread", "[cpu]") {
  std::string why;
  std::unique_ptr<GpuSource> none = nvml_source(Device::cpu(), &why);  // what the header's example passes
  REQUIRE(none == nullptr);
  GpuMonitor mon(std::move(none), /*hz=*/1000);  // a thread would call the null source at once
  mon.sample_now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(mon.take().has_value());
  CHECK(mon.describe() == "none");
}

TEST_CASE("gpu monitor: the thread samples until it is destroyed", "[cpu]") {
  std::atomic<int> calls{0};
  {
    GpuMonitor mon(std::make_unique<FakeSource>(std::vector<std::optional<GpuSample>>{reading(40, 1e9, 50)}, &calls),
                   /*hz=*/1000);
    // Wait for a few readings (no bound on how long they take: no timing assertion).
    while (calls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::optional<GpuStats> s = mon.take();
    REQUIRE(s.has_value());
    CHECK(s->samples >= 2);
    CHECK(s->util_percent == 40);
  }
  const int after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(calls.load() == after);  // joined: no reading after the destructor
}

TEST_CASE("gpu monitor: without readings no gpu_* field appears in the metrics line", "[cpu]") {
  EpochMetrics m;
  m.epoch = 1;
  set_gpu_fields(m, std::nullopt);
  const std::string line = to_json_line(m);
  CHECK(line.find("gpu_") == std::string::npos);
  const EpochMetrics back = parse_epoch_metrics(line, "m", 1);
  CHECK_FALSE(back.gpu_util_percent.has_value());
  CHECK_FALSE(back.gpu_memory_used_mb.has_value());
  CHECK_FALSE(back.gpu_power_watts.has_value());
  for (const auto& [key, value] : metric_values(m)) CHECK(std::string(key).rfind("gpu_", 0) != 0);
  // All three present: written after pool_wait_seconds and read back.
  m.gpu_util_percent = 34.5;
  m.gpu_memory_used_mb = 1234.5;
  m.gpu_power_watts = 250.25;
  const std::string with = to_json_line(m);
  CHECK(with.find("\"pool_wait_seconds\":0.0,\"gpu_util_percent\":34.5,\"gpu_memory_used_mb\":1234.5,"
                  "\"gpu_power_watts\":250.25}") != std::string::npos);
  CHECK(parse_epoch_metrics(with, "m", 1) == m);
}

TEST_CASE("gpu monitor: no NVML source on the CPU, or when the library cannot be loaded", "[cpu]") {
  std::string why;
  CHECK(nvml_source(Device::cpu(), &why) == nullptr);
  CHECK(why == "cpu is not a GPU");
  {
    ScopedEnv env("EMBER_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
    why.clear();
    CHECK(nvml_source(Device("cuda:0"), &why) == nullptr);
    CHECK(why.find("cannot load /nonexistent/libnvidia-ml.so.1") == 0);
  }
  {
    // A library that loads but is not NVML (the C library).
    ScopedEnv env("EMBER_NVML_LIBRARY", "libc.so.6");
    why.clear();
    CHECK(nvml_source(Device("cuda:0"), &why) == nullptr);
    CHECK(why == "libc.so.6 lacks the NVML functions ember calls");
  }
}

TEST_CASE("gpu monitor: the verdict puts the GPU's utilisation in front of the phases'", "[cpu]") {
  PhaseTotals input_bound;
  input_bound.seconds = {4, 0, 3, 2, 1};  // data wait 40% of the step
  PhaseTotals compute;
  compute.seconds = {0.1, 0, 5, 4, 1};
  CHECK(gpu_verdict(34, input_bound) ==
        "GPU busy 34% of the epoch: input-bound: data wait is 40% of the step; raise data.workers or set "
        "data.resident");
  CHECK(gpu_verdict(34, compute).rfind("GPU busy 34% of the epoch: the GPU waits on the host", 0) == 0);
  CHECK(gpu_verdict(95, compute).empty());
  CHECK(gpu_verdict(90, input_bound).rfind("GPU busy 90% of the epoch; input-bound", 0) == 0);
}

TEST_CASE("gpu monitor: NVML through a stand-in library: the device CUDA names, readings, init and shutdown paired",
          "[cpu]") {
  FakeNvml fake;
  ScopedEnv lib("EMBER_NVML_LIBRARY", EMBER_FAKE_NVML);
  ScopedEnv mode("EMBER_FAKE_NVML_MODE", "");
  const int inits = fake.inits(), shutdowns = fake.shutdowns();
  std::string why;
  {
    ScopedUnset visible("CUDA_VISIBLE_DEVICES");
    std::unique_ptr<GpuSource> src = nvml_source(Device("cuda:1"), &why);
    REQUIRE(src != nullptr);
    CHECK(fake.last_lookup() == lookup_for(1, "index:1"));
    if (fake.last_lookup() == std::string("index:1")) CHECK(src->describe() == "NVML, device 1 (Fake GPU)");
    const std::optional<GpuSample> s = src->sample();
    REQUIRE(s.has_value());
    CHECK(s->util_percent == 37.0);
    CHECK(s->memory_used_bytes == 4e9);  // v2's reading (v1 says 5e9): the versioned struct was accepted
    CHECK(s->power_watts == 123.456);  // milliwatts to watts
    CHECK(fake.inits() == inits + 1);
    CHECK(fake.shutdowns() == shutdowns);
  }
  CHECK(fake.shutdowns() == shutdowns + 1);  // the source's destructor
  {
    // CUDA's device 1 is the second entry of CUDA_VISIBLE_DEVICES, by number or by UUID.
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", "2,3");
    CHECK(nvml_source(Device("cuda:1"), &why) != nullptr);
    CHECK(fake.last_lookup() == lookup_for(1, "index:3"));
  }
  {
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", "GPU-aa11,GPU-bb22-cc33");
    std::unique_ptr<GpuSource> src = nvml_source(Device("cuda:1"), &why);
    REQUIRE(src != nullptr);
    CHECK(fake.last_lookup() == lookup_for(1, "uuid:GPU-bb22-cc33"));
    if (fake.last_lookup() == std::string("uuid:GPU-bb22-cc33"))
      CHECK(src->describe() == "NVML, GPU-bb22-cc33 (Fake GPU)");
  }
  CHECK(fake.inits() - inits == 3);
  CHECK(fake.shutdowns() - shutdowns == 3);
}

TEST_CASE("gpu monitor: NVML readings a device does not give are left out, field by field", "[cpu]") {
  FakeNvml fake;
  ScopedEnv lib("EMBER_NVML_LIBRARY", EMBER_FAKE_NVML);
  std::string why;
  {
    ScopedEnv mode("EMBER_FAKE_NVML_MODE", "no_v2,no_power");  // a driver before 510, a board without power
    std::unique_ptr<GpuSource> src = nvml_source(Device("cuda:0"), &why);
    REQUIRE(src != nullptr);
    const std::optional<GpuSample> s = src->sample();
    REQUIRE(s.has_value());
    CHECK(s->util_percent == 37.0);
    CHECK(s->memory_used_bytes == 5e9);  // v1's reading
    CHECK_FALSE(s->power_watts.has_value());
  }
  {
    ScopedEnv mode("EMBER_FAKE_NVML_MODE", "no_util");  // MIG mode: memory and power still read
    std::unique_ptr<GpuSource> src = nvml_source(Device("cuda:0"), &why);
    REQUIRE(src != nullptr);
    const std::optional<GpuSample> s = src->sample();
    REQUIRE(s.has_value());
    CHECK_FALSE(s->util_percent.has_value());
    CHECK(s->memory_used_bytes == 4e9);
    CHECK(s->power_watts == 123.456);
  }
  {
    ScopedEnv mode("EMBER_FAKE_NVML_MODE", "no_util,no_memory,no_power");  // nothing: no sample at all
    GpuMonitor mon(nvml_source(Device("cuda:0"), &why), /*hz=*/0);
    mon.sample_now();
    CHECK_FALSE(mon.take().has_value());
  }
}

TEST_CASE("gpu monitor: NVML that cannot start or find the device gives no source and says why", "[cpu]") {
  FakeNvml fake;
  ScopedEnv lib("EMBER_NVML_LIBRARY", EMBER_FAKE_NVML);
  ScopedUnset visible("CUDA_VISIBLE_DEVICES");
  const int inits = fake.inits(), shutdowns = fake.shutdowns();
  std::string why;
  {
    ScopedEnv mode("EMBER_FAKE_NVML_MODE", "init_fail");
    CHECK(nvml_source(Device("cuda:0"), &why) == nullptr);
    CHECK(why == "nvmlInit: Driver Not Loaded");
    CHECK(fake.inits() == inits);
    CHECK(fake.shutdowns() == shutdowns);  // nothing to shut down
  }
  {
    ScopedEnv mode("EMBER_FAKE_NVML_MODE", "lookup_fail");
    CHECK(nvml_source(Device("cuda:2"), &why) == nullptr);
    const std::string lookup = fake.last_lookup();
    CHECK(lookup == lookup_for(2, "index:2"));
    if (lookup == "index:2") CHECK(why == "NVML device 2: Not Found");
    CHECK(fake.inits() == inits + 1);
    CHECK(fake.shutdowns() == shutdowns + 1);  // the init it made is undone
  }
}
