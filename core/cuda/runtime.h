#pragma once
// Internal: the CUDA runtime calls behind core/stream.h, declared without CUDA headers so that
// core/stream.cpp compiles in every build. core/cuda/runtime.cpp defines them in CUDA builds;
// core/no_cuda.cpp defines them to throw "no CUDA support" otherwise. Not part of the public API.
// Handles are cudaStream_t / cudaEvent_t passed as void*; `device` is a CUDA device index.
#include <string>

namespace ember::detail {

/// The NVIDIA GPUs the kernel driver lists (entries of /proc/driver/nvidia/gpus, whatever this build
/// can use); 0 when the directory is missing. Device::best() names them when this build cannot
/// (core/device.cpp: every build).
int nvidia_gpus_listed(const std::string& dir = "/proc/driver/nvidia/gpus");

/// cudaDriverGetVersion: the CUDA version the installed driver supports (e.g. 12020 for 12.2), 0
/// when no driver is installed or the build has no CUDA. Never throws.
int cuda_driver_version() noexcept;

/// True when the CUDA runtime is shutting down (cudaErrorCudartUnloading: the process is exiting
/// and the runtime's exit-time teardown has begun), so no CUDA call can succeed any more; false
/// otherwise and in builds without CUDA. For destructors and threads that may run during exit,
/// which then stop quietly instead of reporting an error. Never throws.
bool cuda_runtime_unloading() noexcept;

/// cudaDeviceGetPCIBusId: device `device`'s PCI bus id ("00000000:3B:00.0", what NVML looks devices
/// up by); "" when CUDA cannot say or the build has no CUDA. Never throws.
std::string cuda_pci_bus_id(int device) noexcept;

/// NVTX ranges (nvtxRangePushA / nvtxRangePop, NVTX 3: header-only) while a profile records on a
/// GPU machine, so Nsight Systems shows ember's span names; nothing in builds without CUDA.
void nvtx_push(const char* name) noexcept;
void nvtx_pop() noexcept;

/// cudaGetDevice / cudaSetDevice (set is skipped when already current).
int cuda_get_device();
void cuda_set_device(int device);

/// A non-blocking stream from the device's pool (round-robin over a fixed set, never destroyed).
void* cuda_pool_stream(int device);
void cuda_stream_synchronize(int device, void* stream);
void cuda_device_synchronize(int device);

/// Events are created with timing enabled on `device`.
void* cuda_event_create(int device);
/// Never throws (called from Event's destructor); reports failures on stderr.
void cuda_event_destroy(int device, void* event) noexcept;
void cuda_event_record(int device, void* event, void* stream);
/// Makes `stream` (on `stream_device`) wait for `event`.
void cuda_event_wait(void* event, int stream_device, void* stream);
void cuda_event_synchronize(void* event);
bool cuda_event_query(void* event);
float cuda_event_elapsed_ms(void* start, void* end);

/// A timing-free event from `device`'s pool, recorded on `stream` (a stream of that device): for
/// "is this work done yet" (device checks, deferred frees), cheaper to record than Event's.
void* cuda_pooled_event_record(int device, void* stream);
/// Gives an event of cuda_pooled_event_record back to `device`'s pool.
void cuda_pooled_event_release(int device, void* event) noexcept;

}  // namespace ember::detail
