// CUDA 2-D convolution through cuDNN: forward, backward-data, backward-filter (NCHW or channels-last,
// groups, stride, padding, dilation; f32, f64, f16, bf16). This file keeps the plan cache, the
// bias fill and the entry points; conv_graph.cpp makes and runs graph-API plans, conv_legacy.cpp
// the legacy calls (conv_plan.h is what they share). The measurements behind the choices below are
// in docs/benchmarks.md ("cuDNN convolutions") and docs/amp.md.
//
// Layout: the front (kernels/conv.cpp) hands over every operand dense in one layout, which it names:
// row-major, or channels-last (NHWC in memory). The graph-API tensors take that layout's strides,
// so cuDNN reads and writes NHWC directly (no transposes). The legacy fallback runs a channels-last
// problem row-major, as the front does for f64: the operands cuDNN reads are copied to NCHW, the
// one it writes is computed in an NCHW buffer (a copy of it when beta = 1) and copied back. Not
// legacy descriptors in CUDNN_TENSOR_NHWC: cuDNN 9 runs its legacy calls on the engines its graph
// API offers, so a problem whose NHWC graph search found nothing usable (strict f32 without the
// tensor-core engines, no workspace under memory pressure, every candidate failing) could find
// nothing there for the same reason, while NCHW has FMA engines for every direction and dtype.
// The copies cost three transposes per call, on a path only taken when the graph API fails.
//
// Why it is shaped this way:
//  * Plans: the first call for a (device, stream, direction, dtype, shapes, params, TF32 switch,
//    determinism switch, pointer alignment, beta) makes a plan and keeps it in a process-wide map;
//    later calls of that key only look it up and run it. The stream is in the key because a
//    cuDNN handle is per (device, stream) (cudnn_handle.h): a plan is finalized with its stream's
//    handle, always runs with it, and runs only while its caller holds that handle's lease, so two
//    threads never execute one plan at once. cuDNN does not promise that every engine's plan is
//    safe to execute concurrently (PyTorch keeps its plans per thread for that reason); a
//    DataParallel replica or a CUDA-graph capture on a stream of its own searches its own plans
//    (the capture's in its warm-up steps, on that stream). The plan is a cuDNN graph-API execution
//    plan (cudnn_graph.h): the operation is built once, up to kMaxCandidates of the heuristics'
//    engine configurations are finalized and timed on the real inputs, and the fastest is kept; a
//    call then costs one variant pack and cudnnBackendExecute. cuDNN 9 implements the legacy calls
//    (cudnnConvolution*) by building and finalizing a plan inside every call, a host cost that made a ResNet-18 step
//    host-bound; they remain the fallback for a problem the graph API offers no engine for, with
//    cudnnFind*AlgorithmEx's fastest algorithm and descriptors kept in the plan. The outcome is
//    kept either way (graph plan or fallback), so a key is searched once. Either search
//    writes into a scratch output, never into the caller's tensor, because the filter gradient of
//    a batch split into chunks accumulates (beta = 1) into the real one. The scratch has the real
//    output's address alignment, and the alignment is part of the key (as in PyTorch): a kernel
//    timed on 16-byte-aligned operands may use vector loads that an offset view or a later batch
//    chunk cannot satisfy.
//  * Workspace: an `ember::empty` u8 tensor on the device, i.e. the stream-aware caching
//    allocator; it is released when the call returns and reused in stream order. The search may
//    use up to kSearchWorkspaceCap bytes, taken from the driver (cudaMalloc) and given back when
//    the search ends, not from the cache: the search asks for the most any candidate wants, and a
//    cached block of that size would stay reserved for the rest of the run. If that much cannot be
//    had, even after the cache is emptied, it times only the candidates that fit (the legacy
//    search: with none; every direction has an algorithm needing no workspace).
//  * Precision: strict f32 (no TF32, unless ember::set_allow_tf32(true), the same switch as the
//    cuBLAS GEMMs) so results agree with the CPU to f32 precision: graph engines with the
//    tensor-core note are left out, the legacy calls run CUDNN_FMA_MATH. f16/bf16 keep their
//    storage type and accumulate in f32 (compute type FLOAT, tensor cores allowed); f64 computes
//    in f64. No dtype takes engines noted as converting inputs down or reducing in lower precision.
//  * Bias: the output is filled with the bias and the convolution blends onto it (beta = 1), as
//    the CPU twin does, so that a kernel whose epilogue computes alpha * acc + beta * y in f32
//    rounds conv + bias once. Adding the bias afterwards rounds twice: the bias-free sum to the
//    storage type, then the total; the first error, up to u * |conv| (u the unit roundoff), is
//    unbounded relative to a result where the bias cancels most of the sum. cuDNN does not promise
//    where its epilogue rounds, and some kernels round the sum before blending, so the documented
//    bound for f16/bf16 with a bias is two roundings, |y - (conv + b)| <= u |conv| + u |y| (the GPU
//    test derives its tolerance from it: tests/support/low_precision_cases.h); without a bias it
//    is one. (docs/amp.md has what was seen, and an f16 Winograd algorithm the search does not
//    exclude yet.)
//  * Determinism (ember::set_deterministic, docs/determinism.md): while it is on, the graph search
//    leaves out engines noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC and the legacy search takes only
//    algorithms reported CUDNN_DETERMINISTIC; when neither has one, the call is an error naming the
//    direction and the problem. The switch is part of the key, so a plan chosen without it is never
//    reused with it. Deterministic candidates are not chosen by speed: timings vary from run to run,
//    and two deterministic engines give different (each reproducible) sums, so the graph plan is
//    the first candidate in the heuristics' order that runs, and the legacy one the usable
//    algorithm of lowest number. Another process on the same GPU model, cuDNN and free memory then
//    picks the same plan, and gives bitwise the same result.
//  * cuDNN's legacy descriptors take int sizes and strides, and its kernels index in 32 bits. A
//    batch whose input or output has 2^31 elements or more is split along N into chunks below
//    that (the per-sample sizes must fit); the filter gradient sums over the chunks with beta = 1.
//  * The bias fill is a small grid-stride kernel rather than cudnnAddTensor, whose support for
//    bf16 varies between cuDNN versions; it writes y once, and cuDNN reads it once (the traffic of
//    the separate add it replaces).
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/determinism.h>
#include <ember/core/error.h>
#include <ember/core/stream.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/cuda/conv_plan.h>
#include <ember/kernels/cuda/conv_testing.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/cuda/cudnn_handle.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/precision.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

