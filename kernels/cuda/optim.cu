// CUDA fused optimizer kernels (kernels/optim.h): SGD, Adam/AdamW, the global L2 norm and norm
// clipping, each one multi-tensor launch for all parameters of a step.
//
// Why the kernels are shaped this way:
//  - A step of a real model touches dozens of tensors, from 10-element biases to multi-million
//    element weights. One launch per tensor (or several elementwise ops per tensor) costs more
//    in launch latency than the update itself for the small ones. As in PyTorch's
//    multi_tensor_apply, the per-tensor pointers, sizes and per-tensor scalars of up to
//    kMaxTensors tensors travel *by value* in the kernel arguments (TensorListMeta, < 4 KiB, so
//    no metadata upload and no host-device synchronisation); a model with more tensors takes one
//    launch per kMaxTensors of them (mnist_cnn's 8 parameters: one launch).
//  - Every tensor is cut into chunks of kChunk elements; chunk_start holds the running chunk count
//    per tensor, and blocks walk the chunks with a grid-stride loop over a capped grid, finding a
//    chunk's tensor by binary search in chunk_start. Big and small tensors thus share the GPU
//    evenly, whatever their mix.
//  - Inside a chunk each thread handles kIlp consecutive elements per iteration, with one vector
//    load/store per operand (16 bytes for f32) when all of a tensor's operands are aligned for it,
//    and a scalar loop for the tail and for misaligned views.
//  - The norm is deterministic: each block writes its partial sum of squares (in double, as the
//    CPU twin: f32 squares overflow above |x| ~ 1.8e19) to its own slot of a temporary
//    from the caching allocator, and one single-block pass folds the slots in a fixed order.
//    Clipping reads the norm from device memory, so clip_grad_norm_ never waits for the host.
// Per-element formulas: kernels/optim_math.h, shared with the CPU twin (kernels/cpu/optim.cpp).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ember/core/cuda_graph.h>
#include <ember/core/stream.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/optim.h>
#include <ember/kernels/optim_math.h>
#include <ember/kernels/cuda/common.cuh>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {
namespace {

constexpr int64_t kChunk = 4096;  // elements per chunk: ~1 MiB of f32 traffic per 64 chunks
constexpr int kMaxTensors = 48;  // tensors per launch; keeps TensorListMeta under 4 KiB
constexpr int kIlp = 4;  // elements per thread per iteration (one 16-byte f32 load)
constexpr int64_t kMaxGrid = 65536;  // grid cap for the update kernels (grid-stride over chunks)
constexpr int kNormMaxGrid = 1024;  // grid cap for the norm kernel: bounds the partial slots

struct NoExtra {};
struct SgdExtra {
  bool init_buffer;
};

/// Everything a launch needs to find its tensors: Depth operand pointers per tensor (e.g. param,
/// grad, exp_avg, exp_avg_sq), element counts, the chunk prefix and a per-tensor Extra.
template <int Depth, typename Extra> struct TensorListMeta {
  void* ptr[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t chunk_start[kMaxTensors + 1];  // chunk_start[count] = chunks in this launch
  Extra extra[kMaxTensors];
  int count;
};
// CUDA guarantees 4 KiB of kernel arguments on every architecture; leave room for the scalars.
static_assert(sizeof(TensorListMeta<4, optim_math::AdamTensorCoeffs<double>>) +
                      sizeof(optim_math::AdamCoeffs<double>) <=
                  3800,
              "TensorListMeta too large for kernel arguments");

/// Index of the tensor owning `chunk`: the last t with chunk_start[t] <= chunk.
template <int Depth, typename Extra>
__device__ __forceinline__ int find_tensor(const TensorListMeta<Depth, Extra>& meta, int64_t chunk) {
  int lo = 0, hi = meta.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (meta.chunk_start[mid] <= chunk) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T> struct alignas(sizeof(T) * kIlp) Vec { T v[kIlp]; };
template <typename T> __device__ __forceinline__ bool vec_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * kIlp) == 0;
}
template <typename T> __device__ __forceinline__ Vec<T> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T>*>(p);
}
template <typename T> __device__ __forceinline__ void store_vec(T* p, const Vec<T>& v) {
  *reinterpret_cast<Vec<T>*>(p) = v;
}

