// Device parsing and validation; without a usable GPU, best() is the CPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <ember/core/allocator.h>
#include <ember/core/cuda/runtime.h>
#include <ember/core/device.h>
#include <ember/core/error.h>

#include "support/skip.h"

using ember::Device;
using ember::DeviceType;

namespace {
std::string error_of(const std::string& spec) {
  try {
    Device d(spec);
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "<no exception>";
}
}  // namespace

TEST_CASE("Device parses cpu, cuda and cuda:N", "[cpu]") {
  CHECK(Device("cpu") == Device::cpu());
  CHECK(Device("cpu").is_cpu());
  CHECK(Device("cuda") == Device::cuda(0));
  CHECK(Device("cuda:0") == Device::cuda(0));
  Device d("cuda:3");
  CHECK(d.is_cuda());
  CHECK(d.type() == DeviceType::CUDA);
  CHECK(d.index() == 3);
  CHECK(d.str() == "cuda:3");
  CHECK(Device("cuda:17").str() == "cuda:17");
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device(Device::cuda(5).str()) == Device::cuda(5));
}

TEST_CASE("Device rejects malformed specs and names them", "[cpu]") {
  for (const char* bad : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:x", " cpu", "cuda0", "", "cuda:1:2"}) {
    INFO("spec '" << bad << "'");
    std::string msg = error_of(bad);
    CHECK(msg.find("invalid device '" + std::string(bad) + "'") != std::string::npos);
  }
}

TEST_CASE("Device equality and CPU index", "[cpu]") {
  CHECK(Device::cuda(1) != Device::cuda(2));
  CHECK(Device::cuda(0) != Device::cpu());
  CHECK(Device(DeviceType::CPU, 5).index() == 0);  // the CPU has a single index
  CHECK(Device(DeviceType::CPU, 5) == Device::cpu());
}

TEST_CASE("without a usable GPU, best() is the CPU and CUDA devices do not validate", "[cpu]") {
#ifdef EMBER_WITH_CUDA
  CHECK(ember::cuda_compiled());
#else
  CHECK_FALSE(ember::cuda_compiled());
  CHECK(ember::cuda_device_count() == 0);
#endif
  CHECK_NOTHROW(Device::cpu().validate());
  if (ember::cuda_device_count() > 0) EMBER_SKIP("a GPU is usable here: the [cuda] tests cover this machine");
  CHECK(Device::best() == Device::cpu());
  try {
    Device::cuda(1).validate();
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("cuda:1") != std::string::npos);
    CHECK(msg.find(ember::cuda_compiled() ? "no usable CUDA GPU" : "no CUDA support") != std::string::npos);
  }
  CHECK_THROWS_AS(ember::allocator_for(Device::cuda(0)), ember::Error);
}

TEST_CASE("cuda_unavailable_reason names the CUDA error and the driver and runtime versions", "[cpu]") {
  const std::string why = ember::cuda_unavailable_reason();
  if (ember::cuda_available()) {  // a GPU machine: nothing to explain
    CHECK(why.empty());
    return;
  }
  CHECK_FALSE(ember::cuda_available());
  INFO("reason: " << why);
  if (!ember::cuda_compiled()) {
    CHECK(why.find("no CUDA support") != std::string::npos);
  } else {
    // Here CUDA is compiled in and no GPU is usable, so the reason is real: cudaGetDeviceCount's
    // error by name (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...) and both versions.
    CHECK(why.find("cudaGetDeviceCount") != std::string::npos);
    CHECK(why.find("cudaError") != std::string::npos);
    CHECK(why.find("CUDA driver ") != std::string::npos);
    CHECK(why.find("CUDA runtime ") != std::string::npos);
    CHECK(why.find("CUDA runtime none") == std::string::npos);  // the runtime is linked in, so known
  }
  // Asking for a GPU repeats the reason, so the user sees why rather than just "no GPU".
  try {
    Device::cuda(0).validate();
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(std::string(e.what()).find(ember::cuda_compiled() ? why : "no CUDA support") != std::string::npos);
  }
}

TEST_CASE("nvidia_gpus_listed counts the driver's GPU entries, 0 without the directory", "[cpu]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ember_test_nvidia_gpus";
  std::filesystem::remove_all(dir);
  CHECK(ember::detail::nvidia_gpus_listed(dir.string()) == 0);  // no driver: no directory
  std::filesystem::create_directories(dir);
  CHECK(ember::detail::nvidia_gpus_listed(dir.string()) == 0);
  std::filesystem::create_directories(dir / "0000:17:00.0");
  std::filesystem::create_directories(dir / "0000:65:00.0");
  CHECK(ember::detail::nvidia_gpus_listed(dir.string()) == 2);
  std::filesystem::remove_all(dir);
}