using namespace conv_detail;

constexpr int64_t kIntLimit = INT_MAX;  // cuDNN's 32-bit element counts

struct AlgoKey {
  int device;
  uintptr_t stream;  // the plan is made with, and runs on, this stream's cuDNN handle (see the top comment)
  Direction dir;
  DType dtype;
  bool tf32;
  bool deterministic;  // ember::deterministic(): a plan searched without it must not serve a call with it
  int align;  // alignment_of the three operands (see the top comment)
  bool accumulate;  // beta = 1 (blend onto the output) rather than 0: part of a graph-API plan
  bool channels_last;
  int64_t n, c, h, w, o, cg, kh, kw, sh, sw, ph, pw, dh, dw, g;
  auto tie() const {
    return std::tie(device, stream, dir, dtype, tf32, deterministic, align, accumulate, channels_last, n, c, h, w, o,
                    cg, kh, kw, sh, sw, ph, pw, dh, dw, g);
  }
  bool operator<(const AlgoKey& b) const { return tie() < b.tie(); }
};

struct Plan;
struct PlanCache {
  std::mutex mu;
  std::map<AlgoKey, std::unique_ptr<const Plan>> map;  // nodes never move: plans stay where they are
  ConvPlanCounts counts;
};
PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache();  // leaked on purpose: no destruction-order hazards at exit
  return *c;
}

AlgoKey key_of(Device dev, cudaStream_t stream, Direction dir, const Geometry& g, bool tf32, bool deterministic,
               int align, bool accumulate) {
  return AlgoKey{dev.index(),
                 reinterpret_cast<uintptr_t>(stream),
                 dir,
                 g.dtype,
                 tf32,
                 deterministic,
                 align,
                 accumulate,
                 g.channels_last,
                 g.n,
                 g.c,
                 g.h,
                 g.w,
                 g.o,
                 g.cg,
                 g.kh,
                 g.kw,
                 g.p.stride_h,
                 g.p.stride_w,
                 g.p.pad_h,
                 g.p.pad_w,
                 g.p.dilation_h,
                 g.p.dilation_w,
                 g.p.groups};
}

