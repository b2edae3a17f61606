// CUDA sampling (kernels/cuda/random.cu) against the CPU twin for the same seed and offset.
//
// uniform and bernoulli must be bit-identical: both devices turn the same Philox words into values
// with the same exactly-rounded operations (the CUDA kernel keeps its multiply-add unfused).
// normal goes through logf/sqrtf/sinf/cosf, where the device math library and the host libm differ
// by a few ulps: allowed |gpu - cpu| <= loose_tol(dt) * (|cpu| + 1), i.e. one rounding of the storage
// dtype at the scale of an N(0, 1) draw. The GPU values are also checked on their own: the layout
// convention of core/rng.h element by element, and the moments of the distributions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/kernels/random.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
constexpr uint64_t kSeed = 0x5eed1234abcdull;
constexpr uint64_t kOffset = 17;

enum class Dist { Uniform, Normal, Bernoulli };

void sample(Dist d, const Tensor& t, double a, double b, Generator& gen) {
  if (d == Dist::Uniform) kernels::uniform_(t, a, b, gen);
  else if (d == Dist::Normal) kernels::normal_(t, a, b, gen);
  else kernels::bernoulli_(t, a, gen);
}

/// Draws into `gpu` and `cpu` from two generators with the same seed and offset, twice (the second
/// draw checks that both advanced the offset alike), comparing each time.
void compare(Dist d, const Tensor& gpu, const Tensor& cpu, double a, double b) {
  Generator gg(kSeed), gc(kSeed);
  gg.set_offset(kOffset);
  gc.set_offset(kOffset);
  const double t = d == Dist::Normal ? loose_tol(cpu.dtype()) : 0.0;
  for (int round = 0; round < 2; ++round) {
    INFO("draw " << round);
    sample(d, gpu, a, b, gg);
    sample(d, cpu, a, b, gc);
    check_close(gpu, to_f64(cpu), t, t);
    CHECK(gg.offset() == gc.offset());
    CHECK(gg.offset() == kOffset + static_cast<uint64_t>(round + 1) * ((cpu.numel() + 3) / 4));
  }
}

}  // namespace

TEST_CASE("cuda uniform_, normal_ and bernoulli_ agree with the CPU for the same seed and offset", "[cuda]") {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 3, 4, 5, 1001, 4099}) {
      INFO(dtype_name(dt) << " n=" << n);
      compare(Dist::Uniform, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), 0.0, 1.0);
      compare(Dist::Uniform, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), -2.5, 7.25);
      // A narrow interval where rounding to f16/bf16 would land on hi without the step-down.
      compare(Dist::Uniform, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), 0.999, 1.0);
      compare(Dist::Normal, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), 0.0, 1.0);
      compare(Dist::Normal, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), 3.0, 0.5);
      for (double p : {0.0, 0.3, 1.0})
        compare(Dist::Bernoulli, empty({n}, {.dtype = dt, .device = kGpu}), empty({n}, {.dtype = dt}), p, 0.0);
    }
  }
  for (DType dt : {DType::boolean, DType::u8, DType::i32, DType::i64}) {
    INFO(dtype_name(dt));
    compare(Dist::Bernoulli, empty({2051}, {.dtype = dt, .device = kGpu}), empty({2051}, {.dtype = dt}), 0.3, 0.0);
  }
}

TEST_CASE("cuda sampling into misaligned and non-contiguous views agrees with the CPU", "[cuda]") {
  for (DType dt : kFloatTypes) {
    INFO(dtype_name(dt));
    // Contiguous but one element into the buffer: the kernel's scalar-store path.
    compare(Dist::Uniform, empty({1002}, {.dtype = dt, .device = kGpu}).narrow(0, 1, 1001),
            empty({1002}, {.dtype = dt}).narrow(0, 1, 1001), -1.0, 1.0);
    compare(Dist::Normal, empty({1002}, {.dtype = dt, .device = kGpu}).narrow(0, 1, 1001),
            empty({1002}, {.dtype = dt}).narrow(0, 1, 1001), 0.0, 2.0);
    // Transposed: the front samples into a contiguous temporary and copies it over.
    compare(Dist::Uniform, empty({37, 23}, {.dtype = dt, .device = kGpu}).t(), empty({37, 23}, {.dtype = dt}).t(), 0.0,
            1.0);
    compare(Dist::Bernoulli, empty({37, 46}, {.dtype = dt, .device = kGpu}).slice(1, 0, 46, 2),
            empty({37, 46}, {.dtype = dt}).slice(1, 0, 46, 2), 0.5, 0.0);
  }
}

