// The cudaMalloc/cudaFree backend of the caching allocator, one allocator per device.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_check.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/stream.h>

namespace ember {
namespace {

constexpr int kMaxDevices = 64;

class CudaBackend final : public CachingAllocator::Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  std::pair<size_t, size_t> memory_info() const override {
    DeviceGuard guard(Device::cuda(device_));
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return {0, 0};
    }
    return {free, total};
  }

  void* alloc(size_t nbytes) override {
    DeviceGuard guard(Device::cuda(device_));
    void* p = nullptr;
    // During a stream capture in thread-local mode cudaMalloc is an unsafe call; in relaxed mode it
    // is allowed (PyTorch's allocator does the same). Outside a capture the exchange changes nothing.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaMalloc(&p, nbytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so the next launch check does not report it
      return nullptr;
    }
    CUDA_CHECK(err);
    return p;
  }

  void free(void* ptr) override {
    DeviceGuard guard(Device::cuda(device_));
    CUDA_CHECK(cudaFree(ptr));
  }

  void* current_stream() override { return ember::current_stream(Device::cuda(device_)).handle(); }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  // Events for record_stream's deferred frees.
  void* record_event(void* stream) override { return detail::cuda_pooled_event_record(device_, stream); }
  bool event_done(void* event) override { return detail::cuda_event_query(event); }
  void event_wait(void* event) override {
    detail::check_not_capturing("the caching allocator's wait for a deferred free");
    detail::cuda_event_synchronize(event);
    detail::note_host_synchronization();
  }
  void event_release(void* event) override { detail::cuda_pooled_event_release(device_, event); }

 private:
  int device_;
};

// Created on first use and never destroyed: tensors freed during static destruction still call
// back into their allocator, and the CUDA runtime may be gone by then anyway.
std::array<std::atomic<CachingAllocator*>, kMaxDevices> g_allocators{};
std::mutex g_create_mu;

}  // namespace

CachingAllocator& cuda_caching_allocator(int index) {
  Device::cuda(index).validate();
  EMBER_CHECK(index < kMaxDevices, "cuda:", index, " is beyond the ", kMaxDevices, " devices ember supports");
  CachingAllocator* a = g_allocators[index].load(std::memory_order_acquire);
  if (a) return *a;
  std::lock_guard<std::mutex> lock(g_create_mu);
  a = g_allocators[index].load(std::memory_order_relaxed);
  if (!a) {
    a = new CachingAllocator(std::make_unique<CudaBackend>(index));
    g_allocators[index].store(a, std::memory_order_release);
  }
  return *a;
}

void cuda_empty_cache() {
  for (auto& slot : g_allocators)
    if (CachingAllocator* a = slot.load(std::memory_order_acquire)) a->empty_cache();
}

}  // namespace ember
