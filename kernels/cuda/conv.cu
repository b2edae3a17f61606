// CUDA 2-D convolution through cuDNN: forward, backward-data, backward-filter (NCHW or channels-last,
// groups, stride, padding, dilation; f32, f64, f16, bf16).
//
// Layout: the front (kernels/conv.cpp) hands over every operand dense in one layout, which it names:
// row-major, or channels-last (NHWC in memory). The graph-API tensors take that layout's strides,
// so cuDNN reads and writes NHWC directly (no transposes); the legacy fallback's descriptors are
// NCHW only, so a channels-last problem the graph API has no engine for is an error.
//
// Why it is shaped this way:
//  * Plans: the first call for a (device, direction, dtype, shapes, params, TF32 switch, pointer
//    alignment, beta) makes a plan and keeps it in a process-wide map; later calls of that key
//    only look it up and run it. The plan is a cuDNN graph-API execution plan (cudnn_graph.h): the
//    operation is built once, up to kMaxCandidates of the heuristics' engine configurations are
//    finalized and timed on the real inputs, and the fastest is kept; a call then costs one variant
//    pack and cudnnBackendExecute. The legacy calls (cudnnConvolution*), which cuDNN 9 implements
//    by building and finalizing a plan inside every call, cost 60-190 us of host time each on an
//    H200 and made a ResNet-18 step host-bound (docs/benchmarks.md); they remain the fallback for
//    a problem the graph API offers no engine for, with cudnnFind*AlgorithmEx's fastest algorithm
//    and descriptors kept in the plan. Either search writes into a scratch output, never into the
//    caller's tensor, because the filter gradient of a batch split into chunks accumulates
//    (beta = 1) into the real one. The scratch has the real output's address alignment, and the
//    alignment is part of the key (as in PyTorch): a kernel timed on 16-byte-aligned operands may
//    use vector loads that an offset view or a later batch chunk cannot satisfy.
//  * Workspace: an `ember::empty` u8 tensor on the device, i.e. the stream-aware caching
//    allocator; it is released when the call returns and reused in stream order. The search may
//    use up to kSearchWorkspaceCap bytes, taken from the driver (cudaMalloc) and given back when
//    the search ends, not from the cache: the search asks for the most any candidate wants, and a
//    cached block of that size would stay reserved for the rest of the run (ResNet-18 reserved
//    4036 MiB for 1057 MiB of live blocks on an H200 before this). If that much cannot be had,
//    even after the cache is emptied, it times only the candidates that fit (the legacy search:
//    with none; every direction has an algorithm needing no workspace).
//  * Precision: strict f32 (no TF32, unless cuda::set_allow_tf32(true), the same switch as the
//    cuBLAS GEMMs) so results agree with the CPU to f32 precision: graph engines with the
//    tensor-core note are left out, the legacy calls run CUDNN_FMA_MATH. f16/bf16 keep their
//    storage type and accumulate in f32 (compute type FLOAT, tensor cores allowed); f64 computes
//    in f64. No dtype takes engines noted as converting inputs down or reducing in lower precision.
//  * Bias: the output is filled with the bias and the convolution blends onto it (beta = 1), as
//    the CPU twin does, so that a kernel whose epilogue computes alpha * acc + beta * y in f32
//    rounds conv + bias once. Adding the bias afterwards rounded twice: the bias-free sum to the
//    storage type, then the total; the first error, up to u * |conv| (u the unit roundoff), is
//    unbounded relative to a result where the bias cancels most of the sum (an H200 run: 5 of 224
//    bf16 outputs 2 to 8 ulps from the CPU). cuDNN does not promise where its epilogue rounds, and
//    on an H200 with cuDNN 9.14 (every forward algorithm, both math types, f16 and bf16) all of
//    them rounded once except tensor-op IMPLICIT_PRECOMP_GEMM on the two larger shapes tried
//    (8x64x16x16 with 3x3, 4x16x24x24 with 5x5 filters), whose results equal the separate add's
//    bit for bit: it rounds the sum before blending. So the documented bound for f16/bf16 with a
//    bias is two roundings, |y - (conv + b)| <= u |conv| + u |y| (the GPU test derives its
//    tolerance from it: tests/support/low_precision_cases.h); without a bias it is one. (Apart
//    from the bias: WINOGRAD_NONFUSED with a 5x5 filter erred there by up to 1.7 u sum |x w| in
//    f16 (0.2 in bf16), beyond f32 accumulation; the search does not exclude it yet.)
//  * cuDNN's legacy descriptors take int sizes and strides, and its kernels index in 32 bits. A
//    batch whose input or output has 2^31 elements or more is split along N into chunks below
//    that (the per-sample sizes must fit); the filter gradient sums over the chunks with beta = 1.
//  * The bias fill is a small grid-stride kernel rather than cudnnAddTensor, whose support for
//    bf16 varies between cuDNN versions; it writes y once, and cuDNN reads it once (the traffic of
//    the separate add it replaces).
#include <algorithm>
#include <array>
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
#include <ember/core/error.h>
#include <ember/core/stream.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/cuda/cublas_handle.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/cuda/cudnn_graph.h>
#include <ember/kernels/cuda/cudnn_handle.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr size_t kSearchWorkspaceCap = size_t(1) << 30;  // bytes the algorithm search may use
constexpr int64_t kIntLimit = INT_MAX;  // cuDNN's 32-bit element counts
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

