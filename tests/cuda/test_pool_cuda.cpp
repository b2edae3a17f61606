// CUDA pooling (kernels/cuda/pool.cu) against float64 references computed here and against the
// CPU twin (kernels/cpu/pool.cpp): max (values and arg-max indices exactly), average
// (count_include_pad on and off, ceil_mode), adaptive average (shrinking and growing), and all
// backwards, in f32, f64, f16 and bf16, on odd shapes and non-contiguous inputs.
//
// Error bounds: a max is exact. A window sum of K terms whose magnitudes sum to A, divided by
// the count, may err by loose_tol_sum(acc, K) * A / count (acc: f32 for f16/bf16/f32, f64 for f64),
// plus loose_tol(dt) * |ref| for the store (and half an f16 subnormal step). The max-pool backward adds
// its c contributions with atomics in the storage type: c * loose_tol(dt) * A.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/pool.h>
#include "cuda/device_memory.h"
#include "cuda/expect.h"
#include "support/reference.h"
#include "support/skip.h"

using namespace ember;
using namespace ember::testing;
using kernels::Pool2dParams;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct Case {
  Shape x;  // (N, C, H, W)
  Pool2dParams p;
};

Pool2dParams pp(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool ceil) {
  Pool2dParams p;
  p.kernel_h = kh, p.kernel_w = kw, p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.ceil_mode = ceil;
  return p;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {{2, 3, 7, 9}, pp(3, 3, 2, 2, 1, 1, false)},  {{1, 2, 8, 8}, pp(2, 2, 2, 2, 0, 0, false)},  // mnist_cnn's pool
      {{2, 2, 9, 7}, pp(3, 3, 1, 1, 1, 1, false)},  // overlapping windows
      {{1, 3, 10, 11}, pp(3, 2, 2, 3, 1, 0, true)},  // asymmetric, ceil_mode
      {{3, 1, 5, 5}, pp(2, 2, 2, 2, 0, 0, true)},  // ceil_mode: partial last window
      {{2, 5, 13, 6}, pp(4, 3, 3, 2, 2, 1, false)},  // padding = kernel / 2
      {{1, 1, 1, 1}, pp(1, 1, 1, 1, 0, 0, false)},
  };
  return cs;
}

std::string case_str(const Case& k) {
  std::ostringstream os;
  os << "x " << shape_str(k.x) << ", kernel (" << k.p.kernel_h << ", " << k.p.kernel_w << "), stride (" << k.p.stride_h
     << ", " << k.p.stride_w << "), pad (" << k.p.pad_h << ", " << k.p.pad_w << ")"
     << (k.p.ceil_mode ? ", ceil_mode" : "") << (k.p.count_include_pad ? "" : ", exclude pad");
  return os.str();
}

struct Dims {
  int64_t planes, h, w, ho, wo;
};
Dims dims(const Shape& x, int64_t ho, int64_t wo) { return {x[0] * x[1], x[2], x[3], ho, wo}; }

/// Max pool reference: first maximum in row-major window order, the first NaN wins.
void ref_max(const std::vector<double>& x, const Dims& d, const Pool2dParams& p, std::vector<double>& out,
             std::vector<double>& idx) {
  out.clear(), idx.clear();
  for (int64_t pl = 0; pl < d.planes; ++pl)
    for (int64_t oh = 0; oh < d.ho; ++oh)
      for (int64_t ow = 0; ow < d.wo; ++ow) {
        const PoolWindow wh = pool_window_ref(oh, p.kernel_h, p.stride_h, p.pad_h, d.h);
        const PoolWindow ww = pool_window_ref(ow, p.kernel_w, p.stride_w, p.pad_w, d.w);
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = wh.start * d.w + ww.start;
        bool nan = false;
        for (int64_t h = wh.start; h < wh.end && !nan; ++h)
          for (int64_t w = ww.start; w < ww.end && !nan; ++w) {
            const double v = x[static_cast<size_t>((pl * d.h + h) * d.w + w)];
            if (v > best || std::isnan(v)) best = v, arg = h * d.w + w, nan = std::isnan(v);
          }
        out.push_back(best);
        idx.push_back(static_cast<double>(arg));
      }
}

