// The CUDA backend of the device checks (core/device_check.h): the records live in mapped pinned
// host memory, so a kernel writes them and the host reads them with no copy; the claim words live
// in each device's memory; completion is tracked with pooled timing-free events (runtime.h).
// Everything here runs under the registry's mutex.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>

#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_check.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/device_check.h>
#include <ember/core/stream.h>

namespace ember {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kRecordBytes =
    sizeof(int64_t) * DeviceCheckRegistry::kSlots * static_cast<size_t>(DeviceCheckRegistry::kRecordWords);

class CudaCheckBackend final : public DeviceCheckRegistry::Backend {
 public:
  // Memory is never freed: checks can be polled during static destruction, after the CUDA
  // runtime may have gone, and the whole lot is a few tens of KiB per device.
  int64_t* host_records() override {
    if (!host_) {
      void* p = nullptr;
      CUDA_CHECK(cudaHostAlloc(&p, kRecordBytes, cudaHostAllocMapped | cudaHostAllocPortable));
      host_ = static_cast<int64_t*>(p);
    }
    return host_;
  }

  int64_t* device_records(int device) override {
    PerDevice& d = per_device(device);
    if (!d.records) {
      int64_t* host = host_records();
      DeviceGuard guard(Device::cuda(device));
      void* p = nullptr;
      CUDA_CHECK(cudaHostGetDevicePointer(&p, host, 0));
      d.records = static_cast<int64_t*>(p);
    }
    return d.records;
  }

  unsigned long long* claims(int device) override {
    PerDevice& d = per_device(device);
    if (!d.claims) {
      DeviceGuard guard(Device::cuda(device));
      void* p = nullptr;
      const size_t bytes = sizeof(unsigned long long) * DeviceCheckRegistry::kSlots;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      CUDA_CHECK(cudaMemset(p, 0, bytes));
      // Pool streams do not wait for the legacy stream's memset: finish it now (once per device).
      CUDA_CHECK(cudaDeviceSynchronize());
      detail::note_host_synchronization();
      d.claims = static_cast<unsigned long long*>(p);
    }
    return d.claims;
  }

  void* record_event(int device, void* stream) override { return detail::cuda_pooled_event_record(device, stream); }
  bool event_done(void* event) override { return detail::cuda_event_query(event); }
  void event_wait(void* event) override {
    detail::check_not_capturing("a device check's wait");
    detail::cuda_event_synchronize(event);
  }
  void event_release(int device, void* event) override { detail::cuda_pooled_event_release(device, event); }

 private:
  struct PerDevice {
    int64_t* records = nullptr;
    unsigned long long* claims = nullptr;
  };
  PerDevice& per_device(int device) {
    EMBER_CHECK(device >= 0 && device < kMaxDevices, "device checks: cuda:", device, " is beyond the ", kMaxDevices,
                " devices ember supports");
    return devices_[static_cast<size_t>(device)];
  }

  int64_t* host_ = nullptr;
  std::array<PerDevice, kMaxDevices> devices_{};
};

}  // namespace

std::unique_ptr<DeviceCheckRegistry::Backend> detail::make_cuda_device_check_backend() {
  return std::make_unique<CudaCheckBackend>();
}

}  // namespace ember
