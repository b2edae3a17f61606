// CUDA batch normalization (cuDNN) and dropout (hand-written, counter-based RNG).
//
// Batch norm: x arrives from the front (kernels/norm.cpp) as a contiguous (N, C, S) view and is
// described to cuDNN as the NCHW tensor (N, C, S, 1) in CUDNN_BATCHNORM_SPATIAL mode, so one mean
// and variance per channel over (N, S). Scale, bias, running and saved statistics are f32 (f64 for
// f64 input), as cuDNN requires and the front enforces. Training calls
// cudnnBatchNormalizationForwardTraining with exponentialAverageFactor = momentum; cuDNN updates
// the running variance with the unbiased batch variance and returns 1/sqrt(biased var + eps) as
// resultSaveInvVariance, which is exactly save_invstd. Eval calls ForwardInference. The training
// backward is cudnnBatchNormalizationBackward fed with the saved mean and inverse std.
// Where cuDNN does not reach, small kernels here take over:
//  * eval backward: cuDNN's backward always differentiates through the batch statistics; with
//    fixed statistics dx = w * invstd * dy and the parameter gradients are per-channel sums. A
//    2-D grid (channel, chunk of the channel's N * S elements) writes dx and f64 partial sums in
//    one pass, enough blocks to fill the GPU even for few channels; a second tiny kernel adds
//    each channel's partials in chunk order (deterministic, no atomics). The channel is the
//    block's, so the only per-element index math is one division by S (FastDiv32 when every
//    index fits in 32 bits);
//  * eval forward for bf16, and for N > 65535 (cuDNN's inference kernels put N on a grid
//    dimension capped at 65535; PyTorch routes those around cuDNN too): y = x * scale + shift,
//    with scale = w / sqrt(var + eps) and shift = b - mean * scale computed once per channel by
//    a tiny kernel, and the channel of element i, (i / S) % C, by FastDiv32 multiplies;
//  * bf16 training goes through f32 copies of x (and dy): cuDNN's legacy batch norm does not
//    promise bf16, and one rounding at the end loses nothing.
// cuDNN indexes in 32 bits, and its training kernels fail past N = 880801 (the bound PyTorch
// found and also enforces). An input past it with one value per (n, c), S == 1 (a channels-last
// input, which the front sees as (N*H*W, C, 1), or a long (N, C) batch), is normalized as its
// (1, C, N) transpose, which has the same per-channel statistics and N = 1: two transposing
// copies, only for these sizes. Other inputs past either limit are refused with a message naming them.
// Dropout: one thread per Philox block of 4 consecutive elements (core/rng.h's layout: element i
// uses block offset + i / 4, lane i % 4), grid-stride, 64-bit indices, 16-byte vector loads and
// stores for f32 (8 bytes for f16/bf16) when both tensors are aligned. The keep test is the
// integer test of kernels/norm.h's dropout_threshold, and the scaled value is computed exactly as
// the CPU twin does (x widened to f32, or f64 for f64, times the scale 1 / (1 - p) rounded once on
// the host, then rounded to T by the same conversion), so CPU and GPU give identical bits.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <ember/core/cuda_graph.h>
#include <ember/core/rng.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/cuda/cudnn_handle.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/norm.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/loops.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

// ---- batch norm ----

DType param_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// check_channel and check_ncs repeat what the fronts (kernels/norm.cpp) guarantee: debug-only.
/// Checks one per-channel tensor (C) of the parameter dtype on x's device, when defined.
void check_channel(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  const int64_t C = x.size(1);
  EMBER_DEBUG_ASSERT(t.device() == x.device() && t.numel() == C && t.dtype() == param_dtype(x.dtype()) && is_dense(t),
                     op, ": ", name, " must be a contiguous (", C, ") ", dtype_name(param_dtype(x.dtype())),
                     " tensor on ", x.device().str(), " for input ", x.shape_str(), " ", dtype_name(x.dtype()),
                     ", got ", t.shape_str(), " ", dtype_name(t.dtype()), " on ", t.device().str());
}