/// Average pool forward (avg_pool2d's windows, or adaptive ones when p is null) with bounds.
Expect ref_avg(const std::vector<double>& x, const Dims& d, const Pool2dParams* p, DType dt) {
  Expect e;
  const DType acc = acc_of(dt);
  for (int64_t pl = 0; pl < d.planes; ++pl)
    for (int64_t oh = 0; oh < d.ho; ++oh)
      for (int64_t ow = 0; ow < d.wo; ++ow) {
        const AvgWindow aw = avg_window_ref(p, oh, ow, d.h, d.w, d.ho, d.wo);
        double s = 0.0, a = 0.0;
        for (int64_t h = aw.h.start; h < aw.h.end; ++h)
          for (int64_t w = aw.w.start; w < aw.w.end; ++w) {
            const double v = x[static_cast<size_t>((pl * d.h + h) * d.w + w)];
            s += v, a += std::fabs(v);
          }
        const int64_t k = (aw.h.end - aw.h.start) * (aw.w.end - aw.w.start);
        const double r = s / aw.count;
        e.val.push_back(r);
        e.bound.push_back(loose_tol_sum(acc, k + 1) * a / aw.count + loose_tol(dt) * std::fabs(r) + store_floor(dt));
      }
  return e;
}

/// Average pool backward: each input gets grad / count from every window covering it. The CUDA
/// kernel gathers in acc and rounds once; the CPU twin scatters, rounding to dt after every add
/// (per_add_rounding: c * loose_tol(dt) * A instead of loose_tol_sum(acc, c) * A).
Expect ref_avg_backward(const std::vector<double>& g, const Dims& d, const Pool2dParams* p, DType dt,
                        bool per_add_rounding = false) {
  const size_t n = static_cast<size_t>(d.planes * d.h * d.w);
  std::vector<double> s(n, 0.0), a(n, 0.0);
  std::vector<int64_t> c(n, 0);
  for (int64_t pl = 0; pl < d.planes; ++pl)
    for (int64_t oh = 0; oh < d.ho; ++oh)
      for (int64_t ow = 0; ow < d.wo; ++ow) {
        const AvgWindow aw = avg_window_ref(p, oh, ow, d.h, d.w, d.ho, d.wo);
        const double t = g[static_cast<size_t>((pl * d.ho + oh) * d.wo + ow)] / aw.count;
        for (int64_t h = aw.h.start; h < aw.h.end; ++h)
          for (int64_t w = aw.w.start; w < aw.w.end; ++w) {
            const size_t i = static_cast<size_t>((pl * d.h + h) * d.w + w);
            s[i] += t, a[i] += std::fabs(t), ++c[i];
          }
      }
  Expect e{s, std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    const double acc = per_add_rounding ? static_cast<double>(c[i]) * loose_tol(dt) + loose_tol_sum(acc_of(dt), 2)
                                        : loose_tol_sum(acc_of(dt), 2 * c[i] + 1);
    e.bound[i] = acc * a[i] + loose_tol(dt) * std::fabs(s[i]) + store_floor(dt);
  }
  return e;
}

/// Max pool backward from the indices: atomics in the storage type.
Expect ref_max_backward(const std::vector<double>& g, const std::vector<double>& idx, const Dims& d, DType dt) {
  const size_t n = static_cast<size_t>(d.planes * d.h * d.w);
  std::vector<double> s(n, 0.0), a(n, 0.0);
  std::vector<int64_t> c(n, 0);
  const int64_t l = d.ho * d.wo;
  for (size_t j = 0; j < g.size(); ++j) {
    const size_t i = static_cast<size_t>(static_cast<int64_t>(j) / l * d.h * d.w + static_cast<int64_t>(idx[j]));
    s[i] += g[j], a[i] += std::fabs(g[j]), ++c[i];
  }
  Expect e{s, std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i)
    e.bound[i] = static_cast<double>(std::max<int64_t>(c[i] - 1, 0)) * loose_tol(dt) * a[i] +
                 loose_tol(dt) * std::fabs(s[i]) + store_floor(dt);
  return e;
}

/// GPU vs CPU: the GPU's bound plus the CPU's (each may err that much from the reference).
Expect combined(Expect gpu, const Expect& cpu, const Tensor& cpu_result) {
  gpu.val = to_f64(cpu_result);
  for (size_t i = 0; i < gpu.bound.size(); ++i) gpu.bound[i] += cpu.bound[i];
  return gpu;
}

}  // namespace

