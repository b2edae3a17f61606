// CUDA copy / cast / fill (kernels/cuda/copy.cu) and host<->device transfers against the CPU twin.
// Casts on both devices go through the same convert<D>(s) (kernels/convert.h), fills store the
// same converted value, and transfers move raw bytes, so every comparison here is exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include "support/reference.h"
#include "support/skip.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);
const DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                           DType::i32, DType::i64, DType::u8,  DType::boolean};

void expect_equal(const Tensor& gpu, const Tensor& cpu) {
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(cpu.device().is_cpu());
  REQUIRE(gpu.sizes() == cpu.sizes());
  REQUIRE(gpu.dtype() == cpu.dtype());
  check_close(gpu, to_f64(cpu), 0, 0);
}

/// Values in [lo, hi) for dtype dt; bool gets a 0/1 mix (random_tensor would store v != 0).
std::vector<double> values_for(DType dt, int64_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> v = random_values(n, seed, dt == DType::boolean ? 0.0 : lo, dt == DType::boolean ? 2.0 : hi);
  if (dt == DType::boolean)
    for (double& x : v) x = std::floor(x);
  return v;
}

}  // namespace

TEST_CASE("cuda cast between every pair of dtypes matches the CPU exactly", "[cuda]") {
  for (DType s : kAllTypes) {
    // [0, 120) fits every target (u8 and bool included); fractional parts exercise truncation.
    const Tensor base = from_vector(values_for(s, 37 * 29, 101, 0.0, 120.0), {37, 29}, {.dtype = s});
    const Tensor base_neg = from_vector(values_for(s, 1001, 102, -100.0, 100.0), {1001}, {.dtype = s});
    for (DType d : kAllTypes) {
      INFO(dtype_name(s) << " -> " << dtype_name(d));
      expect_equal(kernels::cast(base.to(kGpu), d), kernels::cast(base, d));
      // Transposed source: the strided (non-memcpy) path, with a cast.
      expect_equal(kernels::cast(base.to(kGpu).t(), d), kernels::cast(base.t(), d));
      if (s != DType::u8 && d != DType::u8)  // negative values have no u8 meaning
        expect_equal(kernels::cast(base_neg.to(kGpu), d), kernels::cast(base_neg, d));
    }
  }
}

TEST_CASE("cuda casts of special values round like the CPU", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v{1e5,
                              -1e5,
                              65504,
                              65520,
                              65519.99,
                              1e-8,
                              -1e-8,
                              6e-8,
                              3e-8,
                              nan,
                              inf,
                              -inf,
                              -0.0,
                              1.0 + 1.0 / 1024 + 1.0 / 2048,
                              3.14159265358979,
                              1.00390625,
                              1.005859375};
  for (DType s : {DType::f32, DType::f64}) {
    const Tensor c = from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = s});
    for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64, DType::boolean}) {
      INFO(dtype_name(s) << " -> " << dtype_name(d));
      expect_equal(kernels::cast(c.to(kGpu), d), kernels::cast(c, d));
    }
  }
}

TEST_CASE("cuda copy into strided destinations from broadcast and strided sources", "[cuda]") {
  for (DType dt : {DType::f32, DType::f16, DType::f64, DType::i64, DType::boolean}) {
    INFO(dtype_name(dt));
    // dst: the transpose of a (31, 23) buffer, i.e. a (23, 31) view with strides (1, 23).
    Tensor dc = from_vector(values_for(dt, 31 * 23, 111, -50, 50), {31, 23}, {.dtype = dt});
    Tensor dg = dc.to(kGpu);
    // src: a (31) row broadcast over 23 rows, in f32 (so the copy also casts unless dt is f32).
    const Tensor row = from_vector(values_for(DType::f32, 31, 112, -50, 50), {31}, {.dtype = DType::f32});
    kernels::copy(dc.t(), row);
    kernels::copy(dg.t(), row.to(kGpu));
    expect_equal(dg, dc);
    // dst: every other column of a (17, 40) buffer; src: a transposed (20, 17) tensor of dt.
    Tensor ec = from_vector(values_for(dt, 17 * 40, 113, -50, 50), {17, 40}, {.dtype = dt});
    Tensor eg = ec.to(kGpu);
    const Tensor src = from_vector(values_for(dt, 20 * 17, 114, -50, 50), {20, 17}, {.dtype = dt});
    kernels::copy(ec.slice(1, 0, 40, 2), src.t());
    kernels::copy(eg.slice(1, 0, 40, 2), src.to(kGpu).t());
    expect_equal(eg, ec);  // the untouched odd columns must have survived too
  }
}

