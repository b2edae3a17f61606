// CPU sampling. Work is split by Philox block (4 elements), so each block is computed once and
// the result does not depend on the thread count.
#include <type_traits>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/loops.h>
#include <ember/kernels/random.h>
#include <ember/kernels/random_math.h>

namespace ember::kernels::cpu {
namespace {

// Calls fill(r, vals) once per Philox block; fill writes the block's 4 values, of which the
// first min(4, n - 4 * block) are stored.
template <typename T, typename BlockFn>
void for_each_block(const Tensor& t, uint64_t seed, uint64_t offset, BlockFn fill) {
  T* p = static_cast<T*>(t.data_ptr());
  const int64_t n = t.numel();
  const int64_t nblocks = (n + 3) / 4;
  parallel_for(0, nblocks, kGrain / 16, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const Philox4 r = philox4x32(seed, offset + static_cast<uint64_t>(blk));
      T vals[4];
      fill(r, vals);
      const int64_t base = blk * 4;
      const int lanes = static_cast<int>(std::min<int64_t>(4, n - base));
      for (int lane = 0; lane < lanes; ++lane) p[base + lane] = vals[lane];
    }
  });
}

// Per-lane value functions lifted to whole blocks.
template <typename T, typename ValueFn> auto per_lane(ValueFn value) {
  return [value](const Philox4& r, T* vals) {
    for (int lane = 0; lane < 4; ++lane) vals[lane] = value(r, lane);
  };
}

void sample_impl(Distribution dist, const Tensor& t, double a, double b, uint64_t seed, uint64_t offset) {
  // The front (kernels/random.cpp: sample) samples other views into a contiguous temporary: debug-only.
  EMBER_DEBUG_ASSERT(t.is_contiguous(), "sample (cpu): expected a contiguous tensor, got shape ", t.shape_str(),
                     " strides ", shape_str(t.strides()));
  switch (dist) {
    case Distribution::Uniform:
      EMBER_DISPATCH_FLOAT(t.dtype(), "uniform_", [&]<typename T>() {
        for_each_block<T>(t, seed, offset, per_lane<T>([a, b](const Philox4& r, int lane) {
                            return uniform_value<T>(r.v[lane], a, b);
                          }));
      });
      return;
    case Distribution::Normal:
      // Each Box-Muller pair fills two lanes, so one log/sqrt/sincos serves two elements.
      EMBER_DISPATCH_FLOAT(t.dtype(), "normal_", [&]<typename T>() {
        if constexpr (std::is_same_v<T, double>) {
          for_each_block<T>(t, seed, offset, [a, b](const Philox4& r, double* vals) {
            for (int pair = 0; pair < 2; ++pair) {
              double z0, z1;
              normal_pair_f64(r, pair, z0, z1);
              vals[2 * pair] = a + b * z0;
              vals[2 * pair + 1] = a + b * z1;
            }
          });
        } else {
          const float mean = static_cast<float>(a), std = static_cast<float>(b);
          for_each_block<T>(t, seed, offset, [mean, std](const Philox4& r, T* vals) {
            for (int pair = 0; pair < 2; ++pair) {
              float z0, z1;
              normal_pair_f32(r, pair, z0, z1);
              vals[2 * pair] = T(mean + std * z0);
              vals[2 * pair + 1] = T(mean + std * z1);
            }
          });
        }
      });
      return;
    case Distribution::Bernoulli:
      EMBER_DISPATCH_ALL(t.dtype(), "bernoulli_", [&]<typename T>() {
        for_each_block<T>(t, seed, offset, per_lane<T>([a](const Philox4& r, int lane) {
                            return convert<T>(static_cast<double>(uint_to_unit_float(r.v[lane])) < a ? 1.0 : 0.0);
                          }));
      });
      return;
  }
  EMBER_FAIL("sample (cpu): unknown distribution");
}

}  // namespace

void register_random() { sample_table.set(DeviceType::CPU, &sample_impl); }

}  // namespace ember::kernels::cpu
