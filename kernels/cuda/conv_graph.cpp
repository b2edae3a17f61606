// The CUDA convolution's preferred path: cuDNN graph-API execution plans, one per problem, the
// fastest of the heuristics' engine configurations timed on the real operands (conv.cu's top
// comment says why); and what both paths share (conv_plan.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>
#include <utility>
#include <vector>

#include <ember/core/cuda_check.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/error.h>
#include <ember/core/stream.h>
#include <ember/kernels/cuda/conv_plan.h>

namespace ember::kernels::cuda::conv_detail {

/// Largest power of two up to kMaxAlign that divides every address in `ps`.
int alignment_of(std::initializer_list<const void*> ps) {
  uintptr_t a = kMaxAlign;
  for (const void* p : ps)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a >>= 1;
  return static_cast<int>(a);
}

std::string geometry_str(const Geometry& g) {
  std::ostringstream os;
  os << "x (" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << "), w (" << g.o << ", " << g.cg << ", " << g.kh
     << ", " << g.kw << "), y (" << g.n << ", " << g.o << ", " << g.ho << ", " << g.wo << "), stride (" << g.p.stride_h
     << ", " << g.p.stride_w << "), padding (" << g.p.pad_h << ", " << g.p.pad_w << "), dilation (" << g.p.dilation_h
     << ", " << g.p.dilation_w << "), groups " << g.p.groups << ", " << dtype_name(g.dtype)
     << (g.channels_last ? ", channels-last" : "");
  return os.str();
}

const char* dir_name(Direction dir) {
  switch (dir) {
    case Direction::Forward:
      return "forward";
    case Direction::BackwardData:
      return "backward-data";
    default:
      return "backward-filter";
  }
}

namespace {

/// A device scratch buffer of `bytes` whose address is congruent to `real` modulo kMaxAlign, so
/// the search times algorithms under the alignment the real output will have; `hold` owns it.
void* scratch_like(const void* real, size_t bytes, Device dev, Tensor& hold) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(real) % kMaxAlign;
  hold = empty({static_cast<int64_t>(bytes + kMaxAlign)},
               {.dtype = DType::u8, .device = dev});  // the allocator's blocks are aligned
  return static_cast<char*>(hold.data_ptr()) + mis;
}

}  // namespace

void* scratch_output(Direction dir, const Geometry& g, Device dev, const void* x, const void* w, const void* y,
                     Tensor& hold) {
  const size_t es = dtype_size(g.dtype);
  switch (dir) {
    case Direction::Forward:
      return scratch_like(y, static_cast<size_t>(g.n * g.o * g.ho * g.wo) * es, dev, hold);
    case Direction::BackwardData:
      return scratch_like(x, static_cast<size_t>(g.n * g.c * g.h * g.w) * es, dev, hold);
    default:
      return scratch_like(w, static_cast<size_t>(g.o * g.cg * g.kh * g.kw) * es, dev, hold);
  }
}

namespace {

constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;
constexpr std::array<int64_t, 3> kUids{kUidX, kUidW, kUidY};  // the order of the pointer arrays
constexpr size_t kMaxCandidates = 32;  // engine configurations timed per key

/// The operation of `dir` on one problem: tensors with the key's alignment, alpha 1, beta 0 or 1.
graph::Graph build_graph(cudnnHandle_t h, Direction dir, const Geometry& g, int align, bool accumulate) {
  std::vector<graph::Descriptor> parts;
  const MemoryFormat f = g.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  for (const auto& [uid, dims] : {std::pair<int64_t, Shape>{kUidX, {g.n, g.c, g.h, g.w}},
                                  std::pair<int64_t, Shape>{kUidW, {g.o, g.cg, g.kh, g.kw}},
                                  std::pair<int64_t, Shape>{kUidY, {g.n, g.o, g.ho, g.wo}}})
    parts.push_back(graph::tensor(uid, g.dtype, dims, strides_for(dims, f), align));
  const int64_t pad[2] = {g.p.pad_h, g.p.pad_w}, stride[2] = {g.p.stride_h, g.p.stride_w},
                dilation[2] = {g.p.dilation_h, g.p.dilation_w};
  const bool f64 = g.dtype == DType::f64;
  parts.push_back(graph::convolution(f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT, pad, stride, dilation));
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  const Names n = dir == Direction::Forward ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}
                  : dir == Direction::BackwardData
                      ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}
                      : Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  graph::Descriptor op(n.type);
  op.set(n.x, parts[0]);
  op.set(n.w, parts[1]);
  op.set(n.y, parts[2]);
  op.set(n.conv, parts[3]);
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  op.set(n.alpha, f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT, 1, f64 ? static_cast<const void*>(&alpha_d) : &alpha_f);
  op.set(n.beta, f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT, 1, f64 ? static_cast<const void*>(&beta_d) : &beta_f);
  op.finalize();
  return graph::single_operation_graph(h, std::move(op), std::move(parts));
}

