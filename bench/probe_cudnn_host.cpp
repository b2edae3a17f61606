// probe_cudnn_host: microseconds of HOST time that one cuDNN 9 convolution call costs, for each
// way a framework can issue it. Self-contained (cudart + cuDNN only; not ember's library).
//
// Why: ember's ResNet-18 (CIFAR, batch 128, f32) training step on the GPU is host-bound. Each of
// its ~60 convolutions per step goes through cuDNN's legacy API with four descriptors built,
// queried and destroyed per call. This probe says what that costs and what the alternatives cost,
// so the fix can be picked on figures. f32, packed NCHW, FMA math (no TF32), three ResNet-18
// shapes, three directions (forward, backward-data, backward-filter), modes:
//   legacy-percall          ember's path: create+set 4 descriptors, set math type, GetOutputDim,
//                           GetWorkspaceSize for the found algorithm, the convolution, destroy
//   legacy-cached           descriptors built once per shape; per call only the convolution
//   backend-plan            graph API, one finalized execution plan and variant pack per shape;
//                           per call only cudnnBackendExecute
//   backend-plan-vp-percall the same plan, a variant pack created/finalized/destroyed per call
//                           (what a framework whose data pointers change must do)
//   *-alternating           the mode above, switching between shapes (a) and (b) every call
// Per call, median of --repeats loops of --iters calls with nothing synchronised inside a loop:
//   host    host clock around the loop (the device is idle when the loop starts)
//   stream  cudaEvents around that same loop: about max(host, GPU)
//   gpu     the same loop issued behind a host-function gate, so its kernels run back to back
// host > gpu means calls of that kind are host-bound. A short host-only table splits
// legacy-percall into its pieces. Exits 77 without a GPU.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// ---- error checks: every failure throws, the mode being run reports it and the probe goes on ----

struct ProbeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const char* file, int line, const char* call, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  throw ProbeError(std::string(base != nullptr ? base + 1 : file) + ":" + std::to_string(line) + ": " + call + ": " +
                   what);
}

std::string cudnn_error(cudnnStatus_t st) {
  std::string s = cudnnGetErrorString(st);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != '\0') s += std::string(" [") + detail + "]";
  return s;
}

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    const cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)

#define CUDNN_CHECK(call)                                                             \
  do {                                                                                \
    const cudnnStatus_t s_ = (call);                                                  \
    if (s_ != CUDNN_STATUS_SUCCESS) fail(__FILE__, __LINE__, #call, cudnn_error(s_)); \
  } while (0)

/// For destructors: report a failed release on stderr instead of throwing.
void report_release(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "probe_cudnn_host: %s failed: %s\n", what, cudnn_error(st).c_str());
}

// ---- problem shapes and operands ----

struct Shape {
  const char* name;
  int n, c, h, w;  // input
  int k, kh, kw;  // filter: k output channels of kh x kw
  int pad, stride;
  int ho() const { return (h + 2 * pad - kh) / stride + 1; }
  int wo() const { return (w + 2 * pad - kw) / stride + 1; }
  size_t x_count() const { return static_cast<size_t>(n) * c * h * w; }
  size_t w_count() const { return static_cast<size_t>(k) * c * kh * kw; }
  size_t y_count() const { return static_cast<size_t>(n) * k * ho() * wo(); }
};

// ResNet-18, CIFAR variant, batch 128: (a) a stage-1 3x3, (b) a stage-2 3x3, (c) the 1x1 stride-2
// downsample shortcut into stage 2.
constexpr Shape kShapes[] = {
    {"a", 128, 64, 32, 32, 64, 3, 3, 1, 1},
    {"b", 128, 128, 16, 16, 128, 3, 3, 1, 1},
    {"c", 128, 64, 32, 32, 128, 1, 1, 0, 2},
};
constexpr int kShapeCount = 3;

enum class Dir { Forward, BackwardData, BackwardFilter };
constexpr Dir kDirs[] = {Dir::Forward, Dir::BackwardData, Dir::BackwardFilter};

const char* dir_name(Dir d) {
  switch (d) {
    case Dir::Forward:
      return "forward";
    case Dir::BackwardData:
      return "backward-data";
    default:
      return "backward-filter";
  }
}

struct CudaFree {
  void operator()(void* p) const { (void)cudaFree(p); }
};
using DevPtr = std::unique_ptr<void, CudaFree>;

DevPtr dev_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  return DevPtr(p);
}

/// One shape's device tensors; y doubles as dy for the backward directions.
struct Operands {
  DevPtr x, w, y, dx, dw;
};

/// The three tensors of one direction in cuDNN's roles (x-like, w-like, y-like) and the one written.
struct Roles {
  void* x;
  void* w;
  void* y;
  void* out;
  size_t out_count;
};

Roles roles_of(const Operands& o, const Shape& s, Dir d) {
  switch (d) {
    case Dir::Forward:
      return {o.x.get(), o.w.get(), o.y.get(), o.y.get(), s.y_count()};
    case Dir::BackwardData:
      return {o.dx.get(), o.w.get(), o.y.get(), o.dx.get(), s.x_count()};
    default:
      return {o.x.get(), o.dw.get(), o.y.get(), o.dw.get(), s.w_count()};
  }
}