struct AlgoKey {
  int device;
  Direction dir;
  DType dtype;
  bool tf32;
  int align;  // alignment_of the three operands (see the top comment)
  bool accumulate;  // beta = 1 (blend onto the output) rather than 0: part of a graph-API plan
  bool channels_last;
  int64_t n, c, h, w, o, cg, kh, kw, sh, sw, ph, pw, dh, dw, g;
  auto tie() const {
    return std::tie(device, dir, dtype, tf32, align, accumulate, channels_last, n, c, h, w, o, cg, kh, kw, sh, sw, ph,
                    pw, dh, dw, g);
  }
  bool operator<(const AlgoKey& b) const { return tie() < b.tie(); }
};

struct AlgoChoice {
  int algo;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math;  // math type the algorithm was timed with
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

AlgoKey key_of(Device dev, Direction dir, const Geometry& g, bool tf32, int align, bool accumulate) {
  return AlgoKey{dev.index(), dir,          g.dtype,      tf32,      align,     accumulate,     g.channels_last,
                 g.n,         g.c,          g.h,          g.w,       g.o,       g.cg,           g.kh,
                 g.kw,        g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dilation_h, g.p.dilation_w,
                 g.p.groups};
}

/// Largest power of two up to kMaxAlign that divides every address in `ps`.
int alignment_of(std::initializer_list<const void*> ps) {
  uintptr_t a = kMaxAlign;
  for (const void* p : ps)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a >>= 1;
  return static_cast<int>(a);
}

/// A device scratch buffer of `bytes` whose address is congruent to `real` modulo kMaxAlign, so
/// the search times algorithms under the alignment the real output will have; `hold` owns it.
void* scratch_like(const void* real, size_t bytes, Device dev, Tensor& hold) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(real) % kMaxAlign;
  hold = empty({static_cast<int64_t>(bytes + kMaxAlign)},
               {.dtype = DType::u8, .device = dev});  // the allocator's blocks are aligned
  return static_cast<char*>(hold.data_ptr()) + mis;
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

/// A scratch stand-in for the tensor `dir` writes (y, x or w; see scratch_like), for the searches.
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

/// Math type requested before the search: see the top comment.
cudnnMathType_t requested_math(DType dt, bool tf32) {
  switch (dt) {
    case DType::f32:
      return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case DType::f16:
    case DType::bf16:
      return CUDNN_TENSOR_OP_MATH;
    default:
      return CUDNN_DEFAULT_MATH;
  }
}

/// The math type to run a found algorithm with. Strict f32 stays FMA whatever the search reports
/// (cuDNN may label an FMA algorithm DEFAULT_MATH, which on Ampere+ would permit TF32).
cudnnMathType_t run_math(DType dt, bool tf32, cudnnMathType_t found) {
  if (dt == DType::f32 && !tf32) return CUDNN_FMA_MATH;
  return found;
}

/// alpha/beta as cuDNN wants them: double for f64 data, float otherwise.
struct Scale {
  float f;
  double d;
  explicit Scale(double v) : f(static_cast<float>(v)), d(v) {}
  const void* ptr(DType dt) const {
    return dt == DType::f64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
  }
};

/// Descriptors of one problem. The convolution descriptor carries the requested math type.
struct Descs {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  Descs(const Geometry& g, cudnnMathType_t math) {
    x.set_4d(g.dtype, g.n, g.c, g.h, g.w);
    y.set_4d(g.dtype, g.n, g.o, g.ho, g.wo);
    w.set_4d(g.dtype, g.o, g.cg, g.kh, g.kw);
    conv.set_2d(g.p.pad_h, g.p.pad_w, g.p.stride_h, g.p.stride_w, g.p.dilation_h, g.p.dilation_w, g.p.groups,
                g.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT);
    conv.set_math_type(math);
    // cuDNN's own output-size rule must agree with the shapes the front end allocated.
    int n = 0, c = 0, h = 0, w_ = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &w_));
    EMBER_CHECK(n == g.n && c == g.o && h == g.ho && w_ == g.wo, "conv2d (cuda): cuDNN computes output (", n, ", ", c,
                ", ", h, ", ", w_, ") for ", geometry_str(g));
  }
};