void check_ncs(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  EMBER_DEBUG_ASSERT(t.device() == x.device() && t.device().is_cuda() && t.dtype() == x.dtype() &&
                         t.sizes() == x.sizes() && t.dim() == 3 && is_dense(t),
                     op, ": ", name, " must be a contiguous (N, C, S) ", dtype_name(x.dtype()), " tensor of shape ",
                     x.shape_str(), " on a CUDA device, got ", t.shape_str(), " ", dtype_name(t.dtype()), " on ",
                     t.device().str());
}

constexpr int64_t kMaxTrainingBatch = 880801;  // see the top comment
constexpr int64_t kMaxInferenceBatch = 65535;

/// Descriptors of x (N, C, S) as NCHW (N, C, S, 1) of dtype dt and of the per-channel parameters.
struct BnDescs {
  TensorDescriptor x, bn;
  BnDescs(const Tensor& xt, DType dt, const char* op) {
    EMBER_CHECK(xt.numel() < (int64_t(1) << 31), op, ": input (N, C, S) = ", xt.shape_str(), " has ", xt.numel(),
                " elements; cuDNN batch norm is limited to fewer than 2^31");
    x.set_4d(dt, xt.size(0), xt.size(1), xt.size(2), 1);
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bn.get(), x.get(), CUDNN_BATCHNORM_SPATIAL));
  }
};

/// The (N, C, 1) tensor t as its contiguous (1, C, N) transpose (see the top comment).
Tensor rows_to_plane(const Tensor& t) {
  const int64_t N = t.size(0), C = t.size(1);
  Tensor p = empty({1, C, N}, t.options());
  copy(p, as_strided_raw(t, {1, C, N}, {N * C, 1, C}, t.offset()));
  return p;
}
/// Writes the (1, C, N) plane p back into the contiguous (N, C, 1) tensor t.
void plane_to_rows(const Tensor& p, const Tensor& t) {
  const int64_t N = t.size(0), C = t.size(1);
  copy(as_strided_raw(t, {1, C, N}, {N * C, 1, C}, t.offset()), p);
}
/// True when a training call on x (N, C, S) goes through its transpose (see the top comment).
bool train_as_plane(const Tensor& x) { return x.size(0) > kMaxTrainingBatch && x.size(2) == 1; }

/// `t` itself, or a (C) tensor of `value` when t is undefined.
Tensor or_filled(const Tensor& t, int64_t C, DType dt, Device dev, double value) {
  return t.defined() ? t : full({C}, value, {.dtype = dt, .device = dev});
}

/// The dtype cuDNN computes x in: bf16 is staged through f32 (see the top comment).
DType cudnn_dtype_for(DType dt) { return dt == DType::bf16 ? DType::f32 : dt; }
/// x itself, or its f32 copy when staged.
Tensor staged(const Tensor& t) { return t.dtype() == DType::bf16 ? cast(t, DType::f32) : t; }
/// `out` itself, or an f32 buffer of its shape to copy back from when staged.
Tensor staged_out(const Tensor& out) {
  return out.dtype() == DType::bf16 ? empty(out.sizes(), {.dtype = DType::f32, .device = out.device()}) : out;
}

/// Per-channel eval affine, once per call: scale[c] = w[c] / sqrt(var[c] + eps) and shift[c] =
/// b[c] - mean[c] * scale[c] in P (f64 for f64, else f32); w, b may be null (1, 0).
template <typename P>
__global__ void __launch_bounds__(kBlock)
    bn_eval_affine_kernel(const P* __restrict__ w, const P* __restrict__ b, const P* __restrict__ mean,
                          const P* __restrict__ var, P eps, int64_t C, P* __restrict__ scale, P* __restrict__ shift) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += stride) {
    const P k = (w != nullptr ? w[c] : P(1)) / sqrt(var[c] + eps);
    scale[c] = k;
    shift[c] = (b != nullptr ? b[c] : P(0)) - mean[c] * k;
  }
}