TEST_CASE("cuda same-dtype copies: memcpy, strided and misaligned paths", "[cuda]") {
  for (DType dt : kAllTypes) {
    INFO(dtype_name(dt));
    const Tensor c = from_vector(values_for(dt, 3 * 41 * 19, 121, -9, 9), {3, 41, 19}, {.dtype = dt});
    const Tensor g = c.to(kGpu);
    expect_equal(g.permute({2, 0, 1}).contiguous(), c.permute({2, 0, 1}).contiguous());
    expect_equal(g.clone(), c);
    // Misaligned contiguous source and destination (offset by one element).
    Tensor dc = from_vector(values_for(dt, 1002, 122, -9, 9), {1002}, {.dtype = dt});
    Tensor dg = dc.to(kGpu);
    const Tensor sc = from_vector(values_for(dt, 1002, 123, -9, 9), {1002}, {.dtype = dt});
    kernels::copy(dc.narrow(0, 1, 1001), sc.narrow(0, 0, 1001));
    kernels::copy(dg.narrow(0, 1, 1001), sc.to(kGpu).narrow(0, 0, 1001));
    expect_equal(dg, dc);
  }
}

TEST_CASE("cuda fill matches the CPU on contiguous and strided destinations", "[cuda]") {
  for (DType dt : kAllTypes) {
    for (double value : {0.0, 0.1, -2.75, 3.0}) {
      if (dt == DType::u8 && value < 0) continue;
      INFO(dtype_name(dt) << " value " << value);
      Tensor c = from_vector(values_for(dt, 33 * 26, 131, 0, 9), {33, 26}, {.dtype = dt});
      Tensor g = c.to(kGpu);
      kernels::fill(c.slice(1, 1, 26, 2), value);  // strided view: every other column from 1
      kernels::fill(g.slice(1, 1, 26, 2), value);
      expect_equal(g, c);
      kernels::fill(c, value);  // contiguous (0.0 takes the memset path)
      kernels::fill(g, value);
      expect_equal(g, c);
      Tensor m = from_vector(values_for(dt, 1001, 132, 0, 9), {1001}, {.dtype = dt}).to(kGpu);
      kernels::fill(m.narrow(0, 1, 1000), value);  // misaligned
      std::vector<double> expect = to_f64(m);
      const double stored = round_to(dt, value);
      for (size_t i = 1; i < expect.size(); ++i) CHECK(expect[i] == stored);
    }
  }
  // -0.0 keeps its sign bit (not the all-zero memset).
  Tensor z = empty({1000}, {.dtype = DType::f32, .device = kGpu});
  kernels::fill(z, -0.0);
  const std::vector<float> zv = z.to_vector<float>();
  CHECK(std::signbit(zv[0]));
  CHECK(std::signbit(zv[999]));
}

TEST_CASE("cuda transfers round-trip every dtype bit for bit", "[cuda]") {
  for (DType dt : kAllTypes) {
    INFO(dtype_name(dt));
    const Tensor c = from_vector(values_for(dt, 4097, 141, -100, 100), {4097}, {.dtype = dt});
    const Tensor g = c.to(kGpu);
    CHECK(g.device() == kGpu);
    expect_equal(g, c);
    const Tensor back = g.to(Device::cpu());
    CHECK(to_f64(back) == to_f64(c));
    // Non-contiguous on either side: the front stages a contiguous copy first.
    const Tensor ct = from_vector(values_for(dt, 29 * 31, 142, -100, 100), {29, 31}, {.dtype = dt}).t();
    expect_equal(ct.to(kGpu), ct.contiguous());
    const Tensor gt = ct.contiguous().to(kGpu).t();
    CHECK(to_f64(gt.to(Device::cpu())) == to_f64(ct.contiguous().t()));
  }
  // copy_ across devices with broadcasting and a cast into a strided GPU view.
  Tensor dc = from_vector(values_for(DType::f16, 19 * 40, 143, -5, 5), {19, 40}, {.dtype = DType::f16});
  Tensor dg = dc.to(kGpu);
  const Tensor src = from_vector(values_for(DType::f32, 20, 144, -5, 5), {20}, {.dtype = DType::f32});
  kernels::copy(dc.slice(1, 0, 40, 2), src);
  kernels::copy(dg.slice(1, 0, 40, 2), src);  // src stays on the CPU
  expect_equal(dg, dc);
  Tensor hc = empty({20, 19}, {.dtype = DType::f64});
  kernels::copy(hc, dg.slice(1, 1, 40, 2).t());  // GPU strided f16 -> CPU f64
  check_close(hc, to_f64(dc.slice(1, 1, 40, 2).t()), 0, 0);
}

