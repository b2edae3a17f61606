#pragma once
// Check macros for CUDA, cuBLAS, cuDNN and NCCL calls. Include only from CUDA-enabled sources
// (core/cuda/, kernels/cuda/, parallel/cuda/, data/cuda/ and the CUDA benchmarks). Each throws
// ember::Error naming the call, the library's error string, file and line.
#include <cuda_runtime.h>

#include <ember/core/error.h>

// A failed runtime call also leaves its error in the thread's last-error slot; a non-sticky one
// (cudaErrorNotReady from cudaEventElapsedTime, cudaErrorInvalidValue, ...) would then be
// reported a second time by the next EMBER_LAUNCH_CHECK, against an unrelated kernel, after the
// caller caught the first report. So the slot is cleared before throwing. (Sticky errors, e.g. an
// illegal address, cannot be cleared: every later call reports them again, which is right.)
#define CUDA_CHECK(expr)                                                                                \
  do {                                                                                                  \
    cudaError_t ember_err_ = (expr);                                                                    \
    if (ember_err_ != cudaSuccess) [[unlikely]] {                                                       \
      (void)cudaGetLastError();                                                                         \
      ::ember::detail::throw_error("CUDA_CHECK", #expr, __FILE__, __LINE__, "CUDA error ",              \
                                   cudaGetErrorName(ember_err_), ": ", cudaGetErrorString(ember_err_)); \
    }                                                                                                   \
  } while (0)

/// After every kernel launch: reports launch-configuration errors at the launch site.
#define EMBER_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    auto ember_st_ = (expr);                                                                                \
    if (ember_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                                    \
      ::ember::detail::throw_error("CUBLAS_CHECK", #expr, __FILE__, __LINE__, "cuBLAS error ",              \
                                   cublasGetStatusName(ember_st_), ": ", cublasGetStatusString(ember_st_)); \
  } while (0)

#define CUDNN_CHECK(expr)                                                                    \
  do {                                                                                       \
    auto ember_st_ = (expr);                                                                 \
    if (ember_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                      \
      ::ember::detail::throw_error("CUDNN_CHECK", #expr, __FILE__, __LINE__, "cuDNN error ", \
                                   cudnnGetErrorString(ember_st_));                          \
  } while (0)

#define NCCL_CHECK(expr)                                                                   \
  do {                                                                                     \
    auto ember_st_ = (expr);                                                               \
    if (ember_st_ != ncclSuccess) [[unlikely]]                                             \
      ::ember::detail::throw_error("NCCL_CHECK", #expr, __FILE__, __LINE__, "NCCL error ", \
                                   ncclGetErrorString(ember_st_));                         \
  } while (0)
