#pragma once
// cuDNN handles and descriptors as RAII objects.
//
// Handles: one per (device, stream), created on first use and bound to that stream for life (as
// the cuBLAS handles in cublas_handle.h), so two threads on two streams never race on
// cudnnSetStream. cuDNN allows many threads but not two at once on one handle, and two threads
// may share a stream (the legacy default stream is everyone's until set otherwise), so a handle is
// lent out with its mutex held (CudnnHandleLease) for one sequence of calls. The registry is
// deliberately never destroyed at process exit (the CUDA runtime may be gone by then);
// release_cudnn_handles() destroys the handles in an orderly way.
//
// Descriptors: thin owners of cudnn*Descriptor_t. cuDNN's legacy API takes int dimensions and
// strides, so the setters check that every value fits and name the shape when it does not. The
// destructors never throw: a failing cudnnDestroy*Descriptor is logged to stderr.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <mutex>
#include <utility>

#include <ember/core/device.h>
#include <ember/core/dtype.h>

namespace ember::kernels::cuda {

/// A cuDNN alpha or beta as cuDNN reads it: a double for f64 data, a float for every other dtype.
struct CudnnScale {
  float f;
  double d;
  explicit CudnnScale(double v) : f(static_cast<float>(v)), d(v) {}
  /// The value in the width cuDNN reads for data of dtype `dt`.
  const void* ptr(DType dt) const {
    return dt == DType::f64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
  }
};

/// RAII owner of one cuDNN handle bound to (device, stream). The destructor never throws.
class CudnnHandle {
 public:
  CudnnHandle(Device device, cudaStream_t stream);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  cudnnHandle_t get() const { return handle_; }
  std::mutex& mutex() { return mu_; }

 private:
  int device_index_ = 0;
  cudnnHandle_t handle_ = nullptr;
  std::mutex mu_;  // held by the CudnnHandleLease using the handle
};

/// Exclusive use of one cuDNN handle while the lease lives (it holds the handle's mutex).
class CudnnHandleLease {
 public:
  CudnnHandleLease(cudnnHandle_t handle, std::unique_lock<std::mutex> lock) : handle_(handle), lock_(std::move(lock)) {}
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_;
  std::unique_lock<std::mutex> lock_;
};

/// The cuDNN handle for `device` and `stream` (created on first use; thread-safe), locked for the
/// caller until the lease is dropped: keep the lease only for the cuDNN calls (never take a second
/// one for the same stream while holding it). Valid until release_cudnn_handles(). The caller must
/// have `device` current (DeviceGuard) when using it.
CudnnHandleLease cudnn_handle(Device device, cudaStream_t stream);

/// Destroys every cached handle. Only call when no thread is using one (e.g. at shutdown).
void release_cudnn_handles();

/// cuDNN data type of a floating ember dtype (f32, f64, f16, bf16); throws for anything else.
cudnnDataType_t cudnn_data_type(DType dt);

/// Owner of a cudnnTensorDescriptor_t.
class TensorDescriptor {
 public:
  TensorDescriptor();
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;

  /// A fully packed NCHW tensor (n, c, h, w) of dtype dt. Throws when a size or stride exceeds int.
  void set_4d(DType dt, int64_t n, int64_t c, int64_t h, int64_t w);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

/// Owner of a cudnnFilterDescriptor_t.
class FilterDescriptor {
 public:
  FilterDescriptor();
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;

  /// A packed NCHW filter (out_channels, in_channels_per_group, kh, kw) of dtype dt.
  void set_4d(DType dt, int64_t o, int64_t c, int64_t kh, int64_t kw);
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

/// Owner of a cudnnConvolutionDescriptor_t (cross-correlation, as every framework's "conv").
class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor();
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;

  /// 2-D convolution with the given geometry; `compute` is the accumulation type (CUDNN_DATA_FLOAT
  /// for f32/f16/bf16 data, CUDNN_DATA_DOUBLE for f64).
  void set_2d(int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
              int64_t groups, cudnnDataType_t compute);
  void set_math_type(cudnnMathType_t math);
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

}  // namespace ember::kernels::cuda