/// A u8 workspace on `dev` from the caching allocator (undefined tensor for 0 bytes).
Tensor make_workspace(size_t bytes, Device dev) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, {.dtype = DType::u8, .device = dev});
}

// ---- plans ----

/// What a call of one key needs, built on the key's first call and kept (see the top comment);
/// immutable afterwards, so calls on other threads share it: a graph-API execution plan, or (when
/// the graph API offers no engine) the legacy descriptors with the found algorithm, NCHW ones for
/// a channels-last problem too (run on row-major copies: see the top comment).
struct Plan {
  GraphPlan graph;  // graph.exec empty: legacy
  std::unique_ptr<const LegacyPlan> legacy;
  bool via_row_major = false;  // legacy plan of a channels-last problem
  size_t ws_bytes() const { return graph.exec ? graph.ws_bytes : legacy->ws_bytes; }
};

/// detail::set_conv_graph_search_disabled_for_testing: new plans skip the graph API's search, as
/// if it had found no usable engine, so that tests reach the fallback on any GPU.
std::atomic<bool> g_graph_search_disabled{false};
/// detail::set_conv_nondeterministic_only_for_testing.
std::atomic<bool> g_nondeterministic_only{false};

/// g as the row-major problem the legacy descriptors describe.
Geometry row_major(Geometry g) {
  g.channels_last = false;
  return g;
}

/// The plan of `key`, made on its first call (outside the lock: two threads racing on one new key
/// both make one, harmlessly, and the first stored wins). A fallback is kept like a graph plan, so
/// a key whose graph search finds nothing is searched once; a search that throws keeps nothing.
const Plan& plan_for(const AlgoKey& key, cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g,
                     bool tf32, Device dev, const void* x, const void* w, const void* y) {
  PlanCache& c = plan_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) return *it->second;
    ++c.counts.searches;
  }
  // The searches allocate workspace and wait for their timings: not inside a CUDA graph capture.
  ember::detail::check_not_capturing("cuDNN's algorithm search (a first convolution of this shape)");
  auto plan = std::make_unique<Plan>();
  if (!g_graph_search_disabled.load(std::memory_order_relaxed)) {
    try {
      plan->graph =
          make_graph_plan(h, stream, dir, g, key.align, key.accumulate, tf32, key.deterministic, dev, x, w, y);
    } catch (const Error&) {
      // cuDNN declined to build this operation graph: plan->graph stays empty, the legacy calls take it
    }
  }
  if (!plan->graph.exec) {
    // NCHW descriptors; a channels-last problem runs on row-major copies (run_legacy_row_major).
    // The search times the algorithms on the operands' bytes read as NCHW: other values of the
    // same sizes and alignment, which is all the timing needs (the output is a scratch).
    plan->via_row_major = g.channels_last;
    plan->legacy = make_legacy_plan(h, dir, row_major(g), tf32, key.deterministic, dev, x, w, y);
  }
  const bool graph = static_cast<bool>(plan->graph.exec), via_row_major = plan->via_row_major;
  std::lock_guard<std::mutex> lock(c.mu);
  const auto [it, inserted] = c.map.emplace(key, std::move(plan));
  if (inserted) {
    ++(graph ? c.counts.graph : c.counts.legacy);
    if (via_row_major) ++c.counts.legacy_channels_last;
  }
  return *it->second;
}