/// The chunk's range inside its tensor: elements [begin, begin + n).
struct ChunkRange {
  int t;
  int64_t begin, n;
};
template <int Depth, typename Extra>
__device__ __forceinline__ ChunkRange chunk_range(const TensorListMeta<Depth, Extra>& meta, int64_t chunk) {
  const int t = find_tensor(meta, chunk);
  const int64_t begin = (chunk - meta.chunk_start[t]) * kChunk;
  const int64_t left = meta.numel[t] - begin;
  return {t, begin, left < kChunk ? left : kChunk};
}

// ---- SGD: operands param (P), grad (G), momentum buffer (P, when Momentum) ----
template <typename P, typename G, bool Momentum>
__global__ void __launch_bounds__(kBlock) sgd_kernel(TensorListMeta<3, SgdExtra> meta, optim_math::SgdCoeffs<P> c) {
  const int64_t total = meta.chunk_start[meta.count];
  for (int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const ChunkRange r = chunk_range(meta, chunk);
    P* p = static_cast<P*>(meta.ptr[0][r.t]) + r.begin;
    const G* g = static_cast<const G*>(meta.ptr[1][r.t]) + r.begin;
    P* buf = Momentum ? static_cast<P*>(meta.ptr[2][r.t]) + r.begin : nullptr;
    const bool init = meta.extra[r.t].init_buffer;
    const bool vec = vec_aligned<P>(p) && vec_aligned<G>(g) && (!Momentum || vec_aligned<P>(buf));
    const int64_t nv = vec ? r.n / kIlp * kIlp : 0;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * kIlp; i < nv; i += static_cast<int64_t>(blockDim.x) * kIlp) {
      Vec<P> pv = load_vec(p + i);
      const Vec<G> gv = load_vec(g + i);
      Vec<P> bv{};
      if constexpr (Momentum) bv = load_vec(buf + i);
#pragma unroll
      for (int k = 0; k < kIlp; ++k) optim_math::sgd_update<P>(pv.v[k], load_as<P>(gv.v[k]), bv.v[k], init, c);
      store_vec(p + i, pv);
      if constexpr (Momentum) store_vec(buf + i, bv);
    }
    for (int64_t i = nv + threadIdx.x; i < r.n; i += blockDim.x) {
      P pe = p[i];
      P be = Momentum ? buf[i] : P(0);
      optim_math::sgd_update<P>(pe, load_as<P>(g[i]), be, init, c);
      p[i] = pe;
      if constexpr (Momentum) buf[i] = be;
    }
  }
}

// Inside a CUDA graph (core/cuda_graph.h) the step count is the captured one plus the graph's
// replay number, read from the device, and the bias corrections are computed here (as
// optim_math::adam_tensor_coeffs does on the host; CUDA's pow may differ from the host's in the
// last bit of a double, which the rounding to P nearly always hides). index null: eager.
struct AdamReplay {
  const unsigned long long* index = nullptr;
  int64_t base_step = 0;  // the step count the capture ran with
  double lr = 0, beta1 = 0, beta2 = 0;
};
// adam_kernel's arguments, within CUDA's 4 KiB.
static_assert(sizeof(TensorListMeta<4, optim_math::AdamTensorCoeffs<double>>) + sizeof(optim_math::AdamCoeffs<double>) +
                      sizeof(AdamReplay) <=
                  4096,
              "adam_kernel's arguments exceed CUDA's 4 KiB");

// ---- Adam: operands param (P), grad (G), exp_avg (P), exp_avg_sq (P) ----
template <typename P, typename G>
__global__ void __launch_bounds__(kBlock) adam_kernel(TensorListMeta<4, optim_math::AdamTensorCoeffs<P>> meta,
                                                      optim_math::AdamCoeffs<P> c, AdamReplay replay) {
  const int64_t total = meta.chunk_start[meta.count];
  for (int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const ChunkRange r = chunk_range(meta, chunk);
    P* p = static_cast<P*>(meta.ptr[0][r.t]) + r.begin;
    const G* g = static_cast<const G*>(meta.ptr[1][r.t]) + r.begin;
    P* m = static_cast<P*>(meta.ptr[2][r.t]) + r.begin;
    P* v = static_cast<P*>(meta.ptr[3][r.t]) + r.begin;
    optim_math::AdamTensorCoeffs<P> tc = meta.extra[r.t];
    if (replay.index != nullptr) {
      const double step = static_cast<double>(replay.base_step + static_cast<int64_t>(*replay.index));
      const double bc1 = 1.0 - pow(replay.beta1, step), bc2 = 1.0 - pow(replay.beta2, step);
      tc = {static_cast<P>(replay.lr / bc1), static_cast<P>(sqrt(bc2))};
    }
    const bool vec = vec_aligned<P>(p) && vec_aligned<G>(g) && vec_aligned<P>(m) && vec_aligned<P>(v);
    const int64_t nv = vec ? r.n / kIlp * kIlp : 0;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * kIlp; i < nv; i += static_cast<int64_t>(blockDim.x) * kIlp) {
      Vec<P> pv = load_vec(p + i), mv = load_vec(m + i), vv = load_vec(v + i);
      const Vec<G> gv = load_vec(g + i);
#pragma unroll
      for (int k = 0; k < kIlp; ++k) optim_math::adam_update<P>(pv.v[k], load_as<P>(gv.v[k]), mv.v[k], vv.v[k], c, tc);
      store_vec(p + i, pv);
      store_vec(m + i, mv);
      store_vec(v + i, vv);
    }
    for (int64_t i = nv + threadIdx.x; i < r.n; i += blockDim.x) {
      P pe = p[i], me = m[i], ve = v[i];
      optim_math::adam_update<P>(pe, load_as<P>(g[i]), me, ve, c, tc);
      p[i] = pe;
      m[i] = me;
      v[i] = ve;
    }
  }
}