TEST_CASE("cuda max_pool2d matches float64 and the CPU exactly, indices included", "[cuda]") {
  uint64_t seed = 1;
  for (const Case& k : cases()) {
    for (DType dt : kFloatTypes) {
      INFO(case_str(k) << ", " << dtype_name(dt));
      // Strided input (every other element of a wider buffer); bf16's 8-bit mantissa makes ties
      // frequent, which checks the first-maximum rule.
      const Tensor x = random_tensor(k.x, dt, ++seed, -1.0, 1.0, Layout::Strided, kGpu);
      const kernels::MaxPoolResult r = kernels::max_pool2d(x, k.p);
      REQUIRE(r.out.device() == kGpu);
      const Dims d = dims(k.x, r.out.size(2), r.out.size(3));
      std::vector<double> out, idx;
      ref_max(to_f64(x), d, k.p, out, idx);
      check_close(r.out, out, 0.0, 0.0);
      check_close(r.indices, idx, 0.0, 0.0);
      const kernels::MaxPoolResult rc = kernels::max_pool2d(x.to(Device::cpu()), k.p);
      check_same_bits(r.out, rc.out);
      check_same_bits(r.indices, rc.indices);
    }
  }
}

TEST_CASE("cuda max_pool2d: NaN wins, all -inf windows point at their first element", "[cuda]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  // (1, 1, 4, 6) with 2x2 windows: a NaN after the max, two NaNs, an all -inf window, a tie.
  const std::vector<double> v = {1.0, 5.0,  -inf, -inf, 2.0, nan,  //
                                 nan, 3.0,  -inf, -inf, 7.0, nan,  //
                                 0.5, 0.25, 4.0,  4.0,  -1., -2.,  //
                                 0.5, 0.5,  4.0,  1.0,  -3., -1.};
  for (DType dt : kFloatTypes) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(v, {1, 1, 4, 6}, {.dtype = dt, .device = kGpu});
    const kernels::MaxPoolResult r = kernels::max_pool2d(x, pp(2, 2, 2, 2, 0, 0, false));
    const kernels::MaxPoolResult rc = kernels::max_pool2d(x.to(Device::cpu()), pp(2, 2, 2, 2, 0, 0, false));
    check_close(r.out, {nan, -inf, nan, 0.5, 4.0, -1.0}, 0.0, 0.0);
    check_close(r.indices, {6, 2, 5, 12, 14, 16}, 0.0, 0.0);
    check_close(r.out, to_f64(rc.out), 0.0, 0.0);
    check_same_bits(r.indices, rc.indices);
  }
}