void fill_random(void* dst, size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> host(count);
  for (float& v : host) v = u(rng);
  CUDA_CHECK(cudaMemcpy(dst, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
}

Operands make_operands(const Shape& s, std::mt19937& rng) {
  Operands o{dev_alloc(s.x_count() * 4), dev_alloc(s.w_count() * 4), dev_alloc(s.y_count() * 4),
             dev_alloc(s.x_count() * 4), dev_alloc(s.w_count() * 4)};
  fill_random(o.x.get(), s.x_count(), rng);
  fill_random(o.w.get(), s.w_count(), rng);
  fill_random(o.y.get(), s.y_count(), rng);
  CUDA_CHECK(cudaMemset(o.dx.get(), 0, s.x_count() * 4));
  CUDA_CHECK(cudaMemset(o.dw.get(), 0, s.w_count() * 4));
  return o;
}

// ---- the probe's context and timing harness ----

struct Ctx {
  cudnnHandle_t h = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* ws = nullptr;  // one workspace for every call (and the legacy algorithm search)
  size_t ws_cap = 0;
  int iters = 100, repeats = 5, warmup = 5;
  bool gate = true;  // measure the gpu column; turned off after repeated gate timeouts
  int gate_timeouts = 0;
};

struct Figures {
  double host_us = 0, stream_us = 0, gpu_us = NAN;
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double us_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

double event_us(const Ctx& ctx) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ctx.start, ctx.stop));
  return 1000.0 * ms;
}

/// Holds the stream (from a host function) until the issuing thread opens it, so the work queued
/// behind it then runs back to back. Gives up after 2 s in case a call waits on the stream itself.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
};

void CUDART_CB hold_stream(void* arg) {
  auto* g = static_cast<Gate*>(arg);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!g->open.load(std::memory_order_acquire)) {
    if (Clock::now() > deadline) {
      g->timed_out.store(true);
      return;
    }
    std::this_thread::yield();
  }
}

/// Opens the gate and drains the stream on every exit, exceptions included.
struct GateRelease {
  Gate& gate;
  cudaStream_t stream;
  ~GateRelease() {
    gate.open.store(true, std::memory_order_release);
    (void)cudaStreamSynchronize(stream);
  }
};

/// One loop of `call` behind a gate; its GPU time per call, or nothing when the gate timed out.
template <class F> std::optional<double> gated_loop(Ctx& ctx, F& call) {
  CUDA_CHECK(cudaDeviceSynchronize());
  Gate gate;
  GateRelease release{gate, ctx.stream};
  CUDA_CHECK(cudaLaunchHostFunc(ctx.stream, hold_stream, &gate));
  CUDA_CHECK(cudaEventRecord(ctx.start, ctx.stream));
  for (int i = 0; i < ctx.iters; ++i) call(i);
  CUDA_CHECK(cudaEventRecord(ctx.stop, ctx.stream));
  gate.open.store(true, std::memory_order_release);
  CUDA_CHECK(cudaEventSynchronize(ctx.stop));
  if (gate.timed_out.load()) {
    if (++ctx.gate_timeouts >= 3) ctx.gate = false;
    return std::nullopt;
  }
  return event_us(ctx) / ctx.iters;
}

/// The three figures of `call(i)` (i = index within the loop), medians over ctx.repeats loops.
template <class F> Figures measure(Ctx& ctx, F&& call) {
  for (int i = 0; i < ctx.warmup; ++i) call(i);
  std::vector<double> host, stream, gpu;
  for (int r = 0; r < ctx.repeats; ++r) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaEventRecord(ctx.start, ctx.stream));
    const auto t0 = Clock::now();
    for (int i = 0; i < ctx.iters; ++i) call(i);
    const auto t1 = Clock::now();
    CUDA_CHECK(cudaEventRecord(ctx.stop, ctx.stream));
    CUDA_CHECK(cudaEventSynchronize(ctx.stop));
    host.push_back(us_since(t0, t1) / ctx.iters);
    stream.push_back(event_us(ctx) / ctx.iters);
  }
  for (int r = 0; ctx.gate && r < ctx.repeats; ++r) {
    const std::optional<double> g = gated_loop(ctx, call);
    if (!g) break;
    gpu.push_back(*g);
  }
  return Figures{median(host), median(stream), median(gpu)};
}

/// Host microseconds per call of a loop with no GPU work (median over ctx.repeats loops).
template <class F> double time_host(const Ctx& ctx, F&& call) {
  for (int i = 0; i < ctx.warmup; ++i) call();
  std::vector<double> v;
  for (int r = 0; r < ctx.repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < ctx.iters; ++i) call();
    v.push_back(us_since(t0, Clock::now()) / ctx.iters);
  }
  return median(v);
}

void print_table_header() {
  std::printf("\n%-16s %-5s %-36s %14s %14s %14s\n", "direction", "shape", "mode", "host us/call", "stream us/call",
              "gpu us/call");
}