TEST_CASE("cuda uniform_ follows the Philox layout convention element by element", "[cuda]") {
  // U[0, 1) in f32 is exactly uint_to_unit_float of lane i % 4 of block offset + i / 4.
  const int64_t n = 4103;
  Generator gen(kSeed);
  gen.set_offset(kOffset);
  const Tensor g = empty({n}, {.dtype = DType::f32, .device = kGpu});
  kernels::uniform_(g, 0.0, 1.0, gen);
  const std::vector<float> got = g.to_vector<float>();
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != uint_to_unit_float(philox_element(kSeed, kOffset, static_cast<uint64_t>(i)))) ++bad;
  CHECK(bad == 0);
}

TEST_CASE("cuda samples have the right moments", "[cuda]") {
  const int64_t n = 200003;
  Generator gen(99);
  const Tensor u = empty({n}, {.dtype = DType::f32, .device = kGpu});
  kernels::uniform_(u, -1.0, 3.0, gen);
  const Tensor z = empty({n}, {.dtype = DType::f32, .device = kGpu});
  kernels::normal_(z, 0.5, 2.0, gen);
  const Tensor bern = empty({n}, {.dtype = DType::f32, .device = kGpu});
  kernels::bernoulli_(bern, 0.25, gen);
  auto moments = [](const std::vector<double>& v) {
    double s = 0, s2 = 0;
    for (double x : v) s += x;
    const double m = s / static_cast<double>(v.size());
    for (double x : v) s2 += (x - m) * (x - m);
    return std::pair<double, double>{m, s2 / static_cast<double>(v.size())};
  };
  const double k = 6.0 / std::sqrt(static_cast<double>(n));  // 6 standard errors (unit variance)
  const std::vector<double> uv = to_f64(u);
  int64_t outside = 0;
  for (double x : uv) outside += (x >= -1.0 && x < 3.0) ? 0 : 1;
  CHECK(outside == 0);
  auto [um, uvar] = moments(uv);
  CHECK(std::fabs(um - 1.0) < k * std::sqrt(16.0 / 12.0));  // U[-1, 3): mean 1, variance 16/12
  CHECK(std::fabs(uvar - 16.0 / 12.0) < k * 16.0 / 12.0 * 1.2);
  auto [zm, zvar] = moments(to_f64(z));
  CHECK(std::fabs(zm - 0.5) < k * 2.0);  // N(0.5, 4)
  CHECK(std::fabs(zvar - 4.0) < k * 4.0 * std::sqrt(2.0));
  auto [bm, bvar] = moments(to_f64(bern));
  CHECK(std::fabs(bm - 0.25) < k * std::sqrt(0.25 * 0.75));
}

TEST_CASE("cuda sampling past one full grid agrees with the CPU", "[cuda][slow]") {
  // One thread per Philox block of 4 elements over a grid capped at 2^24 threads: past 2^26
  // elements the grid-stride loop runs a second round; the + 3 leaves a partial last block.
  const int64_t n = (int64_t(1) << 26) + (int64_t(1) << 20) + 3;
  compare(Dist::Uniform, empty({n}, {.dtype = DType::f32, .device = kGpu}), empty({n}, {.dtype = DType::f32}), -1.0,
          1.0);
  compare(Dist::Normal, empty({n}, {.dtype = DType::f32, .device = kGpu}), empty({n}, {.dtype = DType::f32}), 0.0, 1.0);
  compare(Dist::Bernoulli, empty({n}, {.dtype = DType::bf16, .device = kGpu}), empty({n}, {.dtype = DType::bf16}), 0.7,
          0.0);
}

TEST_CASE("cuda sampling into zero-element tensors launches nothing and keeps the offset", "[cuda]") {
  for (DType dt : {DType::f32, DType::f64, DType::boolean}) {
    INFO(dtype_name(dt));
    const Tensor t = empty({3, 0}, {.dtype = dt, .device = kGpu});
    CHECK_NOTHROW(kernels::sample_table(kGpu, kernels::Distribution::Bernoulli, t, 0.5, 0.0, kSeed, kOffset));
    Generator gen(kSeed);
    gen.set_offset(kOffset);
    if (is_floating(dt)) kernels::normal_(t, 0.0, 1.0, gen);
    kernels::bernoulli_(t, 0.5, gen);
    CHECK(gen.offset() == kOffset);  // ceil(0 / 4) = 0 blocks consumed
  }
  CHECK_NOTHROW(synchronize(kGpu));
}