/// Workspace bytes of `algo` for direction `dir` under the descriptors' current math type
/// (SIZE_MAX when cuDNN says the algorithm does not apply).
size_t workspace_size(cudnnHandle_t h, Direction dir, const Descs& d, int algo) {
  size_t bytes = 0;
  cudnnStatus_t st;
  switch (dir) {
    case Direction::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case Direction::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    default:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS ? bytes : SIZE_MAX;
}

int algo_count(Direction dir) {
  switch (dir) {
    case Direction::Forward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Direction::BackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    default:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
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

/// A u8 workspace on `dev` from the caching allocator (undefined tensor for 0 bytes).
Tensor make_workspace(size_t bytes, Device dev) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, {.dtype = DType::u8, .device = dev});
}

/// The search's workspace: the largest any candidate asks for, capped, straight from the driver
/// (see the top comment); none if it cannot be had. Freed by the destructor (cudaFree waits for
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

/// First (fastest) usable entry of a perf array sorted by time.
template <typename Perf> bool pick(const std::vector<Perf>& perfs, int returned, size_t ws_bytes, AlgoChoice& out) {
  for (int i = 0; i < returned; ++i) {
    const Perf& pf = perfs[static_cast<size_t>(i)];
    if (pf.status == CUDNN_STATUS_SUCCESS && pf.memory <= ws_bytes) {
      out = AlgoChoice{static_cast<int>(pf.algo), pf.mathType};
      return true;
    }
  }
  return false;
}

/// Times the algorithms of `dir` on the given operands (the output is a scratch tensor) and
/// returns the fastest. x/w/y are device pointers of the problem's three tensors.
AlgoChoice search(cudnnHandle_t h, Direction dir, const Geometry& g, const Descs& d, Device dev, const void* x,
                  const void* w, const void* y) {
  size_t want = 0;
  for (int a = 0; a < algo_count(dir); ++a) {
    const size_t s = workspace_size(h, dir, d, a);
    if (s != SIZE_MAX) want = std::max(want, s);
  }
  const SearchWorkspace ws(want, dev);
  void* ws_ptr = ws.ptr();
  const size_t ws_bytes = ws.bytes();
  const int count = algo_count(dir);
  int returned = 0;
  AlgoChoice choice{0, CUDNN_DEFAULT_MATH};
  bool ok = false;
  Tensor hold;  // the scratch output's memory
  void* scratch = scratch_output(dir, g, dev, x, w, y, hold);
  switch (dir) {
    case Direction::Forward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(count));
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), x, d.w.get(), w, d.conv.get(), d.y.get(),
                                                         scratch, count, &returned, perfs.data(), ws_ptr, ws_bytes));
      ok = pick(perfs, returned, ws_bytes, choice);
      break;
    }
    case Direction::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(count));
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), w, d.y.get(), y, d.conv.get(), d.x.get(),
                                                              scratch, count, &returned, perfs.data(), ws_ptr,
                                                              ws_bytes));
      ok = pick(perfs, returned, ws_bytes, choice);
      break;
    }
    case Direction::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(count));
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), x, d.y.get(), y, d.conv.get(), d.w.get(),
                                                                scratch, count, &returned, perfs.data(), ws_ptr,
                                                                ws_bytes));
      ok = pick(perfs, returned, ws_bytes, choice);
      break;
    }
  }
  EMBER_CHECK(ok, "conv2d (cuda): cuDNN found no ", dir_name(dir), " algorithm for ", geometry_str(g), " (", returned,
              " candidates, search workspace ", ws_bytes, " bytes)");
  return choice;
}