/// Eval forward y = x * scale[c] + shift[c] over x, y (N, C, S), element math in P; element i is
/// in channel (i / S) % C, two divisions by Dv (multiply-high and shift for FastDiv32).
template <typename T, typename P, typename I, typename Dv>
__global__ void __launch_bounds__(kBlock)
    bn_forward_eval_kernel(const T* __restrict__ x, T* __restrict__ y, const P* __restrict__ scale,
                           const P* __restrict__ shift, I total, Dv S, Dv C) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += stride) {
    const I q = S.div(i);  // n * C + c
    const I c = q - C.div(q) * static_cast<I>(C.divisor);
    y[i] = store_as<T>(load_as<P>(x[i]) * scale[c] + shift[c]);
  }
}

void batch_norm_eval_kernel(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                            double eps, const Tensor& out, cudaStream_t stream, const char* op) {
  const int64_t total = x.numel(), C = x.size(1), S = x.size(2);
  const DType pd = param_dtype(x.dtype());
  const Tensor affine = empty({2, C}, {.dtype = pd, .device = x.device()});  // {scale, shift}
  EMBER_DISPATCH_FLOAT(x.dtype(), op, [&]<typename T>() {
    using P = std::conditional_t<std::is_same_v<T, double>, double, float>;
    P* scale = static_cast<P*>(affine.data_ptr());
    bn_eval_affine_kernel<P><<<grid_for(C), kBlock, 0, stream>>>(
        w.defined() ? static_cast<const P*>(w.data_ptr()) : nullptr,
        b.defined() ? static_cast<const P*>(b.data_ptr()) : nullptr, static_cast<const P*>(rm.data_ptr()),
        static_cast<const P*>(rv.data_ptr()), static_cast<P>(eps), C, scale, scale + C);
    EMBER_LAUNCH_CHECK();
    with_index_width(total, total, [&]<typename I, typename Dv>() {
      bn_forward_eval_kernel<T, P, I, Dv><<<grid_for(total), kBlock, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), scale, scale + C, static_cast<I>(total),
          Dv(static_cast<I>(S)), Dv(static_cast<I>(C)));
      EMBER_LAUNCH_CHECK();
    });
  });
}