void print_row(Dir d, const char* shape, const char* mode, const Figures& f) {
  char gpu[32];
  if (std::isnan(f.gpu_us)) std::snprintf(gpu, sizeof gpu, "n/a");
  else std::snprintf(gpu, sizeof gpu, "%.1f", f.gpu_us);
  std::printf("%-16s %-5s %-36s %14.2f %14.1f %14s%s\n", dir_name(d), shape, mode, f.host_us, f.stream_us, gpu,
              !std::isnan(f.gpu_us) && f.host_us > f.gpu_us ? "   host-bound" : "");
  std::fflush(stdout);
}

/// Measures one mode and prints its row; a failure is printed and the probe goes on.
template <class F> void run_mode(Ctx& ctx, Dir d, const char* shape, const char* mode, F&& call) {
  try {
    print_row(d, shape, mode, measure(ctx, call));
  } catch (const std::exception& e) {
    std::printf("%-16s %-5s mode %s failed: %s\n", dir_name(d), shape, mode, e.what());
    std::fflush(stdout);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();  // clear a non-sticky error so later modes can run
  }
}

// ---- legacy API ----

/// The four legacy descriptors of one problem, set as ember sets them (kernels/cuda/conv.cu,
/// cudnn_handle.cpp): packed NCHW tensors via the Ex setter, an NCHW filter, a 2-D
/// cross-correlation with f32 compute, group count 1 and FMA math.
struct LegacyDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  explicit LegacyDescs(const Shape& s) {
    try {
      build(s);
    } catch (...) {
      release();
      throw;
    }
  }
  ~LegacyDescs() { release(); }
  LegacyDescs(const LegacyDescs&) = delete;
  LegacyDescs& operator=(const LegacyDescs&) = delete;

  /// cuDNN's output size must match the shape's (ember checks this on every call).
  void check_output_dim(const Shape& s) const {
    int n = 0, c = 0, h = 0, w_ = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &w_));
    if (n != s.n || c != s.k || h != s.ho() || w_ != s.wo())
      throw ProbeError(std::string("cuDNN output size differs for shape ") + s.name);
  }

 private:
  static void set_packed(cudnnTensorDescriptor_t d, int n, int c, int h, int w) {
    CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(d, CUDNN_DATA_FLOAT, n, c, h, w, c * h * w, h * w, w, 1));
  }
  void build(const Shape& s) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    set_packed(x, s.n, s.c, s.h, s.w);
    set_packed(y, s.n, s.k, s.ho(), s.wo());
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.k, s.c, s.kh, s.kw));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, 1));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
  }
  void release() noexcept {
    if (x != nullptr) report_release(cudnnDestroyTensorDescriptor(x), "cudnnDestroyTensorDescriptor");
    if (y != nullptr) report_release(cudnnDestroyTensorDescriptor(y), "cudnnDestroyTensorDescriptor");
    if (w != nullptr) report_release(cudnnDestroyFilterDescriptor(w), "cudnnDestroyFilterDescriptor");
    if (conv != nullptr) report_release(cudnnDestroyConvolutionDescriptor(conv), "cudnnDestroyConvolutionDescriptor");
    x = y = nullptr;
    w = nullptr;
    conv = nullptr;
  }
};

size_t legacy_workspace(cudnnHandle_t h, Dir dir, const LegacyDescs& d, int algo) {
  size_t bytes = 0;
  switch (dir) {
    case Dir::Forward:
      CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                          static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
      break;
    case Dir::BackwardData:
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes));
      break;
    case Dir::BackwardFilter:
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
      break;
  }
  return bytes;
}

/// One convolution call: out = 1 * conv + 0 * out.
void legacy_exec(const Ctx& ctx, Dir dir, const LegacyDescs& d, const Roles& r, int algo, size_t ws_bytes) {
  const float one = 1.0f, zero = 0.0f;
  switch (dir) {
    case Dir::Forward:
      CUDNN_CHECK(cudnnConvolutionForward(ctx.h, &one, d.x, r.x, d.w, r.w, d.conv,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(algo), ctx.ws, ws_bytes, &zero, d.y,
                                          r.y));
      break;
    case Dir::BackwardData:
      CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.h, &one, d.w, r.w, d.y, r.y, d.conv,
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ctx.ws, ws_bytes,
                                               &zero, d.x, r.x));
      break;
    case Dir::BackwardFilter:
      CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.h, &one, d.x, r.x, d.y, r.y, d.conv,
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ctx.ws, ws_bytes,
                                                 &zero, d.w, r.w));
      break;
  }
}

/// ember's per-call path (conv.cu run()), less its algorithm-cache lookup and caching-allocator
/// workspace: descriptors built, checked, math type set again, workspace queried, call, destroy.
void legacy_percall(const Ctx& ctx, Dir dir, const Shape& s, const Roles& r, int algo) {
  const LegacyDescs d(s);
  d.check_output_dim(s);
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH));  // ember's run_math for strict f32
  const size_t ws_bytes = legacy_workspace(ctx.h, dir, d, algo);
  if (ws_bytes > ctx.ws_cap) throw ProbeError("workspace larger than the preallocated buffer");
  legacy_exec(ctx, dir, d, r, algo, ws_bytes);
}