/// The legacy call of a channels-last problem (see the top comment): the two operands `dir` reads
/// copied to row-major, the one it writes computed in a row-major buffer (a copy of it when beta
/// is 1, as it is blended onto) and copied back. Everything runs on the caller's current stream,
/// `stream` (launch_on made it so), and the buffers go back to the caching allocator in its order.
void run_legacy_row_major(cudnnHandle_t h, Direction dir, const Geometry& g, const LegacyPlan& plan, Device dev,
                          const void* x, const void* w, const void* y, double beta, void* ws_ptr) {
  const std::array<Shape, 3> shapes{Shape{g.n, g.c, g.h, g.w}, Shape{g.o, g.cg, g.kh, g.kw},
                                    Shape{g.n, g.o, g.ho, g.wo}};
  const std::array<const void*, 3> ptrs{x, w, y};
  const size_t out = dir == Direction::Forward ? 2 : dir == Direction::BackwardData ? 0 : 1;
  std::array<Tensor, 3> nhwc, rm;
  for (size_t i = 0; i < 3; ++i) {
    nhwc[i] = from_blob(const_cast<void*>(ptrs[i]), shapes[i], {.dtype = g.dtype, .device = dev},
                        strides_for(shapes[i], MemoryFormat::channels_last));
    rm[i] = i != out || beta != 0.0 ? copy_in_layout(nhwc[i], MemoryFormat::contiguous)
                                    : empty(shapes[i], {.dtype = g.dtype, .device = dev});
  }
  run_legacy(h, dir, row_major(g), plan, rm[0].data_ptr(), rm[1].data_ptr(), rm[2].data_ptr(), beta, ws_ptr);
  copy(nhwc[out], rm[out]);
}

/// Runs direction `dir` on one problem: looks up (or makes) its plan, then runs it with
/// out = op + beta * out (beta 0 or 1). x/w/y are the three tensors' device pointers; the one
/// written is y (forward), x (backward-data) or w (backward-filter).
void run(Direction dir, const Geometry& g, Device dev, cudaStream_t stream, const void* x, const void* w, const void* y,
         double beta) {
  EMBER_DEBUG_ASSERT(beta == 0.0 || beta == 1.0, "conv2d (cuda): beta ", beta, " is neither 0 nor 1");
  const bool tf32 = g.dtype == DType::f32 && ember::allow_tf32();
  const CudnnHandleLease lease = cudnn_handle(dev, stream);
  cudnnHandle_t h = lease.get();
  const AlgoKey key = key_of(dev, stream, dir, g, tf32, ember::deterministic(), alignment_of({x, w, y}), beta != 0.0);
  const Plan& plan = plan_for(key, h, stream, dir, g, tf32, dev, x, w, y);
  Tensor ws = make_workspace(plan.ws_bytes(), dev);
  void* ws_ptr = ws.defined() ? ws.data_ptr() : nullptr;
  if (plan.graph.exec) {
    const cudnnStatus_t st = run_graph(h, plan.graph, x, w, y, ws_ptr);
    EMBER_CHECK(st == CUDNN_STATUS_SUCCESS, "conv2d (cuda): cuDNN ", dir_name(dir), " plan failed (",
                cudnnGetErrorString(st), ") for ", geometry_str(g));
  } else if (plan.via_row_major) {
    run_legacy_row_major(h, dir, g, *plan.legacy, dev, x, w, y, beta, ws_ptr);
  } else {
    run_legacy(h, dir, g, *plan.legacy, x, w, y, beta, ws_ptr);
  }
  // `ws` goes back to the caching allocator here; the block is reused only in `stream`'s order.
}

// ---- bias ----

/// y[n, o, s] = bias[o] over y (n, o_count, s_count) in memory; fill_bias passes a channels-last y
/// as s_count 1 (its memory is (n * h * w, o_count)) (a copy: no rounding).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    fill_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t total, int64_t o_count, int64_t s_count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] = bias[(i / s_count) % o_count];
}

/// y (non-empty) = bias broadcast over dims 0, 2, 3; the convolution then blends onto it (see the
/// top comment). The caller's launch_on checks the launch.
void fill_bias(const Tensor& y, const Tensor& bias, bool channels_last, cudaStream_t stream) {
  const int64_t total = y.numel();
  const int64_t o = y.size(1);
  const int64_t s = channels_last ? 1 : y.size(2) * y.size(3);
  EMBER_DISPATCH_FLOAT(y.dtype(), "conv2d bias", [&]<typename T>() {
    fill_bias_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(static_cast<T*>(y.data_ptr()),
                                                                static_cast<const T*>(bias.data_ptr()), total, o, s);
  });
}

