// CUDA sampling: uniform, normal (Box-Muller), bernoulli on the counter-based Philox generator.
//
// Shape of the kernel: one thread per Philox block (4 elements), grid-stride over the
// ceil(n / 4) blocks, 64-bit indices. Element i of the request uses block (offset + i / 4),
// lane i % 4 (core/rng.h), so a thread computes one philox4x32 call and writes its 4 consecutive
// outputs: one 16-byte store for f32 (8 bytes for f16/bf16) when the tensor's base is aligned, a
// scalar store per lane otherwise and for the last, partial block. Nothing depends on the launch
// geometry, so CPU and GPU draw the same numbers for the same seed and offset.
//
// The per-element transforms are kernels/random_math.h, shared with the CPU twin
// (kernels/cpu/random.cpp). One thing differs on purpose: nvcc contracts a * b + c into a fused
// multiply-add by default, which the CPU build does not, so the affine steps (lo + (hi - lo) * u
// for uniform, mean + std * z for normal) are written here with explicit round-to-nearest
// intrinsics (__dmul_rn / __dadd_rn / __fmul_rn / __fadd_rn never fuse). With that, uniform and
// bernoulli are bit-identical to the CPU; normal differs only by the ulps of the device's
// logf/sinf/cosf against the host libm.
#include <type_traits>

#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/random.h>
#include <ember/kernels/random_math.h>
#include <ember/kernels/cuda/loops.cuh>

namespace ember::kernels::cuda {
namespace {

/// kernels/random_math.h's uniform_value with the multiply-add kept unfused (see the top comment).
/// Keep the two in step.
template <typename T> __device__ inline T uniform_value_unfused(uint32_t bits, double lo, double hi) {
  const double u = static_cast<double>(uint_to_unit_float(bits));
  const double v = __dadd_rn(lo, __dmul_rn(hi - lo, u));
  T t = convert<T>(v);
  if (hi > lo && static_cast<double>(static_cast<opmath_t<T>>(t)) >= hi) t = next_below(convert<T>(hi));
  return t;
}

template <typename T> struct UniformF {
  double lo, hi;
  __device__ T operator()(const Philox4& r, int lane) const { return uniform_value_unfused<T>(r.v[lane], lo, hi); }
};

template <typename T> struct NormalF {
  double mean, std;
  __device__ T operator()(const Philox4& r, int lane) const {
    if constexpr (std::is_same_v<T, double>) {
      return __dadd_rn(mean, __dmul_rn(std, normal_value_f64(r, lane)));
    } else {  // f32 math, as the CPU twin: mean and std rounded to float first
      const float m = static_cast<float>(mean), s = static_cast<float>(std);
      return T(__fadd_rn(m, __fmul_rn(s, normal_value_f32(r, lane))));
    }
  }
};

template <typename T> struct BernoulliF {
  double p;
  __device__ T operator()(const Philox4& r, int lane) const {
    return convert<T>(static_cast<double>(uint_to_unit_float(r.v[lane])) < p ? 1.0 : 0.0);
  }
};

// out[i] for i in [0, n): block b = i / 4 of the request is Philox counter offset + b.
// kVecStore: out is aligned to 4 * sizeof(T), so a full block is one Vec<T, 4> store.
template <bool kVecStore, typename T, typename F>
__global__ void __launch_bounds__(kBlock) sample_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, F f) {
  const int64_t nblocks = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < nblocks; blk += stride) {
    const Philox4 r = philox4x32(seed, offset + static_cast<uint64_t>(blk));
    const int64_t base = blk * 4;
    if (kVecStore && base + 4 <= n) {
      Vec<T, 4> v;
#pragma unroll
      for (int lane = 0; lane < 4; ++lane) v.v[lane] = f(r, lane);
      *reinterpret_cast<Vec<T, 4>*>(out + base) = v;
    } else {
      const int lanes = static_cast<int>(n - base < 4 ? n - base : 4);
      for (int lane = 0; lane < lanes; ++lane) out[base + lane] = f(r, lane);
    }
  }
}

template <typename T, typename F> void launch_sample(const Tensor& t, uint64_t seed, uint64_t offset, const F& f) {
  launch_on(t, [&](cudaStream_t stream) {
    const int64_t n = t.numel();
    T* p = static_cast<T*>(t.data_ptr());
    const int grid = grid_for((n + 3) / 4);
    // Vec<T, 4> is at most 16 bytes (f64: 32 bytes would exceed one vector access; keep scalar).
    if constexpr (sizeof(T) <= 4) {
      if (is_aligned(p, 4 * sizeof(T))) {
        sample_kernel<true, T><<<grid, kBlock, 0, stream>>>(p, n, seed, offset, f);
        return;
      }
    }
    sample_kernel<false, T><<<grid, kBlock, 0, stream>>>(p, n, seed, offset, f);
  });
}

void sample_impl(Distribution dist, const Tensor& t, double a, double b, uint64_t seed, uint64_t offset) {
  // The front (kernels/random.cpp: sample) samples other views into a contiguous temporary: debug-only.
  EMBER_DEBUG_ASSERT(t.is_contiguous(), "sample (cuda): expected a contiguous tensor, got shape ", t.shape_str(),
                     " strides ", shape_str(t.strides()));
  switch (dist) {
    case Distribution::Uniform:
      EMBER_DISPATCH_FLOAT(t.dtype(), "uniform_", [&]<typename T>() {
        launch_sample<T>(t, seed, offset, UniformF<T>{a, b});
      });
      return;
    case Distribution::Normal:
      EMBER_DISPATCH_FLOAT(t.dtype(), "normal_", [&]<typename T>() {
        launch_sample<T>(t, seed, offset, NormalF<T>{a, b});
      });
      return;
    case Distribution::Bernoulli:
      EMBER_DISPATCH_ALL(t.dtype(), "bernoulli_",
                         [&]<typename T>() { launch_sample<T>(t, seed, offset, BernoulliF<T>{a}); });
      return;
  }
  EMBER_FAIL("sample (cuda): unknown distribution ", static_cast<int>(dist));
}

}  // namespace

void register_random() { sample_table.set(DeviceType::CUDA, &sample_impl); }

}  // namespace ember::kernels::cuda
