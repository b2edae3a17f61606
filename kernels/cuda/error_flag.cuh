#pragma once
// Device-side error reporting for kernels that validate data they cannot see from the host
// (integer division by zero). The GPU cannot throw, and a device-side assert would kill the CUDA
// context; instead a kernel raises a flag in a 2-slot device buffer {raised, first reported
// value}, and the launcher reads it back after the kernel and throws an ember::Error. Reading it
// back synchronizes the stream, so only ops that need a check at the call use it;
// core/device_check.h reports without waiting instead (index and class-target bounds).
#include <cstdint>
#include <utility>

#include <ember/core/cuda_graph.h>
#include <ember/core/stream.h>
#include <ember/kernels/cuda/common.cuh>

namespace ember::kernels::cuda {

/// Raises the flag; the first thread to raise it records `value` (integer division passes 0).
__device__ inline void raise_error_flag(unsigned long long* flag, int64_t value) {
  if (atomicCAS(flag, 0ull, 1ull) == 0ull) {
    // Only this thread ever writes slot 1; the host reads it after the stream has finished.
    reinterpret_cast<volatile int64_t*>(flag)[1] = value;
  }
}

/// The {raised, value} buffer: cleared on `stream` at construction, so kernels launched on the
/// same stream afterwards see it cleared. Memory comes from the caching allocator.
class DeviceErrorFlag {
 public:
  DeviceErrorFlag(Device device, cudaStream_t stream)
      : buf_(empty({2}, {.dtype = DType::i64, .device = device})), stream_(stream) {
    DeviceGuard guard(device);  // `stream` belongs to `device`, which need not be current
    CUDA_CHECK(cudaMemsetAsync(buf_.data_ptr(), 0, 2 * sizeof(int64_t), stream_));
  }
  unsigned long long* ptr() const { return static_cast<unsigned long long*>(buf_.data_ptr()); }
  /// Waits for the stream; returns {raised, value}.
  std::pair<bool, int64_t> read() const {
    int64_t host[2] = {0, 0};
    ember::detail::check_not_capturing("a device error flag's read");  // before the copy is queued
    DeviceGuard guard(buf_.device());
    CUDA_CHECK(cudaMemcpyAsync(host, buf_.data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, stream_));
    Stream(buf_.device(), stream_).synchronize();  // counted in host_synchronizations()
    return {host[0] != 0, host[1]};
  }

 private:
  Tensor buf_;  // (2) i64 on the device
  cudaStream_t stream_;
};

}  // namespace ember::kernels::cuda