// ---- the graph API (preferred) ----

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
/// inputs down or reduce in reduced precision (f16/bf16 accumulate in f32, see the top comment).
bool numerics_allowed(const std::vector<cudnnBackendNumericalNote_t>& notes, DType dt, bool tf32) {
  for (cudnnBackendNumericalNote_t n : notes) {
    if (n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
    if (n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && (dt == DType::f64 || (dt == DType::f32 && !tf32))) return false;
  }
  return true;
}

/// Device milliseconds of one run of `fn` on `stream`, after one untimed run; negative when a run
/// fails (its status is then in `status`).
template <typename Fn> float time_on(cudaStream_t stream, Fn&& fn, cudnnStatus_t& status) {
  status = fn();
  if (status != CUDNN_STATUS_SUCCESS) return -1.0f;
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
  return status == CUDNN_STATUS_SUCCESS ? ms : -1.0f;
}

/// A timed, finalized execution plan for one key, or an empty one when the graph API has no
/// engine that fits (the caller then uses the legacy calls). Candidates: the heuristics' configs
/// (mode A's, then FALLBACK's) whose numerics suit the dtype, up to kMaxCandidates that finalize; each
/// runs on the real inputs into a scratch output (as the legacy search does) and the fastest wins.
graph::Descriptor tune_graph(cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g,
                             const graph::Graph& gr, bool tf32, Device dev, const void* x, const void* w, const void* y,
                             int64_t& ws_bytes) {
  std::vector<graph::Descriptor> plans;
  std::vector<int64_t> sizes;
  // Mode A's list is ordered by predicted speed but, for strict f32, may lack engines the legacy
  // search finds faster (e.g. a non-fused Winograd); FALLBACK's list adds them.
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (const graph::Descriptor& cfg : graph::heuristic_configs(gr.graph, mode)) {
      if (plans.size() == kMaxCandidates) break;
      if (!numerics_allowed(graph::numerical_notes(cfg), g.dtype, tf32)) continue;
      cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
      graph::Descriptor p = graph::plan(h, cfg, st);
      if (!p) continue;
      sizes.push_back(graph::plan_workspace(p));
      plans.push_back(std::move(p));
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
  }
  if (best == plans.size()) return {};
  ws_bytes = sizes[best];
  return std::move(plans[best]);
}

// ---- plans ----

/// What a call of one key needs, built on the key's first call and kept (see the top comment);
/// immutable afterwards, so calls on other threads share it. Either a graph-API execution plan, or
/// (when the graph API offers no engine) the legacy descriptors with the found algorithm.
struct Plan {
  graph::Graph graph;  // the operation and its descriptors, which the execution plan refers to
  graph::Descriptor exec;  // empty: legacy
  std::unique_ptr<const Descs> legacy;
  AlgoChoice choice{};
  size_t ws_bytes = 0;
};

/// The plan of `key`, made on its first call (outside the lock: two threads racing on one new key
/// both make one, harmlessly, and the first stored wins).
const Plan& plan_for(const AlgoKey& key, cudnnHandle_t h, cudaStream_t stream, Direction dir, const Geometry& g,
                     bool tf32, Device dev, const void* x, const void* w, const void* y) {
  PlanCache& c = plan_cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) return *it->second;
  }
  auto plan = std::make_unique<Plan>();
  plan->graph = build_graph(h, dir, g, key.align, key.accumulate);
  int64_t ws_bytes = 0;
  plan->exec = tune_graph(h, stream, dir, g, plan->graph, tf32, dev, x, w, y, ws_bytes);
  if (plan->exec) {
    plan->ws_bytes = static_cast<size_t>(ws_bytes);
  } else {
    // The legacy descriptors here are NCHW only.
    EMBER_CHECK(!g.channels_last, "conv2d (cuda): cuDNN's graph API offers no ", dir_name(dir),
                " engine for channels-last ", geometry_str(g), "; convert the operands with contiguous()");
    {
      const Descs search_descs(g, requested_math(g.dtype, tf32));
      plan->choice = search(h, dir, g, search_descs, dev, x, w, y);
    }
    plan->legacy = std::make_unique<const Descs>(g, run_math(g.dtype, tf32, plan->choice.math));
    plan->ws_bytes = workspace_size(h, dir, *plan->legacy, plan->choice.algo);
    EMBER_CHECK(plan->ws_bytes != SIZE_MAX, "conv2d (cuda): cuDNN ", dir_name(dir), " algorithm ", plan->choice.algo,
                " does not apply to ", geometry_str(g));
  }
  const bool graph = static_cast<bool>(plan->exec);
  std::lock_guard<std::mutex> lock(c.mu);
  const auto [it, inserted] = c.map.emplace(key, std::move(plan));
  if (inserted) ++(graph ? c.counts.graph : c.counts.legacy);
  return *it->second;
}

