// CUDA runtime glue for core/: device discovery, the per-device stream pool, events, and the
// device switch used by DeviceGuard. Plain C++ against the CUDA runtime API.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>

#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_check.h>
#include <ember/core/device.h>
#include <ember/core/stream.h>

namespace ember {

bool cuda_compiled() { return true; }

int cuda_device_count() {
  // Asked once: cudaGetDeviceCount fails (no driver, no GPU, driver too old) on CPU-only hosts,
  // which means "0 devices", not an error. Clear the error so later CUDA calls do not see it.
  static const int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

namespace detail {
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

}  // namespace

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

float cuda_event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace detail
}  // namespace ember