void batch_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                     const Tensor& running_var, bool training, double momentum, double eps, const BatchNormResult& r) {
  const char* op = "batch_norm (cuda)";
  // The front (kernels/norm.cpp: batch_norm) checks, makes contiguous or allocates these operands.
  EMBER_DEBUG_ASSERT(x.dim() == 3 && is_dense(x) && x.device().is_cuda(), op,
                     ": expected a contiguous (N, C, S) input on a CUDA device, got ", x.shape_str(), " on ",
                     x.device().str());
  check_ncs(op, "out", r.out, x);
  check_channel(op, "weight", weight, x);
  check_channel(op, "bias", bias, x);
  check_channel(op, "running_mean", running_mean, x);
  check_channel(op, "running_var", running_var, x);
  EMBER_DEBUG_ASSERT(running_mean.defined() == running_var.defined(), op,
                     ": running_mean and running_var must be both defined or both undefined");
  if (training) {
    EMBER_DEBUG_ASSERT(r.save_mean.defined() && r.save_invstd.defined(), op,
                       ": training needs save_mean and save_invstd");
    check_channel(op, "save_mean", r.save_mean, x);
    check_channel(op, "save_invstd", r.save_invstd, x);
  } else {
    EMBER_DEBUG_ASSERT(running_mean.defined(), op, ": eval mode needs the running statistics");
  }
  if (x.numel() == 0) return;
  const int64_t N = x.size(0), C = x.size(1);
  const DType pd = param_dtype(x.dtype());
  DeviceGuard guard(x.device());
  const cudaStream_t stream = stream_of(x);
  // Eval past cuDNN's limits (batch, 2^31 elements) and in bf16: ember's own kernel (64-bit indices).
  if (!training && (x.dtype() == DType::bf16 || N > kMaxInferenceBatch || x.numel() >= (int64_t(1) << 31))) {
    batch_norm_eval_kernel(x, weight, bias, running_mean, running_var, eps, r.out, stream, op);
    return;
  }
  if (training && train_as_plane(x)) {
    const Tensor out = empty({1, C, N}, r.out.options());
    batch_norm_cuda(rows_to_plane(x), weight, bias, running_mean, running_var, true, momentum, eps,
                    {out, r.save_mean, r.save_invstd});
    plane_to_rows(out, r.out);
    return;
  }
  EMBER_CHECK(!training || N <= kMaxTrainingBatch, op, ": input ", x.shape_str(), " has N = ", N,
              "; cuDNN's batch-norm training kernels take at most N = ", kMaxTrainingBatch,
              " (or any N with one value per sample and channel)");
  const DType dt = cudnn_dtype_for(x.dtype());
  const CudnnHandleLease lease = cudnn_handle(x.device(), stream);
  cudnnHandle_t h = lease.get();
  BnDescs d(x, dt, op);
  const Tensor w = or_filled(weight, C, pd, x.device(), 1.0);
  const Tensor b = or_filled(bias, C, pd, x.device(), 0.0);
  const Tensor xs = staged(x), ys = staged_out(r.out);
  const CudnnScale one(1.0), zero(0.0);
  if (training) {
    void* rm = running_mean.defined() ? running_mean.data_ptr() : nullptr;
    void* rv = running_var.defined() ? running_var.data_ptr() : nullptr;
    CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, one.ptr(dt), zero.ptr(dt), d.x.get(),
                                                       xs.data_ptr(), d.x.get(), ys.data_ptr(), d.bn.get(),
                                                       w.data_ptr(), b.data_ptr(), momentum, rm, rv, eps,
                                                       r.save_mean.data_ptr(), r.save_invstd.data_ptr()));
  } else {
    CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        h, CUDNN_BATCHNORM_SPATIAL, one.ptr(dt), zero.ptr(dt), d.x.get(), xs.data_ptr(), d.x.get(), ys.data_ptr(),
        d.bn.get(), w.data_ptr(), b.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), eps));
  }
  if (!ys.is_same(r.out)) copy(r.out, ys);
  // Temporaries (w, b, staged copies) are freed in stream order, after cuDNN's kernels read them.
}

/// Eval-mode backward, pass 1. Block (c, j) = (blockIdx.x, blockIdx.y) takes the elements
/// m = n * S + s in [j * chunk, (j + 1) * chunk) of channel c of x/g/gx (N, C, S): it writes
/// gx = k * g with k = w[c] * invstd[c] (once per block), and part[j][c] = {sum g, sum g * (x -
/// mean[c])} in f64. The only per-element division is m / S.
template <typename T, typename P, typename I, typename Dv>
__global__ void __launch_bounds__(kBlock)
    bn_backward_eval_kernel(const T* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
                            const P* __restrict__ mean, const P* __restrict__ invstd, T* __restrict__ gx,
                            double2* __restrict__ part, I M, I chunk, Dv S, I C) {
  using A = acc_t<T>;
  __shared__ double2 smem[32];
  const I c = static_cast<I>(blockIdx.x);
  const double m = static_cast<double>(mean[c]);
  const A k = static_cast<A>((w != nullptr ? static_cast<double>(w[c]) : 1.0) * static_cast<double>(invstd[c]));
  const I begin = static_cast<I>(blockIdx.y) * chunk;
  const I end = M - begin < chunk ? M : begin + chunk;
  double sg = 0.0, sgd = 0.0;
  for (I j = begin + static_cast<I>(threadIdx.x); j < end; j += static_cast<I>(blockDim.x)) {
    const I n = S.div(j);
    const I e = (n * C + c) * static_cast<I>(S.divisor) + (j - n * static_cast<I>(S.divisor));
    const A gv = load_as<A>(g[e]);
    sg += static_cast<double>(gv);
    sgd += static_cast<double>(gv) * (static_cast<double>(load_as<A>(x[e])) - m);
    gx[e] = store_as<T>(k * gv);
  }
  const double2 tot = block_reduce(
      make_double2(sg, sgd), [](double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); },
      make_double2(0.0, 0.0), smem);
  if (threadIdx.x == 0) part[static_cast<int64_t>(blockIdx.y) * C + c] = tot;
}

