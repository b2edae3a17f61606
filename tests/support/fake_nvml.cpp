// A stand-in for the driver's libnvidia-ml.so.1, loaded by tests/train/test_gpu_monitor.cpp through
// EMBER_NVML_LIBRARY, so that train/gpu_monitor.cpp's NVML source (dlopen, the functions it looks
// up, the device lookup, each reading with its fallbacks, init/shutdown pairing) runs on a machine
// without a GPU. Its types are train/nvml_abi.h's; the return codes as nvml.h numbers them.
//
// Behaviour, read from EMBER_FAKE_NVML_MODE at nvmlInit_v2 (comma-separated, empty: all succeed):
//   init_fail    nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED
//   lookup_fail  every handle lookup returns NVML_ERROR_NOT_FOUND
//   no_util      utilisation NVML_ERROR_NOT_SUPPORTED (a GPU in MIG mode)
//   no_v2        nvmlDeviceGetMemoryInfo_v2 NVML_ERROR_NOT_SUPPORTED (a driver before 510)
//   no_memory    both memory calls NVML_ERROR_NOT_SUPPORTED
//   no_power     power NVML_ERROR_NOT_SUPPORTED
// Readings: utilisation 37%, memory used 4e9 bytes by v2 and 5e9 by v1 (so a test sees which was
// read), power 123456 mW. The fake_nvml_* functions report what was called.
#include <cstdlib>
#include <cstring>
#include <string>

#include <ember/train/nvml_abi.h>

namespace {

using namespace ember::train;
using nvmlReturn_t = nvml::Return;
constexpr nvmlReturn_t kSuccess = nvml::kSuccess, kNotSupported = 3, kNotFound = 6, kDriverNotLoaded = 9,
                       kVersionMismatch = 25;

std::string g_mode;
int g_inits = 0, g_shutdowns = 0;
std::string g_lookup;  // "index:N", "uuid:S" or "pci:S"
int g_device = 0;  // what the one device's handle points at

bool mode(const char* flag) {
  const std::string m = "," + g_mode + ",";
  return m.find("," + std::string(flag) + ",") != std::string::npos;
}

nvmlReturn_t lookup(const std::string& what, nvml::Device* dev) {
  g_lookup = what;
  if (mode("lookup_fail")) return kNotFound;
  *dev = reinterpret_cast<nvml::Device>(&g_device);
  return kSuccess;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  const char* m = std::getenv("EMBER_FAKE_NVML_MODE");
  g_mode = m ? m : "";
  if (mode("init_fail")) return kDriverNotLoaded;
  ++g_inits;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown() {
  ++g_shutdowns;
  return kSuccess;
}

const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    case kVersionMismatch:
      return "Argument Version Mismatch";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvml::Device* dev) {
  return lookup("index:" + std::to_string(index), dev);
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvml::Device* dev) {
  return lookup(std::string("uuid:") + uuid, dev);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvml::Device* dev) {
  return lookup(std::string("pci:") + bus_id, dev);
}

nvmlReturn_t nvmlDeviceGetName(nvml::Device, char* name, unsigned int length) {
  std::strncpy(name, "Fake GPU", length);
  name[length - 1] = '\0';
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvml::Device, nvml::Utilization* u) {
  if (mode("no_util")) return kNotSupported;
  *u = nvml::Utilization{37, 12};
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvml::Device, nvml::Memory* m) {
  if (mode("no_memory")) return kNotSupported;
  *m = nvml::Memory{80'000'000'000ull, 75'000'000'000ull, 5'000'000'000ull};
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvml::Device, nvml::MemoryV2* m) {
  if (mode("no_memory") || mode("no_v2")) return kNotSupported;
  if (m->version != nvml::kMemoryV2) return kVersionMismatch;  // as the driver checks the versioned struct
  m->total = 80'000'000'000ull;
  m->reserved = 1'000'000'000ull;
  m->free = 75'000'000'000ull;
  m->used = 4'000'000'000ull;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvml::Device, unsigned int* milliwatts) {
  if (mode("no_power")) return kNotSupported;
  *milliwatts = 123456;
  return kSuccess;
}

// For the test: calls so far, and the last lookup.
int fake_nvml_inits() { return g_inits; }
int fake_nvml_shutdowns() { return g_shutdowns; }
const char* fake_nvml_last_lookup() { return g_lookup.c_str(); }

}  // extern "C"