// ---- norm: per-block partial sums of squares into partial[blockIdx.x] ----
// Squares are taken and summed in double for every dtype, as the CPU twin does: in f32, |x| above
// ~1.8e19 squares to inf (exploding gradients, exactly when clipping matters, would get a norm of
// inf and be zeroed instead of scaled), |x| below ~1e-23 squares to 0, and long per-thread f32
// sums drift. The kernel stays bound by memory traffic.
template <typename T>
__global__ void __launch_bounds__(kBlock) sum_squares_kernel(TensorListMeta<1, NoExtra> meta, double* partial) {
  using A = double;
  __shared__ double smem[32];
  A acc = A(0);
  const int64_t total = meta.chunk_start[meta.count];
  for (int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const ChunkRange r = chunk_range(meta, chunk);
    const T* x = static_cast<const T*>(meta.ptr[0][r.t]) + r.begin;
    const int64_t nv = vec_aligned<T>(x) ? r.n / kIlp * kIlp : 0;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * kIlp; i < nv; i += static_cast<int64_t>(blockDim.x) * kIlp) {
      const Vec<T> xv = load_vec(x + i);
#pragma unroll
      for (int k = 0; k < kIlp; ++k) {
        const A e = load_as<A>(xv.v[k]);
        acc += e * e;
      }
    }
    for (int64_t i = nv + threadIdx.x; i < r.n; i += blockDim.x) {
      const A e = load_as<A>(x[i]);
      acc += e * e;
    }
  }
  const double sum = block_reduce(
      acc, [](double a, double b) { return a + b; }, 0.0, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

/// out = sqrt(sum of partial[0, n)), folded in a fixed order by one block.
template <typename O>
__global__ void __launch_bounds__(kBlock) finish_norm_kernel(const double* partial, int64_t n, O* out) {
  __shared__ double smem[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  const double sum = block_reduce(
      acc, [](double a, double b) { return a + b; }, 0.0, smem);
  if (threadIdx.x == 0) *out = static_cast<O>(sqrt(sum));
}

// ---- clip: x *= min(1, max_norm / (norm + eps)), the norm read from device memory ----
template <typename T, typename N>
__global__ void __launch_bounds__(kBlock)
    clip_kernel(TensorListMeta<1, NoExtra> meta, const N* norm, double max_norm, double eps) {
  using A = acc_t<T>;
  const A f = static_cast<A>(optim_math::clip_factor<double>(static_cast<double>(*norm), max_norm, eps));
  const int64_t total = meta.chunk_start[meta.count];
  for (int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const ChunkRange r = chunk_range(meta, chunk);
    T* x = static_cast<T*>(meta.ptr[0][r.t]) + r.begin;
    const int64_t nv = vec_aligned<T>(x) ? r.n / kIlp * kIlp : 0;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * kIlp; i < nv; i += static_cast<int64_t>(blockDim.x) * kIlp) {
      Vec<T> xv = load_vec(x + i);
#pragma unroll
      for (int k = 0; k < kIlp; ++k) xv.v[k] = store_as<T>(load_as<A>(xv.v[k]) * f);
      store_vec(x + i, xv);
    }
    for (int64_t i = nv + threadIdx.x; i < r.n; i += blockDim.x) x[i] = store_as<T>(load_as<A>(x[i]) * f);
  }
}

// ---- host side ----

/// Packs tensors 0..n-1 into launches of at most kMaxTensors: fill(i, ptrs, extra) gives tensor
/// i's Depth operand pointers and extra and returns its element count (0: skipped); launch(meta,
/// chunks) runs once per full or final pack.
template <int Depth, typename Extra, typename Fill, typename Launch>
void for_each_pack(size_t n, const Fill& fill, const Launch& launch) {
  TensorListMeta<Depth, Extra> meta{};
  meta.count = 0;
  meta.chunk_start[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    void* ptrs[Depth];
    Extra extra{};
    const int64_t numel = fill(i, ptrs, extra);
    if (numel == 0) continue;
    const int t = meta.count;
    for (int d = 0; d < Depth; ++d) meta.ptr[d][t] = ptrs[d];
    meta.numel[t] = numel;
    meta.extra[t] = extra;
    meta.chunk_start[t + 1] = meta.chunk_start[t] + (numel + kChunk - 1) / kChunk;
    meta.count = t + 1;
    if (meta.count == kMaxTensors) {
      launch(meta, meta.chunk_start[meta.count]);
      meta.count = 0;
    }
  }
  if (meta.count > 0) launch(meta, meta.chunk_start[meta.count]);
}

int update_grid(int64_t chunks) { return static_cast<int>(std::max<int64_t>(1, std::min(chunks, kMaxGrid))); }

/// Calls fn<P, G>() for a group's (param, grad) dtype pair.
template <typename Fn> void dispatch_pair(DType p, DType g, const char* op, const Fn& fn) {
  if (p == DType::f64 && g == DType::f64) return fn.template operator()<double, double>();
  if (p == DType::f32) {
    if (g == DType::f32) return fn.template operator()<float, float>();
    if (g == DType::f16) return fn.template operator()<float, Half>();
    if (g == DType::bf16) return fn.template operator()<float, BFloat16>();
  }
  EMBER_FAIL(op, " (cuda): unsupported parameter/gradient dtypes ", dtype_name(p), "/", dtype_name(g));
}

void sgd_step_cuda(const std::vector<SgdSlot>& slots, const SgdHyper& h) {
  if (slots.empty()) return;
  DeviceGuard guard(slots[0].param.device());
  const cudaStream_t stream = stream_of(slots[0].param);
  const bool momentum = h.momentum != 0.0;
  dispatch_pair(slots[0].param.dtype(), slots[0].grad.dtype(), "sgd_step", [&]<typename P, typename G>() {
    const auto c = optim_math::sgd_coeffs<P>(h);
    for_each_pack<3, SgdExtra>(
        slots.size(),
        [&](size_t i, void*(&ptrs)[3], SgdExtra& e) {
          const SgdSlot& s = slots[i];
          ptrs[0] = s.param.data_ptr();
          ptrs[1] = s.grad.data_ptr();
          ptrs[2] = momentum ? s.momentum_buffer.data_ptr() : nullptr;
          e.init_buffer = s.init_buffer;
          return s.param.numel();
        },
        [&](const TensorListMeta<3, SgdExtra>& meta, int64_t chunks) {
          if (momentum) sgd_kernel<P, G, true><<<update_grid(chunks), kBlock, 0, stream>>>(meta, c);
          else sgd_kernel<P, G, false><<<update_grid(chunks), kBlock, 0, stream>>>(meta, c);
          EMBER_LAUNCH_CHECK();
        });
  });
}

void adam_step_cuda(const std::vector<AdamSlot>& slots, const AdamHyper& h) {
  if (slots.empty()) return;
  DeviceGuard guard(slots[0].param.device());
  const cudaStream_t stream = stream_of(slots[0].param);
  AdamReplay replay;
  if (const uint64_t* index = ember::detail::capture_replay_index()) {
    for (const AdamSlot& s : slots)
      EMBER_CHECK(s.step == slots[0].step, "adam_step (cuda): inside a CUDA graph capture every parameter must be ",
                  "at one step count (the graph advances one count per replay), found ", slots[0].step, " and ",
                  s.step);
    replay = {reinterpret_cast<const unsigned long long*>(index), slots[0].step, h.lr, h.beta1, h.beta2};
  }
  dispatch_pair(slots[0].param.dtype(), slots[0].grad.dtype(), "adam_step", [&]<typename P, typename G>() {
    using Extra = optim_math::AdamTensorCoeffs<P>;
    const auto c = optim_math::adam_coeffs<P>(h);
    for_each_pack<4, Extra>(
        slots.size(),
        [&](size_t i, void*(&ptrs)[4], Extra& e) {
          const AdamSlot& s = slots[i];
          ptrs[0] = s.param.data_ptr();
          ptrs[1] = s.grad.data_ptr();
          ptrs[2] = s.exp_avg.data_ptr();
          ptrs[3] = s.exp_avg_sq.data_ptr();
          e = optim_math::adam_tensor_coeffs<P>(h, s.step);
          return s.param.numel();
        },
        [&](const TensorListMeta<4, Extra>& meta, int64_t chunks) {
          adam_kernel<P, G><<<update_grid(chunks), kBlock, 0, stream>>>(meta, c, replay);
          EMBER_LAUNCH_CHECK();
        });
  });
}

/// Tensor indices grouped by dtype, in first-seen order of the dtypes.
std::vector<std::vector<size_t>> group_by_dtype(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<size_t>> groups;
  std::vector<DType> keys;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto it = std::find(keys.begin(), keys.end(), tensors[i].dtype());
    if (it == keys.end()) {
      keys.push_back(tensors[i].dtype());
      groups.push_back({i});
    } else {
      groups[static_cast<size_t>(it - keys.begin())].push_back(i);
    }
  }
  return groups;
}