/// The legacy call of `dir` with the plan's descriptors and algorithm.
void run_legacy(cudnnHandle_t h, Direction dir, const Geometry& g, const Plan& plan, const void* x, const void* w,
                const void* y, double beta, void* ws_ptr) {
  const Descs& d = *plan.legacy;
  const Scale one(1.0), b(beta);
  const int algo = plan.choice.algo;
  switch (dir) {
    case Direction::Forward:
      CUDNN_CHECK(cudnnConvolutionForward(h, one.ptr(g.dtype), d.x.get(), x, d.w.get(), w, d.conv.get(),
                                          static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws_ptr, plan.ws_bytes,
                                          b.ptr(g.dtype), d.y.get(), const_cast<void*>(y)));
      break;
    case Direction::BackwardData:
      CUDNN_CHECK(cudnnConvolutionBackwardData(h, one.ptr(g.dtype), d.w.get(), w, d.y.get(), y, d.conv.get(),
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws_ptr, plan.ws_bytes,
                                               b.ptr(g.dtype), d.x.get(), const_cast<void*>(x)));
      break;
    case Direction::BackwardFilter:
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, one.ptr(g.dtype), d.x.get(), x, d.y.get(), y, d.conv.get(),
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws_ptr,
                                                 plan.ws_bytes, b.ptr(g.dtype), d.w.get(), const_cast<void*>(w)));
      break;
  }
}

/// Runs direction `dir` on one problem: looks up (or makes) its plan, then runs it with
/// out = op + beta * out (beta 0 or 1). x/w/y are the three tensors' device pointers; the one
/// written is y (forward), x (backward-data) or w (backward-filter).
void run(Direction dir, const Geometry& g, Device dev, cudaStream_t stream, const void* x, const void* w, const void* y,
         double beta) {
  EMBER_DEBUG_ASSERT(beta == 0.0 || beta == 1.0, "conv2d (cuda): beta ", beta, " is neither 0 nor 1");
  const bool tf32 = g.dtype == DType::f32 && allow_tf32();
  const CudnnHandleLease lease = cudnn_handle(dev, stream);
  cudnnHandle_t h = lease.get();
  const AlgoKey key = key_of(dev, dir, g, tf32, alignment_of({x, w, y}), beta != 0.0);
  const Plan& plan = plan_for(key, h, stream, dir, g, tf32, dev, x, w, y);
  Tensor ws = make_workspace(plan.ws_bytes, dev);
  void* ws_ptr = ws.defined() ? ws.data_ptr() : nullptr;
  if (plan.exec) {
    const std::array<void*, 3> ptrs{const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
    const cudnnStatus_t st = graph::execute(h, plan.exec, kUids, ptrs, ws_ptr);
    EMBER_CHECK(st == CUDNN_STATUS_SUCCESS, "conv2d (cuda): cuDNN ", dir_name(dir), " plan failed (",
                cudnnGetErrorString(st), ") for ", geometry_str(g));
  } else {
    run_legacy(h, dir, g, plan, x, w, y, beta, ws_ptr);
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

void register_conv() {
  conv2d_forward_table.set(DeviceType::CUDA, &conv2d_forward_cuda);
  conv2d_backward_input_table.set(DeviceType::CUDA, &conv2d_backward_input_cuda);
  conv2d_backward_weight_table.set(DeviceType::CUDA, &conv2d_backward_weight_cuda);
}

}  // namespace ember::kernels::cuda