struct LegacyAlgo {
  int algo = -1;
  size_t ws_bytes = 0;
  float find_ms = 0;  // the algorithm's time as cudnnFind*AlgorithmEx measured it
};

const char* legacy_algo_name(Dir dir, int algo) {
  static const char* const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                    "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char* const bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const bwd_filter[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                           "FFT_TILING"};
  switch (dir) {
    case Dir::Forward:
      return algo >= 0 && algo < 8 ? fwd[algo] : "?";
    case Dir::BackwardData:
      return algo >= 0 && algo < 6 ? bwd_data[algo] : "?";
    default:
      return algo >= 0 && algo < 7 ? bwd_filter[algo] : "?";
  }
}

/// The fastest successful entry of a perf array (cuDNN sorts them by time).
template <class Perf> bool pick_fastest(const Perf* perfs, int returned, size_t cap, LegacyAlgo& out) {
  for (int i = 0; i < returned; ++i) {
    if (perfs[i].status == CUDNN_STATUS_SUCCESS && perfs[i].memory <= cap) {
      out.algo = static_cast<int>(perfs[i].algo);
      out.find_ms = perfs[i].time;
      return true;
    }
  }
  return false;
}

/// cudnnFind*AlgorithmEx once, as ember does per shape; writes the direction's output tensor.
LegacyAlgo find_algo(const Ctx& ctx, Dir dir, const LegacyDescs& d, const Roles& r) {
  LegacyAlgo out;
  int returned = 0;
  bool ok = false;
  switch (dir) {
    case Dir::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> p{};
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(ctx.h, d.x, r.x, d.w, r.w, d.conv, d.y, r.y,
                                                         static_cast<int>(p.size()), &returned, p.data(), ctx.ws,
                                                         ctx.ws_cap));
      ok = pick_fastest(p.data(), returned, ctx.ws_cap, out);
      break;
    }
    case Dir::BackwardData: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> p{};
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(ctx.h, d.w, r.w, d.y, r.y, d.conv, d.x, r.x,
                                                              static_cast<int>(p.size()), &returned, p.data(), ctx.ws,
                                                              ctx.ws_cap));
      ok = pick_fastest(p.data(), returned, ctx.ws_cap, out);
      break;
    }
    case Dir::BackwardFilter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> p{};
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx.h, d.x, r.x, d.y, r.y, d.conv, d.w, r.w,
                                                                static_cast<int>(p.size()), &returned, p.data(), ctx.ws,
                                                                ctx.ws_cap));
      ok = pick_fastest(p.data(), returned, ctx.ws_cap, out);
      break;
    }
  }
  if (!ok) throw ProbeError("cudnnFind found no usable algorithm (" + std::to_string(returned) + " candidates)");
  out.ws_bytes = legacy_workspace(ctx.h, dir, d, out.algo);
  if (out.ws_bytes > ctx.ws_cap) throw ProbeError("the found algorithm's workspace exceeds the buffer");
  return out;
}

// ---- backend (graph) API ----