/// Runs fn(meta, chunks) for every pack of a dtype group (depth 1: the tensors themselves).
template <typename Fn>
void for_each_group_pack(const std::vector<Tensor>& tensors, const std::vector<size_t>& group, const Fn& fn) {
  for_each_pack<1, NoExtra>(
      group.size(),
      [&](size_t i, void*(&ptrs)[1], NoExtra&) {
        const Tensor& t = tensors[group[i]];
        ptrs[0] = t.data_ptr();
        return t.numel();
      },
      fn);
}

void global_norm_cuda(const std::vector<Tensor>& tensors, const Tensor& out) {
  launch_on(out, [&](cudaStream_t stream) {
    const auto groups = group_by_dtype(tensors);
    // One partial slot per block of every launch: count the launches first.
    int64_t launches = 0;
    for (const auto& g : groups) launches += (static_cast<int64_t>(g.size()) + kMaxTensors - 1) / kMaxTensors;
    Tensor partial =
        empty({std::max<int64_t>(1, launches * kNormMaxGrid)}, {.dtype = DType::f64, .device = out.device()});
    double* slots = partial.data<double>();
    int64_t used = 0;
    for (const auto& g : groups) {
      EMBER_DISPATCH_FLOAT(tensors[g[0]].dtype(), "global_norm (cuda)", [&]<typename T>() {
        for_each_group_pack(tensors, g, [&](const TensorListMeta<1, NoExtra>& meta, int64_t chunks) {
          const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, kNormMaxGrid)));
          sum_squares_kernel<T><<<grid, kBlock, 0, stream>>>(meta, slots + used);
          EMBER_LAUNCH_CHECK();
          used += grid;
        });
      });
    }
    if (out.dtype() == DType::f64)
      finish_norm_kernel<double><<<1, kBlock, 0, stream>>>(slots, used, out.data<double>());
    else finish_norm_kernel<float><<<1, kBlock, 0, stream>>>(slots, used, out.data<float>());
  });
}

