#pragma once
// The few types of NVML's C API (nvml.h) that train/gpu_monitor.cpp calls the driver's
// libnvidia-ml.so.1 with, declared here so that building ember needs no nvml.h (the CUDA toolkit
// does not always ship it); also the stand-in library the tests load (tests/support/fake_nvml.cpp).
// Layouts, codes and the versioned-struct rule as nvml.h declares them.
namespace ember::train::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;  // NVML_SUCCESS
using Device = struct nvmlDevice_st*;  // nvmlDevice_t

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
/// nvml.h's nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2), the struct's size with the version in the top byte.
constexpr unsigned int kMemoryV2 = static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

}  // namespace ember::train::nvml