/// Owner of one cudnnBackendDescriptor_t.
class BDesc {
 public:
  BDesc() = default;
  explicit BDesc(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~BDesc() {
    if (d_ != nullptr) report_release(cudnnBackendDestroyDescriptor(d_), "cudnnBackendDestroyDescriptor");
  }
  BDesc(BDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  BDesc& operator=(BDesc&& o) noexcept {
    BDesc tmp(std::move(o));
    std::swap(d_, tmp.d_);
    return *this;
  }
  BDesc(const BDesc&) = delete;
  BDesc& operator=(const BDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* ptr() { return &d_; }  // for array-of-one get/set attribute calls
  explicit operator bool() const { return d_ != nullptr; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// Sets a descriptor-valued attribute.
void set_desc_attr(const BDesc& d, cudnnBackendAttributeName_t name, const BDesc& value) {
  cudnnBackendDescriptor_t v = value.get();
  CUDNN_CHECK(cudnnBackendSetAttribute(d.get(), name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
}

constexpr int64_t kByteAlignment = 16;  // cudaMalloc'ed buffers are 256-byte aligned

BDesc backend_tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {c * h * w, h * w, w, 1};
  const cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  BDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  CUDNN_CHECK(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype));
  CUDNN_CHECK(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  CUDNN_CHECK(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  CUDNN_CHECK(cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CUDNN_CHECK(
      cudnnBackendSetAttribute(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kByteAlignment));
  CUDNN_CHECK(cudnnBackendFinalize(t.get()));
  return t;
}

BDesc backend_conv(const Shape& s) {
  const int64_t spatial = 2;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dilation[2] = {1, 1}, stride[2] = {s.stride, s.stride}, pad[2] = {s.pad, s.pad};
  BDesc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CUDNN_CHECK(
      cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation));
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride));
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CUDNN_CHECK(cudnnBackendSetAttribute(c.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  CUDNN_CHECK(cudnnBackendFinalize(c.get()));
  return c;
}

/// The operation descriptor type and attribute names of one direction, in (x, w, y) roles.
struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OpAttrs op_attrs(Dir d) {
  switch (d) {
    case Dir::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case Dir::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    default:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
}

/// What an engine config's engine is: its global index and numerical notes (best effort: a
/// failed query leaves the defaults, as the notes only order the candidates).
struct EngineInfo {
  int64_t index = -1;
  bool tensor_core = false;  // for f32 data this means TF32 math
  std::string notes;
};

EngineInfo engine_info(const BDesc& cfg) {
  EngineInfo info;
  try {
    BDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                         engine.ptr()));
    CUDNN_CHECK(
        cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    static const char* const names[] = {"tensor-core",      "down-convert", "reduced-precision", "fft",
                                        "nondeterministic", "winograd",     "winograd-4x4",      "winograd-6x6",
                                        "winograd-13x13",   "strict-nan"};
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
      const int note = static_cast<int>(notes[i]);
      if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) info.tensor_core = true;
      if (!info.notes.empty()) info.notes += ",";
      info.notes += note >= 0 && note < 10 ? names[note] : std::to_string(note);
    }
  } catch (const ProbeError&) {
    if (info.notes.empty()) info.notes = "?";
  }
  if (info.notes.empty()) info.notes = "none";
  return info;
}

/// A finalized variant pack binding the uids 1, 2, 3 (x, w, y roles) to `ptrs`.
BDesc variant_pack(const std::array<void*, 3>& ptrs, void* ws) {
  static const int64_t uids[3] = {1, 2, 3};
  BDesc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CUDNN_CHECK(
      cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs.data()));
  CUDNN_CHECK(cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
  CUDNN_CHECK(cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  CUDNN_CHECK(cudnnBackendFinalize(vp.get()));
  return vp;
}

/// One direction of one shape as a graph-API execution plan, plus a variant pack on fixed pointers.
struct BackendConv {
  std::vector<BDesc> keep;  // tensors, convolution, operation, graph, heuristics, engine configs
  BDesc plan, vp;
  std::array<void*, 3> ptrs{};
  int64_t ws_bytes = 0;
  EngineInfo engine;
  const char* heur_mode = "";
  size_t cfg_rank = 0, cfg_count = 0;
  double build_ms = 0;
};

/// The heuristics' engine configs for `graph`, best first (the heuristics descriptor goes to `keep`).
std::vector<BDesc> heuristic_configs(const BDesc& graph, cudnnBackendHeurMode_t mode, std::vector<BDesc>& keep) {
  BDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set_desc_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  CUDNN_CHECK(cudnnBackendSetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CUDNN_CHECK(cudnnBackendFinalize(heur.get()));
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr));
  std::vector<BDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         count, &got, raw.data()));
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  keep.push_back(std::move(heur));
  return cfgs;
}

/// An execution plan for `cfg`, or an empty descriptor (and `why`) when cuDNN declines it.
BDesc try_plan(cudnnHandle_t h, const BDesc& cfg, std::string& why) {
  BDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  CUDNN_CHECK(cudnnBackendSetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  set_desc_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  const cudnnStatus_t st = cudnnBackendFinalize(plan.get());
  if (st != CUDNN_STATUS_SUCCESS) {
    why = "plan finalize: " + cudnn_error(st);
    return BDesc();
  }
  return plan;
}

/// Picks the first heuristic config (mode A, then FALLBACK) that finalizes into a plan whose
/// workspace fits, preferring engines without the tensor-core note (no TF32, like FMA math).
void choose_plan(const Ctx& ctx, const BDesc& graph, BackendConv& bc) {
  std::string why = "the heuristics returned no engine config";
  const std::pair<cudnnBackendHeurMode_t, const char*> modes[] = {{CUDNN_HEUR_MODE_A, "A"},
                                                                  {CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}};
  for (const auto& [mode, mode_name] : modes) {
    std::vector<BDesc> cfgs = heuristic_configs(graph, mode, bc.keep);
    std::vector<EngineInfo> infos;
    for (const BDesc& c : cfgs) infos.push_back(engine_info(c));
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < cfgs.size(); ++i) {
        if (infos[i].tensor_core != (pass == 1)) continue;
        BDesc plan = try_plan(ctx.h, cfgs[i], why);
        if (!plan) continue;
        int64_t ws = 0, n = 0;
        CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                             &n, &ws));
        if (ws < 0 || static_cast<size_t>(ws) > ctx.ws_cap) {
          why = "plan workspace " + std::to_string(ws) + " bytes exceeds the buffer";
          continue;
        }
        bc.plan = std::move(plan);
        bc.ws_bytes = ws;
        bc.engine = infos[i];
        bc.heur_mode = mode_name;
        bc.cfg_rank = i;
        bc.cfg_count = cfgs.size();
        for (BDesc& c : cfgs) bc.keep.push_back(std::move(c));
        return;
      }
    }
  }
  throw ProbeError("no engine config gave a usable plan; last: " + why);
}

