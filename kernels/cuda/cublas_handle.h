#pragma once
// cuBLAS handles: one per (device, stream), created on first use and bound to that stream for
// life, so a GEMM never races another thread's cublasSetStream. Each handle gets its own
// workspace from the CUDA caching allocator (cuBLAS would otherwise cudaMalloc one), allocated
// on the handle's stream so that stream-ordered reuse keeps it safe.
//
// The registry is deliberately never destroyed at process exit: by then the CUDA runtime may
// already be torn down, and cublasDestroy / freeing into the caching allocator could fail or
// crash. release_cublas_handles() destroys them in an orderly way when a program wants that.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <ember/core/allocator.h>
#include <ember/core/device.h>

namespace ember::kernels::cuda {

/// RAII owner of one cuBLAS handle bound to (device, stream), with its workspace. The destructor
/// never throws: failures are logged to stderr.
class CublasHandle {
 public:
  CublasHandle(Device device, cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }

 private:
  int device_index_ = 0;
  cublasHandle_t handle_ = nullptr;
  DataPtr workspace_;  // from the caching allocator; returned after the handle is destroyed
};

/// The cuBLAS handle for `device` and `stream` (created on first use; thread-safe). Valid until
/// release_cublas_handles(). The caller must have `device` current (DeviceGuard) when using it.
cublasHandle_t cublas_handle(Device device, cudaStream_t stream);

/// Destroys every cached handle. Only call when no thread is using a handle (e.g. at shutdown).
void release_cublas_handles();

}  // namespace ember::kernels::cuda
