#pragma once
// CUDA graphs: capture the kernels a piece of host code queues once, then replay them with one
// launch (PyTorch's torch.cuda.CUDAGraph). A training step of static shapes is launch-bound on a
// fast GPU; replaying its graph removes the per-kernel launch cost of the host.
//
//   Stream side = new_stream(dev);
//   { StreamGuard on(side); step(static_input, static_target); }  // warm-up on the capture stream:
//                                                  // its cuBLAS/cuDNN handles cannot be made in a capture
//   cuda::Graph graph;
//   {
//     cuda::GraphCapture capture(graph, side);     // side becomes current; capturing
//     loss = step(static_input, static_target);    // kernels are recorded, not run
//   }                                              // capture_end(): the graph is instantiated
//   copy_(static_input, next_batch);               // new data goes into the same memory
//   graph.replay();                                 // runs every recorded kernel again
//   float l = loss.item<float>();                   // read after replay
//
// Memory: while a graph captures on stream S, the allocations the capturing thread makes for S
// come from the graph's private pool of the caching allocator (core/caching_allocator.h). Blocks
// freed inside the capture go back to that pool and may be reused later in the same capture
// (stream-ordered, so replay-safe); after the capture the pool's memory is never handed to anyone
// else while the graph lives, so replays write where the capture's tensors were. reset() (a new
// capture begins with it) or the destructor gives the pool's free segments back to the device.
//
// What cannot be captured: anything that makes the host wait for the GPU (Stream::synchronize,
// Event::synchronize, item(), to(cpu), copies from the host, device-check waits), an allocation by
// the capturing thread for another stream, and host values that change from step to step (they
// are baked into the recorded launches: a new learning rate needs a new capture). Two per-step
// values are handled: dropout's random offsets and Adam's step count are read from a device word
// that the graph's first node advances at every replay (what eager step k would use). A forbidden wait
// throws an Error naming what waited and the innermost op (profiler::RecordScope) around it,
// before anything waits; the capture is then ended and discarded, and the previous stream made
// current again. Device-side checks (core/device_check.h) are not armed inside a capture: their
// kernels get a null slot and skip reporting (the values were checked during the eager warm-up
// steps). On the CPU, and in a build without CUDA, capture_begin throws an Error naming the
// device. docs/cuda_graphs.md has the details.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>

namespace ember::cuda {

/// One captured CUDA graph and its memory pool.
class Graph {
 public:
  Graph() = default;
  /// Frees the graph and releases its pool (see reset()).
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Starts capturing the work this thread queues on `device` (a CUDA device; cpu is an Error):
  /// a pool side stream (new_stream) becomes the current stream, ordered after the previous one.
  /// A captured graph held before is reset first. That stream may never have run anything: work
  /// with matmuls or convolutions (whose per-stream handles cannot be created inside a capture)
  /// takes the Stream overload after a warm-up on that stream.
  void capture_begin(Device device);
  /// As above, capturing on `stream` (not the legacy default stream): use the stream the eager
  /// warm-up steps ran on, so the per-stream cuBLAS and cuDNN handles already exist.
  void capture_begin(Stream stream);
  /// Ends the capture and instantiates the graph; the previous stream is current again and waits
  /// for the capture stream. Throws when the capture was invalidated (the graph is discarded).
  void capture_end();
  /// Launches the graph on the device's current stream (asynchronous, as any kernel).
  void replay();
  /// Frees the graph and gives its pool back to the allocator. Waits for the device first when
  /// the graph was replayed (a replay in flight may still use the pool). No-op when empty.
  void reset();

  /// Whether capture_end() produced a graph that replay() can launch.
  bool captured() const { return exec_ != nullptr; }
  /// Whether this graph is capturing now.
  bool capturing() const { return capturing_; }
  /// The allocator pool of the graph (0: none).
  uint64_t pool() const { return pool_; }
  /// The stream the graph was captured on.
  Stream capture_stream() const { return stream_; }
  /// Replays since the capture.
  int64_t replays() const { return replays_; }
  /// Philox blocks each replay moves the generators used inside the capture (dropout; 0: none).
  uint64_t rng_stride() const { return rng_stride_; }

 private:
  /// Ends a capture that failed: discards the graph, releases the pool, restores the stream.
  void abort_capture() noexcept;
  friend class GraphCapture;