TEST_CASE("cuda max_pool2d_backward scatters to the arg-max, accumulating overlaps", "[cuda]") {
  uint64_t seed = 300;
  for (const Case& k : cases()) {
    for (DType dt : kFloatTypes) {
      INFO(case_str(k) << ", " << dtype_name(dt));
      // bf16/f16 ties and overlapping windows make several outputs pick one input.
      const Tensor x = random_tensor(k.x, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
      const kernels::MaxPoolResult r = kernels::max_pool2d(x, k.p);
      const Tensor gy = random_tensor(r.out.sizes(), dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
      const Tensor gx = kernels::max_pool2d_backward(gy, r.indices, k.x, MemoryFormat::contiguous);
      REQUIRE(gx.sizes() == k.x);
      const Expect e = ref_max_backward(to_f64(gy), to_f64(r.indices), dims(k.x, r.out.size(2), r.out.size(3)), dt);
      check_expect(gx, e);
      const Tensor gxc = kernels::max_pool2d_backward(gy.to(Device::cpu()), r.indices.to(Device::cpu()), k.x,
                                                      MemoryFormat::contiguous);
      check_expect(gx, doubled(e, gxc));
    }
  }
}

TEST_CASE("cuda avg_pool2d and its backward match float64 and the CPU (count_include_pad on and off)", "[cuda]") {
  uint64_t seed = 600;
  for (Case k : cases()) {
    for (bool include : {true, false}) {
      k.p.count_include_pad = include;
      for (DType dt : kFloatTypes) {
        INFO(case_str(k) << ", " << dtype_name(dt));
        const Tensor x = random_tensor(k.x, dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
        const Tensor y = kernels::avg_pool2d(x, k.p);
        const Dims d = dims(k.x, y.size(2), y.size(3));
        const Expect e = ref_avg(to_f64(x), d, &k.p, dt);
        check_expect(y, e);
        check_expect(y, doubled(e, kernels::avg_pool2d(x.to(Device::cpu()), k.p)));

        const Tensor gy = random_tensor(y.sizes(), dt, ++seed, -1.0, 1.0, Layout::Strided, kGpu);
        const Tensor gx = kernels::avg_pool2d_backward(gy, k.x, MemoryFormat::contiguous, k.p);
        const std::vector<double> gv = to_f64(gy);
        const Expect eg = ref_avg_backward(gv, d, &k.p, dt);
        check_expect(gx, eg);
        check_expect(gx,
                     combined(eg, ref_avg_backward(gv, d, &k.p, dt, true),
                              kernels::avg_pool2d_backward(gy.to(Device::cpu()), k.x, MemoryFormat::contiguous, k.p)));
      }
    }
  }
}

TEST_CASE("cuda adaptive_avg_pool2d and its backward match float64 and the CPU", "[cuda]") {
  struct A {
    Shape x;
    int64_t ho, wo;
  };
  const std::vector<A> as = {
      {{2, 3, 7, 5}, 3, 2}, {{1, 2, 5, 5}, 5, 5}, {{2, 1, 4, 3}, 7, 8}, {{1, 4, 13, 9}, 1, 1}, {{3, 2, 10, 11}, 4, 3}};
  uint64_t seed = 900;
  for (const A& a : as) {
    for (DType dt : kFloatTypes) {
      INFO("x " << shape_str(a.x) << " -> (" << a.ho << ", " << a.wo << "), " << dtype_name(dt));
      const Tensor x = random_tensor(a.x, dt, ++seed, -1.0, 1.0, Layout::Strided, kGpu);
      const Tensor y = kernels::adaptive_avg_pool2d(x, a.ho, a.wo);
      REQUIRE(y.sizes() == Shape{a.x[0], a.x[1], a.ho, a.wo});
      const Dims d = dims(a.x, a.ho, a.wo);
      const Expect e = ref_avg(to_f64(x), d, nullptr, dt);
      check_expect(y, e);
      check_expect(y, doubled(e, kernels::adaptive_avg_pool2d(x.to(Device::cpu()), a.ho, a.wo)));

      const Tensor gy = random_tensor(y.sizes(), dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
      const Tensor gx = kernels::adaptive_avg_pool2d_backward(gy, a.x, MemoryFormat::contiguous);
      const std::vector<double> gv = to_f64(gy);
      const Expect eg = ref_avg_backward(gv, d, nullptr, dt);
      check_expect(gx, eg);
      check_expect(
          gx, combined(eg, ref_avg_backward(gv, d, nullptr, dt, true),
                       kernels::adaptive_avg_pool2d_backward(gy.to(Device::cpu()), a.x, MemoryFormat::contiguous)));
    }
  }
}

TEST_CASE("cuda pooling on a 2^31+ element plane takes the 64-bit index path", "[cuda][slow]") {
  // x (1, 1, 65536, 32770) f16: 2^31 + 2^17 elements. The last rows of x and of the input
  // gradients sit past 2^31 (the outputs, a quarter of the size, do not); the outputs' last rows,
  // read from there, and the gradients' are compared with references computed from those rows.
  const int64_t H = 65536, W = 32770;
  const Pool2dParams p = pp(2, 2, 2, 2, 0, 0, false);
  Generator gen(5);
  const Tensor x = rand({1, 1, H, W}, {.dtype = DType::f16, .device = kGpu}, gen);
  const Tensor tail = x.narrow(2, H - 4, 4);  // the rows feeding the last two output rows
  const std::vector<double> tv = to_f64(tail);
  const Dims d{1, 4, W, 2, W / 2};
  {
    const kernels::MaxPoolResult r = kernels::max_pool2d(x, p);
    std::vector<double> out, idx;
    ref_max(tv, d, p, out, idx);
    for (double& i : idx) i += static_cast<double>((H - 4) * W);  // tail-local -> plane index
    check_close(r.out.narrow(2, H / 2 - 2, 2), out, 0.0, 0.0);
    check_close(r.indices.narrow(2, H / 2 - 2, 2), idx, 0.0, 0.0);
    const Tensor gy = ones(r.out.sizes(), {.dtype = DType::f16, .device = kGpu});
    const Tensor gx = kernels::max_pool2d_backward(gy, r.indices, x.sizes(), MemoryFormat::contiguous);
    std::vector<double> expect(tv.size(), 0.0);
    for (double i : idx) expect[static_cast<size_t>(static_cast<int64_t>(i) - (H - 4) * W)] = 1.0;
    check_close(gx.narrow(2, H - 4, 4), expect, 0.0, 0.0);
  }
  {
    const Tensor y = kernels::avg_pool2d(x, p);
    check_expect(y.narrow(2, H / 2 - 2, 2), ref_avg(tv, d, &p, DType::f16));
    const Tensor gy = random_tensor({1, 1, 2, W / 2}, DType::f16, 6, -1.0, 1.0, Layout::Contiguous, kGpu);
    Tensor gfull = zeros(y.sizes(), {.dtype = DType::f16, .device = kGpu});
    gfull.narrow(2, H / 2 - 2, 2).copy_(gy);
    const Tensor gx = kernels::avg_pool2d_backward(gfull, x.sizes(), MemoryFormat::contiguous, p);
    check_expect(gx.narrow(2, H - 4, 4), ref_avg_backward(to_f64(gy), d, &p, DType::f16));
  }
}

TEST_CASE("cuda pooling of a channels_last tensor of 2^31+ elements takes the NHWC 64-bit index path", "[cuda][slow]") {
  // pool.cu indexes in 64 bits once a tensor's element count plus the grid-stride and window
  // slack reaches 2^31 (use_32bit). x (1, 6, 16384, 21880) f16 channels-last has 2^31 + 3.4e6
  // elements, NHWC in memory (the channel fastest, C = 6 not a power of two), so its last 4 rows
  // and the input gradients' lie past 2^31 in memory (the outputs, a quarter of the size, do not;
  // the 64-bit path is chosen by x's size); they are compared with references computed from those
  // rows. About 16 GB at the peak.
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  const int64_t C = 6, H = 16384, W = 21880;
  const int64_t kNeed = int64_t(18) << 30;
  if (const std::string why = lacks_device_memory(kGpu, kNeed); !why.empty())
    EMBER_SKIP("the test needs about " << (kNeed >> 30) << " GiB of device memory: " << why);
  const Pool2dParams p = pp(2, 2, 2, 2, 0, 0, false);
  Generator gen(7);
  // Made NHWC and viewed as (N, C, H, W): no second copy of x.
  const Tensor x = rand({1, H, W, C}, {.dtype = DType::f16, .device = kGpu}, gen).permute({0, 3, 1, 2});
  REQUIRE(x.suggest_memory_format() == kCL);
  REQUIRE(x.numel() > (int64_t(1) << 31));
  const std::vector<double> tv = to_f64(x.narrow(2, H - 4, 4));  // (C, 4, W), logical order
  const Dims d{C, 4, W, 2, W / 2};
  {
    const kernels::MaxPoolResult r = kernels::max_pool2d(x, p);
    CHECK(r.out.suggest_memory_format() == kCL);
    std::vector<double> out, idx;
    ref_max(tv, d, p, out, idx);
    std::vector<double> expect(tv.size(), 0.0);  // the input gradient of ones: 1 at each arg-max
    for (size_t j = 0; j < idx.size(); ++j) {
      const int64_t c = static_cast<int64_t>(j) / (2 * (W / 2));
      expect[static_cast<size_t>(c * 4 * W + static_cast<int64_t>(idx[j]))] = 1.0;
      idx[j] += static_cast<double>((H - 4) * W);  // tail-local -> plane index
    }
    check_close(r.out.narrow(2, H / 2 - 2, 2), out, 0.0, 0.0);
    check_close(r.indices.narrow(2, H / 2 - 2, 2), idx, 0.0, 0.0);
    const Tensor gy = ones({1, H / 2, W / 2, C}, {.dtype = DType::f16, .device = kGpu}).permute({0, 3, 1, 2});
    const Tensor gx = kernels::max_pool2d_backward(gy, r.indices, x.sizes(), kCL);
    CHECK(gx.suggest_memory_format() == kCL);
    check_close(gx.narrow(2, H - 4, 4), expect, 0.0, 0.0);
  }
  {
    const Tensor y = kernels::avg_pool2d(x, p);
    CHECK(y.suggest_memory_format() == kCL);
    check_expect(y.narrow(2, H / 2 - 2, 2), ref_avg(tv, d, &p, DType::f16));
    const Tensor gy = random_tensor({1, C, 2, W / 2}, DType::f16, 8, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor gfull = zeros({1, H / 2, W / 2, C}, {.dtype = DType::f16, .device = kGpu}).permute({0, 3, 1, 2});
    gfull.narrow(2, H / 2 - 2, 2).copy_(gy);
    const Tensor gx = kernels::avg_pool2d_backward(gfull, x.sizes(), kCL, p);
    CHECK(gx.suggest_memory_format() == kCL);
    check_expect(gx.narrow(2, H - 4, 4), ref_avg_backward(to_f64(gy), d, &p, DType::f16));
  }
}