// ---- shape checks and batch chunking ----

// The fronts (kernels/conv.cpp, the only callers of the dispatch tables) check the operands'
// devices, dtypes and shapes and hand over contiguous tensors; here those are debug-only
// assertions (issue 11). What only the CUDA path limits (cuDNN's 32-bit sizes) stays an error.

void assert_operands(const char* op, MemoryFormat f, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const Tensor& first = *ts.begin()->second;
  for (const auto& [name, t] : ts) {
    EMBER_DEBUG_ASSERT(t->device() == first.device() && t->device().is_cuda(), op,
                       ": expected every operand on one CUDA device, got ", ts.begin()->first, " on ",
                       first.device().str(), " and ", name, " on ", t->device().str());
    EMBER_DEBUG_ASSERT(t->dtype() == first.dtype(), op, ": expected one dtype, got ", ts.begin()->first, " ",
                       dtype_name(first.dtype()), " and ", name, " ", dtype_name(t->dtype()));
    EMBER_DEBUG_ASSERT(t->dim() == 4 && (t->numel() == 0 || t->is_contiguous(f)), op, ": expected a dense 4-D ", name,
                       " laid out ", memory_format_name(f), ", got shape ", t->shape_str(), " strides ",
                       shape_str(t->strides()));
  }
}

/// Geometry from x (N, C, H, W), w (O, C/g, kh, kw), y (N, O, Ho, Wo) shapes.
Geometry geometry_of(DType dt, const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dParams& p, MemoryFormat f,
                     const char* op) {
  Geometry g{
      dt, xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], ys[2], ys[3], p, f == MemoryFormat::channels_last};
  EMBER_DEBUG_ASSERT(p.groups >= 1 && g.c == g.cg * p.groups && g.o % p.groups == 0 && ys[0] == xs[0] && ys[1] == ws[0],
                     op, ": inconsistent shapes x ", shape_str(xs), ", w ", shape_str(ws), ", y ", shape_str(ys),
                     " with groups ", p.groups);
  return g;
}

/// Samples per cuDNN call so that x and y of one call stay below 2^31 elements.
int64_t chunk_size(const Geometry& g) {
  const int64_t per_sample = std::max<int64_t>({g.c * g.h * g.w, g.o * g.ho * g.wo, 1});
  EMBER_CHECK(per_sample <= kIntLimit, "conv2d (cuda): one sample has ", per_sample,
              " elements, more than cuDNN's 32-bit limit, for ", geometry_str(g));
  return std::max<int64_t>(1, std::min<int64_t>(g.n, kIntLimit / per_sample));
}

const char* byte_ptr(const Tensor& t, int64_t elem_offset) {
  return static_cast<const char*>(t.data_ptr()) + elem_offset * static_cast<int64_t>(t.element_size());
}

/// Runs `dir` over the batch of x (N, C, H, W) and y (N, O, Ho, Wo) in chunks cuDNN takes (see
/// chunk_size); w (O, C/g, kh, kw) is whole in every call. beta is `beta_first` for the first chunk
/// (1 to blend the forward onto a bias-filled output) and `beta_after` for the others (1 to
/// accumulate the chunks into a weight gradient; the forward's chunks write disjoint outputs).
void run_chunked(Direction dir, const Geometry& full, Device dev, cudaStream_t stream, const Tensor& x, const Tensor& w,
                 const Tensor& y, double beta_first, double beta_after) {
  const int64_t chunk = chunk_size(full);
  for (int64_t n0 = 0; n0 < full.n; n0 += chunk) {
    Geometry g = full;
    g.n = std::min(chunk, full.n - n0);
    run(dir, g, dev, stream, byte_ptr(x, n0 * g.c * g.h * g.w), w.data_ptr(), byte_ptr(y, n0 * g.o * g.ho * g.wo),
        n0 == 0 ? beta_first : beta_after);
  }
}

// ---- the three entry points ----