/// Eval-mode backward, pass 2: gb[c] = sum_j part[j][c].x and gw[c] = invstd[c] * sum_j
/// part[j][c].y over the `chunks` partials, in chunk order (the same bits on every run).
template <typename P>
__global__ void __launch_bounds__(kBlock)
    bn_backward_eval_finish_kernel(const double2* __restrict__ part, int64_t chunks, const P* __restrict__ invstd,
                                   P* __restrict__ gw, P* __restrict__ gb, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += stride) {
    double sg = 0.0, sgd = 0.0;
    for (int64_t j = 0; j < chunks; ++j) {
      const double2 p = part[j * C + c];
      sg += p.x;
      sgd += p.y;
    }
    gb[c] = static_cast<P>(sg);
    gw[c] = static_cast<P>(sgd * static_cast<double>(invstd[c]));
  }
}

/// Chunks per channel for the eval backward: enough blocks in all for about four per
/// multiprocessor, none shorter than a block's worth of elements, at most 65535 (gridDim.y).
int64_t eval_backward_chunks(int64_t C, int64_t M, int device) {
  const int64_t want = ceil_div(int64_t(4) * sm_count(device), C);
  return std::clamp<int64_t>(std::min(want, ceil_div(M, int64_t(kBlock))), 1, 65535);
}

