#pragma once
// Shared pieces of the CUDA kernels: launch geometry (grid-stride loops over a capped grid),
// the current stream, the setup of an entry point (launch_on), and accumulation types (f16/bf16
// compute in f32).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_check.h>
#include <ember/core/stream.h>
#include <ember/core/tensor.h>

namespace ember::kernels::cuda {

constexpr int kBlock = 256;
/// Grid for n elements handled by grid-stride loops: enough blocks to fill the GPU several
/// times over, capped so huge tensors loop instead of launching millions of blocks.
inline int grid_for(int64_t n, int block = kBlock, int64_t cap = 65536) {
  int64_t g = (n + block - 1) / block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(g, cap)));
}

/// The current stream of the tensor's device, as a cudaStream_t. Launchers pass the tensor they
/// write: with stream checks on (core/caching_allocator.h) its use on that stream is noted.
inline cudaStream_t stream_of(const Tensor& t) {
  const Stream s = current_stream(t.device());
  if (stream_checks_enabled()) note_stream_use(t.storage(), s);
  return static_cast<cudaStream_t>(s.handle());
}

/// The setup every CUDA entry point shares, written once: nothing happens when `t` (the tensor
/// the call writes) is empty; otherwise t's device is made current for the call, launch(stream)
/// runs with t's current stream, and the kernel launches it made are checked (a failed launch
/// stays the pending error until read, so one check after several launches reports it).
template <typename Launch> void launch_on(const Tensor& t, Launch&& launch) {
  if (t.numel() == 0) return;
  DeviceGuard guard(t.device());
  launch(stream_of(t));
  EMBER_LAUNCH_CHECK();
}

/// Sets the bytes of t (contiguous) to zero on `stream`, asynchronously.
inline void zero_fill(const Tensor& t, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, static_cast<size_t>(t.numel()) * t.element_size(), stream));
}

/// Accumulation type: float for f32/f16/bf16, double for f64, same for integers.
template <typename T> struct AccType { using type = T; };
template <> struct AccType<Half> { using type = float; };
template <> struct AccType<BFloat16> { using type = float; };
template <typename T> using acc_t = typename AccType<T>::type;

}  // namespace ember::kernels::cuda