std::unique_ptr<BackendConv> build_backend(const Ctx& ctx, Dir dir, const Shape& s, const Roles& r) {
  const auto t0 = Clock::now();
  auto bc = std::make_unique<BackendConv>();
  const OpAttrs a = op_attrs(dir);
  BDesc x = backend_tensor(1, s.n, s.c, s.h, s.w);
  BDesc w = backend_tensor(2, s.k, s.c, s.kh, s.kw);
  BDesc y = backend_tensor(3, s.n, s.k, s.ho(), s.wo());
  BDesc conv = backend_conv(s);
  const float alpha = 1.0f, beta = 0.0f;
  BDesc op(a.type);
  set_desc_attr(op, a.x, x);
  set_desc_attr(op, a.w, w);
  set_desc_attr(op, a.y, y);
  set_desc_attr(op, a.conv, conv);
  CUDNN_CHECK(cudnnBackendSetAttribute(op.get(), a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
  CUDNN_CHECK(cudnnBackendSetAttribute(op.get(), a.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  CUDNN_CHECK(cudnnBackendFinalize(op.get()));
  BDesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set_desc_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  CUDNN_CHECK(cudnnBackendSetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &ctx.h));
  CUDNN_CHECK(cudnnBackendFinalize(graph.get()));
  choose_plan(ctx, graph, *bc);
  bc->ptrs = {r.x, r.w, r.y};
  bc->vp = variant_pack(bc->ptrs, ctx.ws);
  for (BDesc* d : {&x, &w, &y, &conv, &op, &graph}) bc->keep.push_back(std::move(*d));
  bc->build_ms = us_since(t0, Clock::now()) / 1000.0;
  return bc;
}

void backend_exec(const Ctx& ctx, const BackendConv& bc) {
  CUDNN_CHECK(cudnnBackendExecute(ctx.h, bc.plan.get(), bc.vp.get()));
}

void backend_exec_new_pack(const Ctx& ctx, const BackendConv& bc) {
  const BDesc vp = variant_pack(bc.ptrs, ctx.ws);
  CUDNN_CHECK(cudnnBackendExecute(ctx.h, bc.plan.get(), vp.get()));
}

// ---- setup, checks and the tables ----

/// Everything prepared for one (direction, shape).
struct Entry {
  Roles roles{};
  std::optional<LegacyAlgo> legacy;
  std::unique_ptr<BackendConv> backend;
};

struct Probe {
  Ctx ctx;
  std::vector<Operands> operands;
  std::unique_ptr<LegacyDescs> descs[kShapeCount];  // legacy-cached's descriptors, one set per shape
  Entry entries[3][kShapeCount];  // [direction][shape]

  Probe() = default;
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  /// Descriptors and plans go before the handle, stream and events they were made with.
  ~Probe() {
    for (auto& row : entries)
      for (Entry& e : row) e.backend.reset();
    for (auto& d : descs) d.reset();
    if (ctx.h != nullptr) report_release(cudnnDestroy(ctx.h), "cudnnDestroy");
    if (ctx.start != nullptr) (void)cudaEventDestroy(ctx.start);
    if (ctx.stop != nullptr) (void)cudaEventDestroy(ctx.stop);
    if (ctx.stream != nullptr) (void)cudaStreamDestroy(ctx.stream);
  }

  Entry& at(Dir d, int s) { return entries[static_cast<int>(d)][s]; }
};

void setup(Probe& p) {
  std::printf("\nsetup (legacy: cudnnFind*AlgorithmEx, fastest successful; backend: heuristics mode A)\n");
  for (int s = 0; s < kShapeCount; ++s) {
    try {
      p.descs[s] = std::make_unique<LegacyDescs>(kShapes[s]);
      p.descs[s]->check_output_dim(kShapes[s]);
    } catch (const std::exception& e) {
      p.descs[s].reset();
      std::printf("  shape %s: legacy descriptors failed: %s\n", kShapes[s].name, e.what());
    }
  }
  for (Dir d : kDirs) {
    for (int s = 0; s < kShapeCount; ++s) {
      Entry& e = p.at(d, s);
      e.roles = roles_of(p.operands[static_cast<size_t>(s)], kShapes[s], d);
      std::printf("  %-16s %s: ", dir_name(d), kShapes[s].name);
      try {
        if (!p.descs[s]) throw ProbeError("no descriptors");
        e.legacy = find_algo(p.ctx, d, *p.descs[s], e.roles);
        std::printf("legacy algo %d %s (find: %.1f us, workspace %zu B)", e.legacy->algo,
                    legacy_algo_name(d, e.legacy->algo), 1000.0 * e.legacy->find_ms, e.legacy->ws_bytes);
      } catch (const std::exception& ex) {
        std::printf("legacy setup failed: %s", ex.what());
      }
      std::printf("\n  %-16s %s: ", "", kShapes[s].name);
      try {
        e.backend = build_backend(p.ctx, d, kShapes[s], e.roles);
        const BackendConv& b = *e.backend;
        std::printf(
            "backend engine %lld (notes %s%s; config %zu of %zu, heuristics %s; workspace %lld B; built in "
            "%.2f ms)",
            static_cast<long long>(b.engine.index), b.engine.notes.c_str(), b.engine.tensor_core ? ", TF32 math" : "",
            b.cfg_rank + 1, b.cfg_count, b.heur_mode, static_cast<long long>(b.ws_bytes), b.build_ms);
      } catch (const std::exception& ex) {
        std::printf("backend setup failed: %s", ex.what());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

std::vector<float> read_output(const Ctx& ctx, const Roles& r) {
  std::vector<float> v(r.out_count);
  CUDA_CHECK(cudaMemcpyAsync(v.data(), r.out, v.size() * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return v;
}

/// Runs legacy and backend once on the same operands and compares the outputs.
void check_agreement(Probe& p) {
  std::printf("\ncheck: legacy-cached vs backend-plan on the same random operands (max |difference| / max |legacy|)\n");
  for (Dir d : kDirs) {
    for (int s = 0; s < kShapeCount; ++s) {
      Entry& e = p.at(d, s);
      if (!e.legacy || !e.backend) continue;
      try {
        legacy_exec(p.ctx, d, *p.descs[s], e.roles, e.legacy->algo, e.legacy->ws_bytes);
        const std::vector<float> ref = read_output(p.ctx, e.roles);
        CUDA_CHECK(cudaMemsetAsync(e.roles.out, 0xff, e.roles.out_count * sizeof(float), p.ctx.stream));  // NaNs
        backend_exec(p.ctx, *e.backend);
        const std::vector<float> got = read_output(p.ctx, e.roles);
        double max_diff = 0, max_ref = 0;
        bool finite = true;
        for (size_t i = 0; i < ref.size(); ++i) {
          if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) finite = false;
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - ref[i])));
          max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
        }
        const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
        std::printf("  %-16s %s: max diff %.3g, max |legacy| %.3g, relative %.3g  %s\n", dir_name(d), kShapes[s].name,
                    max_diff, max_ref, rel,
                    !finite       ? "NON-FINITE"
                    : rel <= 1e-4 ? "ok"
                                  : "DIFFERS (> 1e-4)");
      } catch (const std::exception& ex) {
        std::printf("  %-16s %s: check failed: %s\n", dir_name(d), kShapes[s].name, ex.what());
      }
      std::fflush(stdout);
    }
  }
}

/// legacy-percall split into its host-only pieces, and the variant pack's own cost.
void host_pieces(Probe& p) {
  std::printf(
      "\nhost-only pieces, us/call (no GPU work): descs = create+set+destroy the 4 legacy descriptors "
      "(incl. group count, math type); outdim = cudnnGetConvolution2dForwardOutputDim; wsquery = "
      "cudnnGetConvolution*WorkspaceSize; varpack = backend variant pack create+finalize+destroy\n");
  std::printf("%-16s %-5s %10s %10s %10s %10s\n", "direction", "shape", "descs", "outdim", "wsquery", "varpack");
  for (Dir d : kDirs) {
    for (int s = 0; s < kShapeCount; ++s) {
      Entry& e = p.at(d, s);
      const Shape& sh = kShapes[s];
      double descs = NAN, outdim = NAN, wsq = NAN, vp = NAN;
      try {
        descs = time_host(p.ctx, [&] { const LegacyDescs tmp(sh); });
        if (p.descs[s]) outdim = time_host(p.ctx, [&] { p.descs[s]->check_output_dim(sh); });
        if (e.legacy) wsq = time_host(p.ctx, [&] { (void)legacy_workspace(p.ctx.h, d, *p.descs[s], e.legacy->algo); });
        if (e.backend) vp = time_host(p.ctx, [&] { const BDesc tmp = variant_pack(e.backend->ptrs, p.ctx.ws); });
      } catch (const std::exception& ex) {
        std::printf("%-16s %-5s failed: %s\n", dir_name(d), sh.name, ex.what());
        continue;
      }
      std::printf("%-16s %-5s %10.2f %10.2f %10.2f %10.2f\n", dir_name(d), sh.name, descs, outdim, wsq, vp);
      std::fflush(stdout);
    }
  }
}

void single_shape_modes(Probe& p, Dir d, int s) {
  Entry& e = p.at(d, s);
  const char* name = kShapes[s].name;
  if (e.legacy) {
    const LegacyAlgo la = *e.legacy;
    run_mode(p.ctx, d, name, "legacy-percall", [&](int) { legacy_percall(p.ctx, d, kShapes[s], e.roles, la.algo); });
    run_mode(p.ctx, d, name, "legacy-cached",
             [&](int) { legacy_exec(p.ctx, d, *p.descs[s], e.roles, la.algo, la.ws_bytes); });
  } else {
    std::printf("%-16s %-5s legacy modes skipped (setup failed)\n", dir_name(d), name);
  }
  if (e.backend) {
    const BackendConv& b = *e.backend;
    run_mode(p.ctx, d, name, "backend-plan", [&](int) { backend_exec(p.ctx, b); });
    run_mode(p.ctx, d, name, "backend-plan-vp-percall", [&](int) { backend_exec_new_pack(p.ctx, b); });
  } else {
    std::printf("%-16s %-5s backend modes skipped (setup failed)\n", dir_name(d), name);
  }
}

/// The modes again, alternating shapes (a) and (b) call by call.
void alternating_modes(Probe& p, Dir d) {
  Entry* e[2] = {&p.at(d, 0), &p.at(d, 1)};
  const char* label = "a+b";
  if (e[0]->legacy && e[1]->legacy) {
    run_mode(p.ctx, d, label, "legacy-percall-alternating",
             [&](int i) { legacy_percall(p.ctx, d, kShapes[i & 1], e[i & 1]->roles, e[i & 1]->legacy->algo); });
    run_mode(p.ctx, d, label, "legacy-cached-alternating", [&](int i) {
      const Entry& x = *e[i & 1];
      legacy_exec(p.ctx, d, *p.descs[i & 1], x.roles, x.legacy->algo, x.legacy->ws_bytes);
    });
  }
  if (e[0]->backend && e[1]->backend) {
    run_mode(p.ctx, d, label, "backend-plan-alternating", [&](int i) { backend_exec(p.ctx, *e[i & 1]->backend); });
    run_mode(p.ctx, d, label, "backend-plan-vp-percall-alternating",
             [&](int i) { backend_exec_new_pack(p.ctx, *e[i & 1]->backend); });
  }
}

void timing_table(Probe& p) {
  std::printf(
      "\ntiming: %d calls per loop, median of %d loops; host = host clock, stream = cudaEvents around the "
      "same loop, gpu = same loop queued behind a gate (GPU time alone)\n",
      p.ctx.iters, p.ctx.repeats);
  print_table_header();
  for (Dir d : kDirs) {
    for (int s = 0; s < kShapeCount; ++s) single_shape_modes(p, d, s);
    alternating_modes(p, d);
  }
  if (p.ctx.gate_timeouts > 0)
    std::printf("\nnote: the gate timed out %d time(s) (a call waited on its own stream); gpu shows n/a there%s\n",
                p.ctx.gate_timeouts, p.ctx.gate ? "" : ", and the gpu column was turned off after 3");
}

/// The largest of 1 GiB, 512 MiB, 256 MiB that cudaMalloc grants.
DevPtr alloc_workspace(size_t& bytes) {
  for (size_t mib : {1024, 512, 256}) {
    void* p = nullptr;
    if (cudaMalloc(&p, mib << 20) == cudaSuccess) {
      bytes = mib << 20;
      return DevPtr(p);
    }
    (void)cudaGetLastError();
  }
  throw ProbeError("could not allocate a 256 MiB workspace");
}

int run(int iters, int repeats, bool gate) {
  const auto t_begin = Clock::now();
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int runtime = 0, driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("probe_cudnn_host: cuDNN %zu (built against %d), CUDA runtime %d, driver %d\n", cudnnGetVersion(),
              CUDNN_VERSION, runtime, driver);
  std::printf("device 0: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::printf("f32, NCHW packed, FMA math (no TF32); shapes (batch 128):\n");
  for (const Shape& s : kShapes)
    std::printf("  %s: x %dx%dx%dx%d, w %dx%dx%dx%d, pad %d, stride %d -> y %dx%dx%dx%d\n", s.name, s.n, s.c, s.h, s.w,
                s.k, s.c, s.kh, s.kw, s.pad, s.stride, s.n, s.k, s.ho(), s.wo());

  Probe p;
  p.ctx.iters = iters;
  p.ctx.repeats = repeats;
  p.ctx.gate = gate;
  CUDA_CHECK(cudaStreamCreateWithFlags(&p.ctx.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&p.ctx.start));
  CUDA_CHECK(cudaEventCreate(&p.ctx.stop));
  CUDNN_CHECK(cudnnCreate(&p.ctx.h));
  CUDNN_CHECK(cudnnSetStream(p.ctx.h, p.ctx.stream));
  const DevPtr ws = alloc_workspace(p.ctx.ws_cap);
  p.ctx.ws = ws.get();
  std::printf("workspace buffer: %zu MiB (the legacy search's cap and every call's workspace)\n", p.ctx.ws_cap >> 20);
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) p.operands.push_back(make_operands(s, rng));

  setup(p);
  check_agreement(p);
  host_pieces(p);
  timing_table(p);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("\nprobe_cudnn_host: done in %.1f s\n", us_since(t_begin, Clock::now()) / 1e6);
  return 0;
}

bool parse_int(const char* s, int lo, int hi, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 100, repeats = 5;
  bool gate = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc && parse_int(argv[i + 1], 1, 100000, iters)) {
      ++i;
    } else if (a == "--repeats" && i + 1 < argc && parse_int(argv[i + 1], 1, 1000, repeats)) {
      ++i;
    } else if (a == "--no-gate") {
      gate = false;
    } else {
      std::fprintf(stderr, "usage: %s [--iters N (100)] [--repeats N (5)] [--no-gate]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    std::printf("probe_cudnn_host: no usable GPU (skipped)\n");
    return 77;
  }
  try {
    return run(iters, repeats, gate);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "probe_cudnn_host: %s\n", e.what());
    return 1;
  }
}