void batch_norm_backward_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                              const Tensor& save_invstd, bool training, double eps, const BatchNormGrads& r) {
  const char* op = "batch_norm_backward (cuda)";
  // The front (kernels/norm.cpp: batch_norm_backward) checks, makes contiguous or allocates these operands.
  EMBER_DEBUG_ASSERT(x.dim() == 3 && is_dense(x) && x.device().is_cuda(), op,
                     ": expected a contiguous (N, C, S) input on a CUDA device, got ", x.shape_str(), " on ",
                     x.device().str());
  check_ncs(op, "grad_out", grad_out, x);
  check_ncs(op, "grad_x", r.grad_x, x);
  check_channel(op, "weight", weight, x);
  EMBER_DEBUG_ASSERT(save_mean.defined() && save_invstd.defined() && r.grad_weight.defined() && r.grad_bias.defined(),
                     op, ": save_mean, save_invstd, grad_weight and grad_bias must be defined");
  check_channel(op, "save_mean", save_mean, x);
  check_channel(op, "save_invstd", save_invstd, x);
  check_channel(op, "grad_weight", r.grad_weight, x);
  check_channel(op, "grad_bias", r.grad_bias, x);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  if (C == 0) return;
  const DType pd = param_dtype(x.dtype());
  DeviceGuard guard(x.device());
  const cudaStream_t stream = stream_of(x);
  if (x.numel() == 0) {  // no elements: zero parameter gradients (the front handles this too)
    CUDA_CHECK(cudaMemsetAsync(r.grad_weight.data_ptr(), 0, static_cast<size_t>(C) * dtype_size(pd), stream));
    CUDA_CHECK(cudaMemsetAsync(r.grad_bias.data_ptr(), 0, static_cast<size_t>(C) * dtype_size(pd), stream));
    return;
  }
  if (training && train_as_plane(x)) {
    const Tensor gx = empty({1, C, N}, r.grad_x.options());
    batch_norm_backward_cuda(rows_to_plane(grad_out), rows_to_plane(x), weight, save_mean, save_invstd, true, eps,
                             {gx, r.grad_weight, r.grad_bias});
    plane_to_rows(gx, r.grad_x);
    return;
  }
  if (training) {
    EMBER_CHECK(N <= kMaxTrainingBatch, op, ": input ", x.shape_str(), " has N = ", N,
                "; cuDNN's batch-norm training kernels take at most N = ", kMaxTrainingBatch,
                " (or any N with one value per sample and channel)");
    const DType dt = cudnn_dtype_for(x.dtype());
    const CudnnHandleLease lease = cudnn_handle(x.device(), stream);
    cudnnHandle_t h = lease.get();
    BnDescs d(x, dt, op);
    const Tensor w = or_filled(weight, C, pd, x.device(), 1.0);
    const Tensor xs = staged(x), gs = staged(grad_out), dxs = staged_out(r.grad_x);
    const CudnnScale one(1.0), zero(0.0);
    CUDNN_CHECK(cudnnBatchNormalizationBackward(
        h, CUDNN_BATCHNORM_SPATIAL, one.ptr(dt), zero.ptr(dt), one.ptr(dt), zero.ptr(dt), d.x.get(), xs.data_ptr(),
        d.x.get(), gs.data_ptr(), d.x.get(), dxs.data_ptr(), d.bn.get(), w.data_ptr(), r.grad_weight.data_ptr(),
        r.grad_bias.data_ptr(), eps, save_mean.data_ptr(), save_invstd.data_ptr()));
    if (!dxs.is_same(r.grad_x)) copy(r.grad_x, dxs);
    return;
  }
  const int64_t M = N * S;
  const int64_t chunks0 = eval_backward_chunks(C, M, x.device().index());
  const int64_t chunk = ceil_div(M, chunks0), chunks = ceil_div(M, chunk);
  const Tensor part = empty({chunks, C, 2}, {.dtype = DType::f64, .device = x.device()});  // double2 per block
  EMBER_DISPATCH_FLOAT(x.dtype(), op, [&]<typename T>() {
    using P = std::conditional_t<std::is_same_v<T, double>, double, float>;
    auto* pp = static_cast<double2*>(part.data_ptr());
    with_index_width(x.numel(), x.numel(), [&]<typename I, typename Dv>() {
      const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(chunks));
      bn_backward_eval_kernel<T, P, I, Dv><<<grid, kBlock, 0, stream>>>(
          static_cast<const T*>(grad_out.data_ptr()), static_cast<const T*>(x.data_ptr()),
          weight.defined() ? static_cast<const P*>(weight.data_ptr()) : nullptr,
          static_cast<const P*>(save_mean.data_ptr()), static_cast<const P*>(save_invstd.data_ptr()),
          static_cast<T*>(r.grad_x.data_ptr()), pp, static_cast<I>(M), static_cast<I>(chunk), Dv(static_cast<I>(S)),
          static_cast<I>(C));
      EMBER_LAUNCH_CHECK();
    });
    bn_backward_eval_finish_kernel<P><<<grid_for(C), kBlock, 0, stream>>>(
        pp, chunks, static_cast<const P*>(save_invstd.data_ptr()), static_cast<P*>(r.grad_weight.data_ptr()),
        static_cast<P*>(r.grad_bias.data_ptr()), C);
    EMBER_LAUNCH_CHECK();
  });
}

// ---- dropout ----

/// out[i] = keep(i) ? T(C(x[i]) * scale) : 0 with C = f64 for f64, else f32 (the CPU twin's math).
template <typename T, typename C> __device__ __forceinline__ T dropout_value(T x, bool keep, C scale) {
  return keep ? static_cast<T>(static_cast<C>(x) * scale) : static_cast<T>(C(0));
}

