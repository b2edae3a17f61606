#pragma once
// Internal to the CUDA convolution: what its three parts share. conv.cu keeps the plan cache (one
// plan per problem, made on its first call) and the entry points; conv_graph.cpp makes and runs
// cuDNN graph-API plans, the preferred path; conv_legacy.cpp the legacy cudnnConvolution* calls,
// the fallback for a problem the graph API has no engine for. conv.cu's top comment says why.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include <ember/core/caching_allocator.h>
#include <ember/core/device.h>
#include <ember/core/tensor.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/cuda/cudnn_graph.h>
#include <ember/kernels/cuda/cudnn_handle.h>

namespace ember::kernels::cuda::conv_detail {

constexpr size_t kSearchWorkspaceCap = size_t(1) << 30;  // bytes the algorithm search may use
constexpr uintptr_t kMaxAlign = 16;  // widest vector access cuDNN kernels make

enum class Direction : int { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

/// One convolution problem (possibly a chunk of the batch): x (n, c, h, w), filter (o, cg, kh, kw),
/// y (n, o, ho, wo), with cg = c / groups.
struct Geometry {
  DType dtype;
  int64_t n, c, h, w;
  int64_t o, cg, kh, kw;
  int64_t ho, wo;
  Conv2dParams p;
  bool channels_last = false;  // every operand NHWC in memory (dims still (N, C, H, W))
};

/// "x (n, c, h, w), w (...), y (...), stride ..., dtype[, channels-last]", for errors.
std::string geometry_str(const Geometry& g);
/// "forward", "backward-data" or "backward-filter".
const char* dir_name(Direction dir);
/// Largest power of two up to kMaxAlign that divides every address in `ps`.
int alignment_of(std::initializer_list<const void*> ps);
/// A scratch stand-in for the tensor `dir` writes (y, x or w), with the real one's address
/// alignment modulo kMaxAlign, for the searches (never the caller's tensor: see conv.cu); `hold`
/// owns its memory.
void* scratch_output(Direction dir, const Geometry& g, Device dev, const void* x, const void* w, const void* y,
                     Tensor& hold);

/// The search's workspace: the largest any candidate asks for, capped, straight from the driver
/// (see conv.cu's top comment); none if it cannot be had. Freed by the destructor (cudaFree waits for
/// the device, and the search has finished by then anyway).
class SearchWorkspace {
 public:
  SearchWorkspace(size_t want, Device dev) {
    want = std::min(want, kSearchWorkspaceCap);
    if (want == 0) return;
    for (int attempt = 0; attempt < 2 && ptr_ == nullptr; ++attempt) {
      if (attempt == 1) cuda_caching_allocator(dev.index()).empty_cache();  // cached blocks may hold it
      if (cudaMalloc(&ptr_, want) != cudaSuccess) {
        (void)cudaGetLastError();  // the out-of-memory error is handled here: clear it
        ptr_ = nullptr;
      }
    }
    if (ptr_ != nullptr) bytes_ = want;
  }
  ~SearchWorkspace() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  SearchWorkspace(const SearchWorkspace&) = delete;
  SearchWorkspace& operator=(const SearchWorkspace&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- the graph API (conv_graph.cpp) ----

/// A graph-API plan of one problem: the operation with its descriptors (which the execution plan
/// refers to) and the execution plan, empty when no engine fits.
struct GraphPlan {
  graph::Graph graph;
  graph::Descriptor config;  // the chosen engine configuration, kept alive beside the plan made of it
  graph::Descriptor exec;
  size_t ws_bytes = 0;
};
/// Builds the operation of `dir` (tensors with alignment `align`, alpha 1, beta 1 when `accumulate`
/// else 0), times up to kMaxCandidates of the heuristics' engine configurations whose numerics suit
/// the dtype on the real operands (the written one replaced by a scratch) and keeps the fastest.
/// `deterministic` (ember::deterministic() when the key was made) leaves out the engines noted
/// CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC.
GraphPlan make_graph_plan(cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g, int align,
                          bool accumulate, bool tf32, bool deterministic, Device dev, const void* x, const void* w,
                          const void* y);
/// One execution of a plan whose `exec` is set, on the three tensors' device pointers.
cudnnStatus_t run_graph(cudnnHandle_t h, const GraphPlan& plan, const void* x, const void* w, const void* y,
                        void* ws_ptr);

// ---- the legacy calls (conv_legacy.cpp) ----

struct AlgoChoice {
  int algo;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math;  // math type the algorithm was timed with
};

/// Descriptors of one problem. The convolution descriptor carries the requested math type.
struct Descs {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  Descs(const Geometry& g, cudnnMathType_t math);
};

/// The legacy path's plan: descriptors with the math type to run, the algorithm
/// cudnnFind*AlgorithmEx timed fastest, and its workspace.
struct LegacyPlan {
  LegacyPlan(const Geometry& g, cudnnMathType_t math) : descs(g, math) {}
  Descs descs;
  AlgoChoice choice{};
  size_t ws_bytes = 0;
};
/// Searches the legacy algorithms of `dir` on the real operands (the written one replaced by a
/// scratch) and keeps the fastest. Row-major geometry only (the descriptors are NCHW; conv.cu runs
/// a channels-last problem on row-major copies). `deterministic`: only algorithms whose
/// `determinism` is CUDNN_DETERMINISTIC; none found is the error of ember::detail::nondeterministic_message.
std::unique_ptr<const LegacyPlan> make_legacy_plan(cudnnHandle_t h, Direction dir, const Geometry& g, bool tf32,
                                                   bool deterministic, Device dev, const void* x, const void* w,
                                                   const void* y);
/// detail::set_conv_nondeterministic_only_for_testing: while set, every candidate engine and
/// algorithm counts as nondeterministic (the deterministic searches then find none).
bool nondeterministic_only_for_testing();
/// The legacy call of `dir` with the plan's descriptors and algorithm: out = op + beta * out.
void run_legacy(cudnnHandle_t h, Direction dir, const Geometry& g, const LegacyPlan& plan, const void* x, const void* w,
                const void* y, double beta, void* ws_ptr);

}  // namespace ember::kernels::cuda::conv_detail
