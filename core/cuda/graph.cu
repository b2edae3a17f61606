// The CUDA runtime calls behind cuda::Graph (core/cuda_graph.h): stream capture in thread-local
// mode (only this thread's unsafe calls invalidate the capture; other threads, the loader's
// workers, keep running), instantiation and launch; and the one-thread kernel that advances a
// graph's random-offset extra at the start of each replay (a .cu file for that kernel).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <ember/core/cuda_check.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/stream.h>

namespace ember::detail {

void cuda_stream_begin_capture(int device, void* stream) {
  DeviceGuard guard(Device::cuda(device));
  CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
}

void* cuda_stream_end_capture(int device, void* stream, std::string& error) noexcept {
  cudaGraph_t graph = nullptr;
  if (cudaSetDevice(device) != cudaSuccess) {
    error = cudaGetErrorString(cudaGetLastError());
    return nullptr;
  }
  const cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. cudaErrorStreamCaptureInvalidated: not sticky, cleared for the next launch check
    error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    if (graph != nullptr) cudaGraphDestroy(graph);
    return nullptr;
  }
  if (graph == nullptr) error = "cudaStreamEndCapture returned no graph";
  return graph;
}

void* cuda_graph_instantiate(int device, void* graph) {
  DeviceGuard guard(Device::cuda(device));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph), 0));
  return exec;
}

void cuda_graph_launch(int device, void* exec, void* stream) {
  DeviceGuard guard(Device::cuda(device));
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

void cuda_graph_destroy(int device, void* graph, void* exec) noexcept {
  if (graph == nullptr && exec == nullptr) return;
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  cudaError_t err = cudaSuccess;
  if (exec != nullptr) err = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (graph != nullptr && err == cudaSuccess) err = cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "ember: could not destroy a CUDA graph on cuda:%d: %s\n", device, cudaGetErrorString(err));
  }
  if (prev >= 0) (void)cudaSetDevice(prev);
}

namespace {
/// state = {extra, stride, index}: one thread, the first node of every captured graph.
__global__ void rng_advance_kernel(unsigned long long* state) {
  state[0] += state[1];
  state[2] += 1;
}
}  // namespace

void* cuda_graph_rng_alloc(int device) {
  DeviceGuard guard(Device::cuda(device));
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, 3 * sizeof(uint64_t)));
  return p;
}

void cuda_graph_rng_set(int device, void* state, uint64_t extra, uint64_t stride, uint64_t index) {
  DeviceGuard guard(Device::cuda(device));
  const uint64_t v[3] = {extra, stride, index};
  // From pageable memory cudaMemcpy may return before the DMA lands, and the capture and replay
  // streams are non-blocking (not ordered after the legacy stream): wait for it.
  CUDA_CHECK(cudaMemcpy(state, v, sizeof v, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void cuda_graph_rng_advance(int device, void* stream, void* state) {
  DeviceGuard guard(Device::cuda(device));
  rng_advance_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned long long*>(state));
  EMBER_LAUNCH_CHECK();
}

void cuda_graph_rng_free(int device, void* state) noexcept {
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  if (cudaFree(state) != cudaSuccess) (void)cudaGetLastError();
  if (prev >= 0) (void)cudaSetDevice(prev);
}

}  // namespace ember::detail