// kVec: x and out are aligned to 4 * sizeof(T), so a full block moves as one Vec<T, 4>.
template <bool kVec, typename T, typename C>
__global__ void __launch_bounds__(kBlock)
    dropout_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n, uint64_t seed, uint64_t offset,
                   const uint64_t* extra, uint32_t thr, C scale) {
  if (extra != nullptr) offset += *extra;  // inside a CUDA graph: this replay's part of the stream
  const int64_t nblocks = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < nblocks; blk += stride) {
    const Philox4 r = philox4x32(seed, offset + static_cast<uint64_t>(blk));
    const int64_t base = blk * 4;
    if (kVec && base + 4 <= n) {
      Vec<T, 4> v = *reinterpret_cast<const Vec<T, 4>*>(x + base);
#pragma unroll
      for (int lane = 0; lane < 4; ++lane) v.v[lane] = dropout_value(v.v[lane], (r.v[lane] >> 8) >= thr, scale);
      *reinterpret_cast<Vec<T, 4>*>(out + base) = v;
    } else {
      const int lanes = static_cast<int>(n - base < 4 ? n - base : 4);
      for (int lane = 0; lane < lanes; ++lane)
        out[base + lane] = dropout_value(x[base + lane], (r.v[lane] >> 8) >= thr, scale);
    }
  }
}

void dropout_cuda(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
  const char* op = "dropout (cuda)";
  // The front (kernels/norm.cpp: dropout_impl) passes x and out dense in one layout (both walked
  // flat), allocates out, and handles p == 1.
  EMBER_DEBUG_ASSERT(
      x.device().is_cuda() && out.device() == x.device() && out.dtype() == x.dtype() && out.sizes() == x.sizes() &&
          ((is_dense(x) && is_dense(out)) ||
           (x.is_contiguous(MemoryFormat::channels_last) && out.is_contiguous(MemoryFormat::channels_last))),
      op, ": expected x and out dense in one layout, of one shape, dtype and CUDA device, got x ", x.shape_str(), " ",
      dtype_name(x.dtype()), " on ", x.device().str(), ", out ", out.shape_str(), " ", dtype_name(out.dtype()), " on ",
      out.device().str());
  EMBER_DEBUG_ASSERT(p >= 0.0 && p < 1.0, op, ": p must be in [0, 1) here (the front handles p == 1), got ", p);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  const cudaStream_t stream = stream_of(x);
  const uint32_t thr = dropout_threshold(p);
  const int grid = grid_for((n + 3) / 4);
  // Captured in a CUDA graph, the offset also gets the graph's per-replay extra (core/cuda_graph.h).
  const uint64_t* extra = ember::detail::capture_rng_extra();
  EMBER_DISPATCH_FLOAT(x.dtype(), op, [&]<typename T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const C scale = static_cast<C>(1.0 / (1.0 - p));  // rounded on the host, as the CPU twin does
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op_ = static_cast<T*>(out.data_ptr());
    // Vec<T, 4> is at most 16 bytes (f64 would need 32; it stays scalar).
    if constexpr (sizeof(T) <= 4) {
      if (is_aligned(xp, 4 * sizeof(T)) && is_aligned(op_, 4 * sizeof(T))) {
        dropout_kernel<true, T, C><<<grid, kBlock, 0, stream>>>(xp, op_, n, seed, offset, extra, thr, scale);
        EMBER_LAUNCH_CHECK();
        return;
      }
    }
    dropout_kernel<false, T, C><<<grid, kBlock, 0, stream>>>(xp, op_, n, seed, offset, extra, thr, scale);
    EMBER_LAUNCH_CHECK();
  });
}

}  // namespace

void register_norm() {
  batch_norm_table.set(DeviceType::CUDA, &batch_norm_cuda);
  batch_norm_backward_table.set(DeviceType::CUDA, &batch_norm_backward_cuda);
  dropout_table.set(DeviceType::CUDA, &dropout_cuda);
}

}  // namespace ember::kernels::cuda
