// The CUDA convolution's legacy path: cudnnConvolution* calls with the algorithm
// cudnnFind*AlgorithmEx times fastest, for a problem cuDNN's graph API offers no engine for
// (conv_graph.cpp is the preferred path; conv.cu's top comment says why).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/cuda_check.h>
#include <ember/core/determinism.h>
#include <ember/core/error.h>
#include <ember/kernels/cuda/conv_plan.h>

namespace ember::kernels::cuda::conv_detail {

Descs::Descs(const Geometry& g, cudnnMathType_t math) {
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

namespace {

/// Math type requested before the search: see conv.cu's top comment.
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
/// First (fastest) usable entry of a perf array sorted by time; `deterministic`: the one of lowest
/// algorithm number among those cuDNN reports CUDNN_DETERMINISTIC (e.g. not backward-data /
/// backward-filter ALGO_0, which sum with atomics). Never one that converts f32/f64 inputs down
/// (TENSOR_OP_MATH_ALLOW_CONVERSION), nor a tensor-core one where the numerics are `strict` (f64,
/// f32 without TF32), as the graph path's numerics_allowed.
template <typename Perf>
bool pick(const std::vector<Perf>& perfs, int returned, size_t ws_bytes, bool deterministic, DType dt, bool strict,
          AlgoChoice& out) {
  bool found = false;
  for (int i = 0; i < returned; ++i) {
    const Perf& pf = perfs[static_cast<size_t>(i)];
    if (deterministic && (pf.determinism != CUDNN_DETERMINISTIC || nondeterministic_only_for_testing())) continue;
    if (pf.status != CUDNN_STATUS_SUCCESS || pf.memory > ws_bytes) continue;
    if ((dt == DType::f32 || dt == DType::f64) && pf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (strict && pf.mathType == CUDNN_TENSOR_OP_MATH) continue;
    // Deterministic: the usable (algorithm, math type) of lowest numbers rather than the fastest (the timing
    // order varies from run to run; see conv.cu), so that another process picks the same one.
    if (deterministic && found &&
        std::pair(static_cast<int>(pf.algo), static_cast<int>(pf.mathType)) >=
            std::pair(out.algo, static_cast<int>(out.math)))
      continue;
    out = AlgoChoice{static_cast<int>(pf.algo), pf.mathType};
    found = true;
    if (!deterministic) return true;
  }
  return found;
}

/// Times the algorithms of `dir` on the given operands (the output is a scratch tensor) and
/// returns the fastest. x/w/y are device pointers of the problem's three tensors; `strict`: no
/// tensor-core algorithm (pick).
AlgoChoice search(cudnnHandle_t h, Direction dir, const Geometry& g, const Descs& d, bool deterministic, bool strict,
                  Device dev, const void* x, const void* w, const void* y) {
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
      ok = pick(perfs, returned, ws_bytes, deterministic, g.dtype, strict, choice);
      break;
    }
    case Direction::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(count));
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), w, d.y.get(), y, d.conv.get(), d.x.get(),
                                                              scratch, count, &returned, perfs.data(), ws_ptr,
                                                              ws_bytes));
      ok = pick(perfs, returned, ws_bytes, deterministic, g.dtype, strict, choice);
      break;
    }
    case Direction::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(count));
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), x, d.y.get(), y, d.conv.get(), d.w.get(),
                                                                scratch, count, &returned, perfs.data(), ws_ptr,
                                                                ws_bytes));
      ok = pick(perfs, returned, ws_bytes, deterministic, g.dtype, strict, choice);
      break;
    }
  }
  if (!ok && deterministic)
    throw Error(ember::detail::nondeterministic_message(
        std::string("conv2d ") + dir_name(dir) + " (cuda)",
        "neither cuDNN's graph API nor its legacy calls offer a deterministic engine usable for " + geometry_str(g)));
  EMBER_CHECK(ok, "conv2d (cuda): cuDNN found no ", dir_name(dir), " algorithm for ", geometry_str(g), " (", returned,
              " candidates, search workspace ", ws_bytes, " bytes)");
  return choice;
}

}  // namespace

std::unique_ptr<const LegacyPlan> make_legacy_plan(cudnnHandle_t h, Direction dir, const Geometry& g, bool tf32,
                                                   bool deterministic, Device dev, const void* x, const void* w,
                                                   const void* y) {
  EMBER_ASSERT(!g.channels_last, "conv2d (cuda): the legacy descriptors are NCHW, got ", geometry_str(g));
  AlgoChoice choice{};
  {
    const Descs search_descs(g, requested_math(g.dtype, tf32));
    const bool strict = g.dtype == DType::f64 || (g.dtype == DType::f32 && !tf32);
    choice = search(h, dir, g, search_descs, deterministic, strict, dev, x, w, y);
  }
  auto plan = std::make_unique<LegacyPlan>(g, run_math(g.dtype, tf32, choice.math));
  plan->choice = choice;
  plan->ws_bytes = workspace_size(h, dir, plan->descs, choice.algo);
  EMBER_CHECK(plan->ws_bytes != SIZE_MAX, "conv2d (cuda): cuDNN ", dir_name(dir), " algorithm ", choice.algo,
              " does not apply to ", geometry_str(g));
  return plan;
}

void run_legacy(cudnnHandle_t h, Direction dir, const Geometry& g, const LegacyPlan& plan, const void* x, const void* w,
                const void* y, double beta, void* ws_ptr) {
  const Descs& d = plan.descs;
  const CudnnScale one(1.0), b(beta);
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

}  // namespace ember::kernels::cuda::conv_detail