/// out (N, O, Ho, Wo) = conv(x (N, C, H, W), w (O, C/g, kh, kw)) + bias (O).
void conv2d_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                         MemoryFormat f) {
  assert_operands("conv2d (cuda)", f, {{"x", &x}, {"w", &w}, {"out", &out}});
  const Geometry full = geometry_of(x.dtype(), x.shape(), w.shape(), out.shape(), p, f, "conv2d (cuda)");
  EMBER_DEBUG_ASSERT(
      !bias.defined() ||
          (bias.device() == out.device() && bias.dtype() == out.dtype() && bias.numel() == full.o && is_dense(bias)),
      "conv2d (cuda): expected a contiguous bias of ", full.o, " ", dtype_name(out.dtype()), " values on ",
      out.device().str(), ", got shape ", bias.shape_str(), " ", dtype_name(bias.dtype()), " on ", bias.device().str());
  launch_on(out, [&](cudaStream_t stream) {
    // out = bias, then out = conv + out inside cuDNN (beta = 1): one rounding where the kernel
    // blends in f32 (see the top comment). Every chunk blends onto its own bias-filled rows.
    if (bias.defined()) fill_bias(out, bias, full.channels_last, stream);
    if (x.numel() == 0 || w.numel() == 0) {  // C == 0: an empty sum (cuDNN rejects zero sizes)
      if (!bias.defined()) zero_fill(out, stream);
    } else {
      const double beta = bias.defined() ? 1.0 : 0.0;
      run_chunked(Direction::Forward, full, out.device(), stream, x, w, out, beta, beta);
    }
  });
}

/// grad_x (N, C, H, W) from grad_out (N, O, Ho, Wo) and w (O, C/g, kh, kw).
void conv2d_backward_input_cuda(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x,
                                MemoryFormat f) {
  assert_operands("conv2d_backward_input (cuda)", f, {{"grad_out", &grad_out}, {"w", &w}, {"grad_x", &grad_x}});
  const Geometry full =
      geometry_of(w.dtype(), grad_x.shape(), w.shape(), grad_out.shape(), p, f, "conv2d_backward_input (cuda)");
  launch_on(grad_x, [&](cudaStream_t stream) {
    if (grad_out.numel() == 0 || w.numel() == 0) return zero_fill(grad_x, stream);  // no output depends on x
    run_chunked(Direction::BackwardData, full, grad_x.device(), stream, grad_x, w, grad_out, 0.0, 0.0);
  });
}

/// grad_w (O, C/g, kh, kw) from grad_out (N, O, Ho, Wo) and x (N, C, H, W); chunks of the batch
/// accumulate into grad_w.
void conv2d_backward_weight_cuda(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, const Tensor& grad_w,
                                 MemoryFormat f) {
  assert_operands("conv2d_backward_weight (cuda)", f, {{"grad_out", &grad_out}, {"x", &x}, {"grad_w", &grad_w}});
  const Geometry full =
      geometry_of(x.dtype(), x.shape(), grad_w.shape(), grad_out.shape(), p, f, "conv2d_backward_weight (cuda)");
  launch_on(grad_w, [&](cudaStream_t stream) {
    if (grad_out.numel() == 0 || x.numel() == 0) return zero_fill(grad_w, stream);  // empty batch or planes
    run_chunked(Direction::BackwardFilter, full, grad_w.device(), stream, x, grad_w, grad_out, 0.0, 1.0);
  });
}

}  // namespace

ConvPlanCounts conv_plan_counts() {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.counts;
}

void detail::set_conv_graph_search_disabled_for_testing(bool disabled) {
  g_graph_search_disabled.store(disabled, std::memory_order_relaxed);
}

void detail::set_conv_nondeterministic_only_for_testing(bool on) {
  g_nondeterministic_only.store(on, std::memory_order_relaxed);
}

bool conv_detail::nondeterministic_only_for_testing() {
  return g_nondeterministic_only.load(std::memory_order_relaxed);
}

void register_conv() {
  conv2d_forward_table.set(DeviceType::CUDA, &conv2d_forward_cuda);
  conv2d_backward_input_table.set(DeviceType::CUDA, &conv2d_backward_input_cuda);
  conv2d_backward_weight_table.set(DeviceType::CUDA, &conv2d_backward_weight_cuda);
}

}  // namespace ember::kernels::cuda
