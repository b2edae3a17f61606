// cuDNN handle registry and descriptor owners (see cudnn_handle.h for why handles are per
// (device, stream) and why the registry outlives static destruction).
#include <ember/kernels/cuda/cudnn_handle.h>

#include <climits>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <ember/core/cuda_check.h>
#include <ember/core/stream.h>

namespace ember::kernels::cuda {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<CudnnHandle>> handles;
};

Registry& registry() {
  static Registry* r = new Registry();  // intentionally leaked: see cudnn_handle.h
  return *r;
}

/// Destructor helper: logs a failed cudnnDestroy* instead of throwing.
void log_if_failed(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) std::fprintf(stderr, "ember: %s failed: %s\n", what, cudnnGetErrorString(st));
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

// ---- handles ----

CudnnHandle::CudnnHandle(Device device, cudaStream_t stream) : device_index_(device.index()) {
  EMBER_CHECK(device.is_cuda(), "cuDNN handle requested for non-CUDA device ", device.str());
  DeviceGuard guard(device);
  CUDNN_CHECK(cudnnCreate(&handle_));
  try {
    CUDNN_CHECK(cudnnSetStream(handle_, stream));
  } catch (...) {
    cudnnDestroy(handle_);
    handle_ = nullptr;
    throw;
  }
}

CudnnHandle::~CudnnHandle() {
  if (handle_ == nullptr) return;
  int prev = -1;
  const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
  if (cudaSetDevice(device_index_) != cudaSuccess) (void)cudaGetLastError();
  const cudnnStatus_t st = cudnnDestroy(handle_);
  if (st != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "ember: cudnnDestroy on cuda:%d failed: %s\n", device_index_, cudnnGetErrorString(st));
  if (have_prev) (void)cudaSetDevice(prev);
  handle_ = nullptr;
}

CudnnHandleLease cudnn_handle(Device device, cudaStream_t stream) {
  Registry& r = registry();
  CudnnHandle* handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto key = std::make_pair(device.index(), stream);
    auto it = r.handles.find(key);
    if (it == r.handles.end()) it = r.handles.emplace(key, std::make_unique<CudnnHandle>(device, stream)).first;
    handle = it->second.get();
  }
  // The registry lock is released first: a thread waiting for a busy handle must not block others
  // from getting theirs.
  return CudnnHandleLease(handle->get(), std::unique_lock<std::mutex>(handle->mutex()));
}

void release_cudnn_handles() {
  Registry& r = registry();
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<CudnnHandle>> doomed;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    doomed.swap(r.handles);
  }
  doomed.clear();  // destructors run outside the lock and never throw
}

cudnnDataType_t cudnn_data_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      break;
  }
  EMBER_FAIL("cuDNN: expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dt));
}

// ---- descriptors ----

TensorDescriptor::TensorDescriptor() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
TensorDescriptor::~TensorDescriptor() {
  if (desc_ != nullptr) log_if_failed(cudnnDestroyTensorDescriptor(desc_), "cudnnDestroyTensorDescriptor");
}

void TensorDescriptor::set_4d(DType dt, int64_t n, int64_t c, int64_t h, int64_t w) {
  // Packed NCHW strides; the largest one (c*h*w) and every size must fit cuDNN's int.
  const int64_t sw = 1, sh = w, sc = h * w, sn = c * h * w;
  EMBER_CHECK(fits_int(n) && fits_int(c) && fits_int(h) && fits_int(w) && fits_int(sn),
              "cuDNN tensor descriptor: sizes (", n, ", ", c, ", ", h, ", ", w,
              ") or the per-sample stride C*H*W = ", sn, " exceed cuDNN's int range");
  CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(desc_, cudnn_data_type(dt), static_cast<int>(n), static_cast<int>(c),
                                           static_cast<int>(h), static_cast<int>(w), static_cast<int>(sn),
                                           static_cast<int>(sc), static_cast<int>(sh), static_cast<int>(sw)));
}

FilterDescriptor::FilterDescriptor() { CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_)); }
FilterDescriptor::~FilterDescriptor() {
  if (desc_ != nullptr) log_if_failed(cudnnDestroyFilterDescriptor(desc_), "cudnnDestroyFilterDescriptor");
}

void FilterDescriptor::set_4d(DType dt, int64_t o, int64_t c, int64_t kh, int64_t kw) {
  EMBER_CHECK(fits_int(o) && fits_int(c) && fits_int(kh) && fits_int(kw) && fits_int(o * c * kh * kw),
              "cuDNN filter descriptor: sizes (", o, ", ", c, ", ", kh, ", ", kw, ") exceed cuDNN's int range");
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, cudnn_data_type(dt), CUDNN_TENSOR_NCHW, static_cast<int>(o),
                                         static_cast<int>(c), static_cast<int>(kh), static_cast<int>(kw)));
}

ConvolutionDescriptor::ConvolutionDescriptor() { CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_)); }
ConvolutionDescriptor::~ConvolutionDescriptor() {
  if (desc_ != nullptr) log_if_failed(cudnnDestroyConvolutionDescriptor(desc_), "cudnnDestroyConvolutionDescriptor");
}

void ConvolutionDescriptor::set_2d(int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dilation_h,
                                   int64_t dilation_w, int64_t groups, cudnnDataType_t compute) {
  EMBER_CHECK(fits_int(pad_h) && fits_int(pad_w) && fits_int(stride_h) && fits_int(stride_w) && fits_int(dilation_h) &&
                  fits_int(dilation_w) && fits_int(groups),
              "cuDNN convolution descriptor: padding (", pad_h, ", ", pad_w, "), stride (", stride_h, ", ", stride_w,
              "), dilation (", dilation_h, ", ", dilation_w, ") or groups ", groups, " out of cuDNN's int range");
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      desc_, static_cast<int>(pad_h), static_cast<int>(pad_w), static_cast<int>(stride_h), static_cast<int>(stride_w),
      static_cast<int>(dilation_h), static_cast<int>(dilation_w), CUDNN_CROSS_CORRELATION, compute));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, static_cast<int>(groups)));
}

void ConvolutionDescriptor::set_math_type(cudnnMathType_t math) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, math));
}

}  // namespace ember::kernels::cuda