TEST_CASE("cuda transfer of 2^24+ elements", "[cuda][slow]") {
  const int64_t n = int64_t(4097) * 4099;  // >= 2^24, and a (4097, 4099) view below
  const Tensor c = random_tensor({n}, DType::f32, 151, -1, 1);
  const Tensor g = c.to(kGpu);
  const Tensor back = g.to(Device::cpu());
  CHECK(to_f64(back) == to_f64(c));
  // Large strided cast on the device.
  const Tensor gt = g.view({4097, 4099}).t();
  expect_equal(kernels::cast(gt, DType::bf16), kernels::cast(c.view({4097, 4099}).t(), DType::bf16));
}

TEST_CASE("cuda peer copies between two GPUs", "[cuda]") {
  if (cuda_device_count() < 2) EMBER_SKIP("only " << cuda_device_count() << " GPU: no peer to copy to");
  const Device g1 = Device::cuda(1);
  const Tensor c = from_vector(values_for(DType::f32, 30001, 161, -1, 1), {30001}, {.dtype = DType::f32});
  const Tensor a = c.to(kGpu);
  const Tensor b = a.to(g1);
  CHECK(b.device() == g1);
  CHECK(to_f64(b) == to_f64(c));
  CHECK(to_f64(b.to(kGpu)) == to_f64(c));
  // Strided destination on cuda:1 (column 0 of a (30001, 2) f16 tensor) from a cuda:0 f32 source.
  Tensor d = from_vector(values_for(DType::f16, 2 * 30001, 162, -1, 1), {30001, 2}, {.dtype = DType::f16}).to(g1);
  const std::vector<double> before = to_f64(d);
  kernels::copy(d.slice(1, 0, 1).squeeze(1), a);
  const std::vector<double> after = to_f64(d), cv = to_f64(c);
  int bad = 0;
  for (size_t i = 0; i < cv.size(); ++i) {
    if (after[2 * i] != round_to(DType::f16, cv[i])) ++bad;
    if (after[2 * i + 1] != before[2 * i + 1]) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda strided copies with offsets past 2^31 take the 64-bit indexing path", "[cuda][slow]") {
  // A 2 GiB u8 buffer and a (3, 5) view with row stride 2^30 and column stride 3: the view has 15
  // elements but its last row lies past 2^31, so no 32-bit offset can reach it.
  const int64_t big = (int64_t(1) << 31) + 64;
  Tensor buf = empty({big}, {.dtype = DType::u8, .device = kGpu});
  kernels::fill(buf, 7.0);
  const Tensor view = as_strided_raw(buf, {3, 5}, {int64_t(1) << 30, 3}, 1);
  std::vector<double> vals(15);
  for (int i = 0; i < 15; ++i) vals[i] = 10 + i;
  kernels::copy(view, from_vector(vals, {3, 5}, {.dtype = DType::u8}));  // strided destination, 64-bit
  check_close(view, vals, 0, 0);  // strided source, 64-bit
  check_close(kernels::cast(view, DType::f32), vals, 0, 0);
  std::vector<double> twice(vals);
  for (double& v : twice) v *= 2;
  check_close(kernels::binary(kernels::BinaryOp::Add, view, view), twice, 0, 0);
  // The bytes between the view's elements kept the fill value.
  check_close(buf.narrow(0, 2, 2), {7, 7}, 0, 0);
  check_close(buf.narrow(0, (int64_t(1) << 31) + 2, 2), {7, 7}, 0, 0);
}

TEST_CASE("cuda copy, fill and transfer accept zero-element tensors", "[cuda]") {
  // Through the tables, past the front's numel == 0 return: the launchers' own guards run.
  for (const Shape& shape : {Shape{0}, Shape{4, 0}}) {
    INFO("shape " << shape_str(shape));
    const Tensor a = empty(shape, {.dtype = DType::f32, .device = kGpu}),
                 b = empty(shape, {.dtype = DType::f16, .device = kGpu});
    CHECK_NOTHROW(kernels::copy_table(kGpu, a, empty(shape, {.dtype = DType::f32, .device = kGpu})));  // memcpy path
    CHECK_NOTHROW(kernels::copy_table(kGpu, a, b));  // cast path
    if (shape.size() == 2)
      CHECK_NOTHROW(kernels::copy_table(kGpu, a.t(), empty({0, 4}, {.dtype = DType::f32, .device = kGpu})));
    CHECK_NOTHROW(kernels::fill_table(kGpu, a, 0.0));  // memset path
    CHECK_NOTHROW(kernels::fill_table(kGpu, b, 1.5));  // kernel path
    CHECK(a.to(Device::cpu()).sizes() == shape);
    CHECK(empty(shape, {.dtype = DType::i64}).to(kGpu).sizes() == shape);
  }
  CHECK_NOTHROW(kernels::transfer_table(kGpu, nullptr, kGpu, nullptr, Device::cpu(), 0));
  CHECK_NOTHROW(synchronize(kGpu));
}