/// Whether an engine's numerics suit the dtype: strict f32 (no TF32) and f64 exclude tensor-core
/// engines, as CUDNN_FMA_MATH does for the legacy calls; no dtype takes engines that convert the
/// inputs down or reduce in reduced precision (f16/bf16 accumulate in f32, see conv.cu's top comment).
/// Under the determinism switch, no engine noted NONDETERMINISTIC (cuDNN's own classification: e.g.
/// split-K reductions finished with atomics) is taken.
bool numerics_allowed(const std::vector<cudnnBackendNumericalNote_t>& notes, DType dt, bool tf32, bool deterministic) {
  if (deterministic && nondeterministic_only_for_testing()) return false;
  for (cudnnBackendNumericalNote_t n : notes) {
    if (deterministic && n == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
    if (n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
    if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && (dt == DType::f64 || (dt == DType::f32 && !tf32))) return false;
  }
  return true;
}

/// Device milliseconds of one run of `fn` on `stream`, after one untimed run; negative when a run
/// fails (its status is then in `status`). A failed candidate's launch error is cleared here, so
/// that the next launch check does not report it against an unrelated kernel.
template <typename Fn> float time_on(cudaStream_t stream, Fn&& fn, cudnnStatus_t& status) {
  ember::detail::check_not_capturing("cuDNN's engine benchmark (a first convolution of this shape)");
  status = fn();
  if (status != CUDNN_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    return -1.0f;
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, stream));
  status = fn();
  CUDA_CHECK(cudaEventRecord(e1, stream));
  CUDA_CHECK(cudaEventSynchronize(e1));
  ember::detail::note_host_synchronization();
  float ms = -1.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  if (status != CUDNN_STATUS_SUCCESS) (void)cudaGetLastError();
  return status == CUDNN_STATUS_SUCCESS ? ms : -1.0f;
}

/// A timed, finalized execution plan for one key, or an empty one when the graph API has no
/// engine that fits (the caller then uses the legacy calls). Candidates: the heuristics' configs
/// (mode A's, then FALLBACK's) whose numerics suit the dtype, up to kMaxCandidates that finalize; each
/// runs on the real inputs into a scratch output (as the legacy search does) and the fastest wins.
graph::Descriptor tune_graph(cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g,
                             const graph::Graph& gr, bool tf32, bool deterministic, Device dev, const void* x,
                             const void* w, const void* y, int64_t& ws_bytes, graph::Descriptor& config) {
  std::vector<graph::Descriptor> plans, configs;  // configs[i]: the engine configuration of plans[i]
  std::vector<int64_t> sizes;
  // Mode A's list is ordered by predicted speed but, for strict f32, may lack engines the legacy
  // search finds faster (e.g. a non-fused Winograd); FALLBACK's list adds them.
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (graph::Descriptor& cfg : graph::heuristic_configs(gr.graph, mode)) {
      if (plans.size() == kMaxCandidates) break;
      const auto notes = graph::numerical_notes(cfg);
      if (!notes || !numerics_allowed(*notes, g.dtype, tf32, deterministic)) continue;
      cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
      graph::Descriptor p = graph::plan(h, cfg, st);
      if (!p) continue;
      sizes.push_back(graph::plan_workspace(p));
      plans.push_back(std::move(p));
      configs.push_back(std::move(cfg));
    }
  }
  if (plans.empty()) return {};
  const SearchWorkspace ws(static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end())), dev);
  Tensor hold;  // the scratch output's memory
  std::array<void*, 3> ptrs{const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  ptrs[dir == Direction::Forward        ? 2
       : dir == Direction::BackwardData ? 0
                                        : 1] = scratch_output(dir, g, dev, x, w, y, hold);
  size_t best = plans.size();
  float best_ms = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (static_cast<size_t>(sizes[i]) > ws.bytes()) continue;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const float ms = time_on(
        stream, [&] { return graph::execute(h, plans[i], kUids, ptrs, ws.ptr()); }, st);
    if (ms >= 0 && (best == plans.size() || ms < best_ms)) best = i, best_ms = ms;
    // Deterministic: the first candidate in the heuristics' order that runs, not the fastest, so
    // that another process picks the same engine (timings vary from run to run; see conv.cu).
    if (deterministic && best != plans.size()) break;
  }
  if (best == plans.size()) return {};
  ws_bytes = sizes[best];
  config = std::move(configs[best]);
  return std::move(plans[best]);
}

}  // namespace

GraphPlan make_graph_plan(cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g, int align,
                          bool accumulate, bool tf32, bool deterministic, Device dev, const void* x, const void* w,
                          const void* y) {
  GraphPlan plan;
  plan.graph = build_graph(h, dir, g, align, accumulate);
  int64_t ws_bytes = 0;
  plan.exec = tune_graph(h, stream, dir, g, plan.graph, tf32, deterministic, dev, x, w, y, ws_bytes, plan.config);
  if (plan.exec) plan.ws_bytes = static_cast<size_t>(ws_bytes);
  return plan;
}

cudnnStatus_t run_graph(cudnnHandle_t h, const GraphPlan& plan, const void* x, const void* w, const void* y,
                        void* ws_ptr) {
  const std::array<void*, 3> ptrs{const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  return graph::execute(h, plan.exec, kUids, ptrs, ws_ptr);
}

}  // namespace ember::kernels::cuda::conv_detail