void clip_by_norm_cuda(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm, double eps) {
  launch_on(total_norm, [&](cudaStream_t stream) {
    for (const auto& g : group_by_dtype(tensors)) {
      EMBER_DISPATCH_FLOAT(tensors[g[0]].dtype(), "clip_by_norm_ (cuda)", [&]<typename T>() {
        for_each_group_pack(tensors, g, [&](const TensorListMeta<1, NoExtra>& meta, int64_t chunks) {
          if (total_norm.dtype() == DType::f64)
            clip_kernel<T, double>
                <<<update_grid(chunks), kBlock, 0, stream>>>(meta, total_norm.data<double>(), max_norm, eps);
          else
            clip_kernel<T, float>
                <<<update_grid(chunks), kBlock, 0, stream>>>(meta, total_norm.data<float>(), max_norm, eps);
          EMBER_LAUNCH_CHECK();
        });
      });
    }
  });
}

}  // namespace

void register_optim() {
  sgd_step_table.set(DeviceType::CUDA, &sgd_step_cuda);
  adam_step_table.set(DeviceType::CUDA, &adam_step_cuda);
  global_norm_table.set(DeviceType::CUDA, &global_norm_cuda);
  clip_by_norm_table.set(DeviceType::CUDA, &clip_by_norm_cuda);
}

}  // namespace ember::kernels::cuda
