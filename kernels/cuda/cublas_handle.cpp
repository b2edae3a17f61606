// cuBLAS handle registry (see cublas_handle.h for why handles are per (device, stream) and why
// the registry outlives static destruction).
#include <ember/kernels/cuda/cublas_handle.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_check.h>
#include <ember/core/stream.h>

namespace ember::kernels::cuda {
namespace {

/// Workspace size recommended by the cuBLAS docs: 32 MiB on Hopper and newer, 4 MiB before.
size_t workspace_bytes(int device_index) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) != cudaSuccess) {
    (void)cudaGetLastError();
    major = 0;
  }
  return major >= 9 ? (size_t(32) << 20) : (size_t(4) << 20);
}

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<CublasHandle>> handles;
};

Registry& registry() {
  static Registry* r = new Registry();  // intentionally leaked: see cublas_handle.h
  return *r;
}

}  // namespace

CublasHandle::CublasHandle(Device device, cudaStream_t stream) : device_index_(device.index()) {
  EMBER_CHECK(device.is_cuda(), "cuBLAS handle requested for non-CUDA device ", device.str());
  DeviceGuard guard(device);
  CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    CUBLAS_CHECK(cublasSetStream(handle_, stream));  // resets the workspace, so it comes first
    CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    // f16/bf16 GEMMs keep f32 accumulation all the way, including split-K reductions.
    CUBLAS_CHECK(cublasSetMathMode(
        handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    const size_t bytes = workspace_bytes(device_index_);
    workspace_ = cuda_caching_allocator(device_index_).allocate(bytes, static_cast<void*>(stream));
    CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.get(), bytes));
  } catch (...) {
    cublasDestroy(handle_);
    handle_ = nullptr;
    throw;
  }
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) {
    int prev = -1;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (cudaSetDevice(device_index_) != cudaSuccess) (void)cudaGetLastError();
    const cublasStatus_t st = cublasDestroy(handle_);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "ember: cublasDestroy on cuda:%d failed: %s\n", device_index_, cublasGetStatusString(st));
    }
    if (have_prev) (void)cudaSetDevice(prev);
    handle_ = nullptr;
  }
  // workspace_ is returned to the caching allocator by its own destructor (after the handle, so
  // no cuBLAS call can still be issued with it; queued GEMMs are ordered on the same stream).
}

cublasHandle_t cublas_handle(Device device, cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto key = std::make_pair(device.index(), stream);
  auto it = r.handles.find(key);
  if (it == r.handles.end()) it = r.handles.emplace(key, std::make_unique<CublasHandle>(device, stream)).first;
  return it->second->get();
}

void release_cublas_handles() {
  Registry& r = registry();
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<CublasHandle>> doomed;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    doomed.swap(r.handles);
  }
  doomed.clear();  // destructors run outside the lock and never throw
}

}  // namespace ember::kernels::cuda
