// CUDA runtime glue for core/: device discovery, the per-device stream pool, events, and the
// device switch used by DeviceGuard. Plain C++ against the CUDA runtime API.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_check.h>
#include <ember/core/device.h>
#include <ember/core/stream.h>

namespace ember {

bool cuda_compiled() { return true; }

namespace {

/// What cudaGetDeviceCount said, asked once: it fails (no driver, no GPU, driver too old) on
/// CPU-only hosts, which means "0 devices", not an error. The error is kept for
/// cuda_unavailable_reason() and cleared so that later CUDA calls do not see it.
struct Probe {
  int count = 0;
  cudaError_t error = cudaSuccess;
  int driver = 0;  // cudaDriverGetVersion (0: no driver)
  int runtime = 0;  // cudaRuntimeGetVersion
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    r.error = cudaGetDeviceCount(&r.count);
    if (r.error != cudaSuccess) {
      (void)cudaGetLastError();
      r.count = 0;
    }
    if (cudaDriverGetVersion(&r.driver) != cudaSuccess) (void)cudaGetLastError(), r.driver = 0;
    if (cudaRuntimeGetVersion(&r.runtime) != cudaSuccess) (void)cudaGetLastError(), r.runtime = 0;
    return r;
  }();
  return p;
}

/// "12.2" for 12020; "none" for 0 (no driver).
std::string cuda_version_str(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

int cuda_device_count() { return probe().count; }

std::string cuda_unavailable_reason() {
  const Probe& p = probe();
  if (p.count > 0) return "";
  std::string why = p.error != cudaSuccess ? std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(p.error) +
                                                 " (" + cudaGetErrorString(p.error) + ")"
                                           : std::string("cudaGetDeviceCount found no CUDA device");
  why += "; CUDA driver " + cuda_version_str(p.driver) + " (" + std::to_string(p.driver) + "), CUDA runtime " +
         cuda_version_str(p.runtime) + " (" + std::to_string(p.runtime) + ")";
  if (p.driver == 0) why += ": no NVIDIA driver is installed";
  else if (p.driver < p.runtime)
    why += ": the driver is older than the runtime ember was built with; update the driver";
  return why;
}

namespace detail {

int cuda_driver_version() noexcept { return probe().driver; }
std::string cuda_pci_bus_id(int device) noexcept {
  char id[32] = {};  // nvml.h's NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
  if (cudaDeviceGetPCIBusId(id, sizeof id, device) == cudaSuccess) return id;
  (void)cudaGetLastError();  // not left for the next launch check to report
  return "";
}
void nvtx_push(const char* name) noexcept { nvtxRangePushA(name); }
void nvtx_pop() noexcept { nvtxRangePop(); }

namespace {

constexpr int kMaxDevices = 64;
// Streams handed out by new_stream, per device, reused round-robin so that code asking for a
// fresh stream each iteration does not leak streams. Never destroyed (they live as long as the
// CUDA context, and destroying them during static destruction would race the runtime teardown).
constexpr int kStreamsPerDevice = 32;

struct StreamPool {
  std::once_flag init;
  std::array<cudaStream_t, kStreamsPerDevice> streams{};
  std::atomic<unsigned> next{0};
};
std::array<StreamPool, kMaxDevices> g_stream_pools;

// Free timing-free events per device, reused by cuda_pooled_event_record (never destroyed, like
// the streams).
struct EventPool {
  std::mutex mu;
  std::vector<cudaEvent_t> free;
};
std::array<EventPool, kMaxDevices> g_event_pools;

}  // namespace

bool cuda_runtime_unloading() noexcept {
  int d = 0;
  const cudaError_t err = cudaGetDevice(&d);
  if (err == cudaSuccess) return false;
  (void)cudaGetLastError();
  return err == cudaErrorCudartUnloading;
}

int cuda_get_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void cuda_set_device(int device) {
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) CUDA_CHECK(cudaSetDevice(device));
}

void* cuda_pool_stream(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "new_stream: cuda:", device, " is beyond the ", kMaxDevices,
              " devices ember supports");
  StreamPool& pool = g_stream_pools[device];
  std::call_once(pool.init, [&] {
    DeviceGuard guard(Device::cuda(device));
    for (auto& s : pool.streams) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  });
  unsigned i = pool.next.fetch_add(1, std::memory_order_relaxed) % kStreamsPerDevice;
  return pool.streams[i];
}

void cuda_stream_synchronize(int device, void* stream) {
  // The null handle means the legacy default stream of the *current* device, so switch first.
  DeviceGuard guard(Device::cuda(device));
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void cuda_device_synchronize(int device) {
  DeviceGuard guard(Device::cuda(device));
  CUDA_CHECK(cudaDeviceSynchronize());
}

void* cuda_event_create(int device) {
  DeviceGuard guard(Device::cuda(device));
  cudaEvent_t ev = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDefault));
  return ev;
}

void cuda_event_destroy(int device, void* event) noexcept {
  cudaError_t err = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  // At process exit the runtime may already be torn down; that is not worth a message.
  if (err != cudaSuccess && err != cudaErrorCudartUnloading)
    std::fprintf(stderr, "ember: cudaEventDestroy failed on cuda:%d: %s\n", device, cudaGetErrorString(err));
}

void cuda_event_record(int device, void* event, void* stream) {
  DeviceGuard guard(Device::cuda(device));
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void cuda_event_wait(void* event, int stream_device, void* stream) {
  DeviceGuard guard(Device::cuda(stream_device));
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

void cuda_event_synchronize(void* event) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

bool cuda_event_query(void* event) {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(err);
  return true;
}

void* cuda_pooled_event_record(int device, void* stream) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, " is beyond the ", kMaxDevices,
              " devices ember supports");
  EventPool& pool = g_event_pools[static_cast<size_t>(device)];
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (!pool.free.empty()) {
      ev = pool.free.back();
      pool.free.pop_back();
    }
  }
  DeviceGuard guard(Device::cuda(device));
  if (!ev) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t err = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) cuda_pooled_event_release(device, ev);
  CUDA_CHECK(err);
  return ev;
}

void cuda_pooled_event_release(int device, void* event) noexcept {
  EventPool& pool = g_event_pools[static_cast<size_t>(device)];
  try {
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.free.push_back(static_cast<cudaEvent_t>(event));
  } catch (...) {  // out of memory for the free list: the event is simply not reused
  }
}

float cuda_event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace detail
}  // namespace ember