  Device device_ = Device::cpu();
  Stream stream_, prev_;
  std::string failure_;  // why the last capture produced no graph ("" when it did)
  uint64_t pool_ = 0;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;  // cudaGraphExec_t
  bool capturing_ = false;
  int64_t replays_ = 0;
  // Dropout's random numbers: the kernels add rng_[0] (device memory: {extra, stride, index}) to
  // their captured offsets; the graph's first node adds the stride to it (and 1 to the index), so
  // replay k draws at offset + k * stride, what eager step k would (one generator) or a disjoint
  // range (several), and Adam's kernel steps at its captured step count + k.
  void* rng_ = nullptr;
  int device_of_rng_ = -1;
  uint64_t rng_stride_ = 0;
  std::vector<Generator*> rng_generators_;  // advanced by rng_stride_ on the host at each replay
  // Their states as the next replay expects them: one that moved since (an eager random op,
  // manual_seed, set_state) would make the replay draw numbers already drawn, so replay() refuses.
  std::vector<RngState> rng_expected_;
  std::vector<std::function<void()>> replay_hooks_;  // detail::on_replay, run at each replay after the first
};

/// RAII capture: capture_begin in the constructor; end() (or the destructor) ends it. Left by an
/// exception, the capture is discarded instead (the graph stays empty, the device usable).
/// Destructors never throw: a capture that fails to end there leaves the graph empty, and
/// replay() then names the reason; call end() to get the error where it happens.
class GraphCapture {
 public:
  GraphCapture(Graph& graph, Device device);
  GraphCapture(Graph& graph, Stream stream);
  ~GraphCapture();
  /// capture_end() now (throws when the capture was invalidated).
  void end();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
  int uncaught_;
};

}  // namespace ember::cuda

namespace ember::detail {

/// Whether the calling thread is capturing a CUDA graph (or is inside a CaptureScope).
bool capturing() noexcept;
/// Throws, when the calling thread is capturing, "<what> cannot run while a CUDA graph is being
/// captured (it makes the host wait for the GPU) in op <innermost scope>". Called by every host
/// wait before it waits.
void check_not_capturing(const char* what);
/// Throws an Error for `what` (an op, an optimizer) that cannot be captured, saying why.
void check_capturable(const char* what, const char* why);

/// Marks the calling thread as capturing without CUDA (the capture bookkeeping of
/// cuda::Graph without the stream capture itself): for the CPU tests of the errors, and used by
/// Graph. Scopes nest.
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
};

/// While this thread captures a Graph: the device address of its per-replay offset extra (a
/// uint64 that random kernels add to their Philox offset); null otherwise.
const uint64_t* capture_rng_extra() noexcept;
/// Generator::reserve inside a capture: `gen` moved by `blocks` Philox blocks.
void note_capture_rng(Generator* gen, uint64_t blocks);
/// While this thread captures a Graph: the device address of the replay number (0 for the first
/// replay after the capture, then 1, 2, ...), which kernels with a per-step host value (Adam's
/// step count) add to the value they captured; null otherwise.
const uint64_t* capture_replay_index() noexcept;
/// Inside a capture: `fn` runs on the host at every replay after the first (host state the
/// captured code advanced once, such as Adam's step counts, follows the replays). Its owner must
/// outlive the graph.
void on_replay(std::function<void()> fn);

/// The CUDA runtime calls of cuda::Graph (core/cuda/graph.cpp; core/no_cuda.cpp throws).
/// cudaStreamBeginCapture in thread-local mode.
void cuda_stream_begin_capture(int device, void* stream);
/// cudaStreamEndCapture: the graph, or null (with `error` set) when the capture was invalidated.
void* cuda_stream_end_capture(int device, void* stream, std::string& error) noexcept;
/// cudaGraphInstantiate.
void* cuda_graph_instantiate(int device, void* graph);
void cuda_graph_launch(int device, void* exec, void* stream);
/// Destroys what is not null; never throws.
void cuda_graph_destroy(int device, void* graph, void* exec) noexcept;
/// Three uint64 of device memory {extra, stride, replay index} for a graph's random offsets and
/// replay number (cudaMalloc; outside a capture), set with a host wait, advanced (extra += stride,
/// index += 1) by a kernel queued on `stream`.
void* cuda_graph_rng_alloc(int device);
void cuda_graph_rng_set(int device, void* state, uint64_t extra, uint64_t stride, uint64_t index);
void cuda_graph_rng_advance(int device, void* stream, void* state);
void cuda_graph_rng_free(int device, void* state) noexcept;

}  // namespace ember::detail
