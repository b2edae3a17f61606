// CUDA batch norm (kernels/cuda/norm.cu, cuDNN) and dropout against float64 references computed
// here and against the CPU twin (kernels/cpu/norm.cpp: f32/f64 batch norm, every float dropout).
//
// Batch-norm bounds, with acc the compute type (f32 for f16/bf16/f32, f64 for f64), P the
// parameter type, M = N * H * W values per channel:
//   mean:   em = loose_tol_sum(acc, M) * mean(|x|)
//   var:    ev = 3 * loose_tol_sum(acc, M) * mean(x^2)   (covers a one-pass E[x^2] - E[x]^2 as well)
//   invstd: relative ri = ev / (2 * (var + eps)) + loose_tol(acc)
//   y:      |w| * invstd * (em + |x - mean| * ri + 2 * loose_tol(acc) * (|x| + |mean|)) + loose_tol(acc) * |b|
//           + loose_tol(dt) * |y| (the store) + half an f16 subnormal step
// and each stored statistic one more rounding in P. Backward sums of M terms get
// loose_tol_sum(acc, M) times the sum of their magnitudes. Dropout must match the CPU bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/norm.h>
#include "cuda/device_memory.h"
#include "cuda/expect.h"
#include "support/reference.h"
#include "support/skip.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

DType acc_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }
DType param_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

struct Layout3 {
  int64_t n, c, s;
};
Layout3 ncs(const Shape& x) {
  int64_t s = 1;
  for (size_t d = 2; d < x.size(); ++d) s *= x[d];
  return {x[0], x[1], s};
}
size_t at(const Layout3& l, int64_t n, int64_t c, int64_t s) { return static_cast<size_t>((n * l.c + c) * l.s + s); }

struct BnRef {
  Expect out, save_mean, save_invstd, running_mean, running_var;
};

/// Higham and Mary's probabilistic bound for a sum of M terms accumulated in `acc` ("A new
/// approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Theorem
/// 2.4): if the roundings are independent with mean zero, |computed - exact| <= g * sum |x_i| with
/// g = exp(lambda sqrt(M) u + M u^2 / (1 - u)) - 1, with probability at least
/// 1 - 2 M exp(-lambda^2 (1 - u)^2 / 2). lambda = 8 makes the failure probability at most 2.3e-8
/// per sum for M below 890880, the largest reduction here (2 M e^-32). About lambda sqrt(M) u:
/// 21 times tighter than loose_tol_sum(f32, M) = 167.8 sqrt(M) u. Any summation order whose
/// partial sums are rounded once each fits the model (serial, blocked, pairwise: the blocked and
/// pairwise ones have fewer roundings per term, so smaller bounds still).
double probable_sum_tol(DType acc, int64_t M) {
  const double u = unit_roundoff(acc), m = static_cast<double>(M), lambda = 8.0;
  return std::expm1(lambda * std::sqrt(m) * u + m * u * u / (1 - u));
}

/// Float64 batch norm in training (batch statistics, running update) or eval (running stats).
/// `sum_tol` bounds the relative error of one per-channel sum of M terms (default:
/// loose_tol_sum(acc, M)).
BnRef ref_batch_norm(const Shape& shape, const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b, const std::vector<double>& rm, const std::vector<double>& rv,
                     bool training, double momentum, double eps, DType dt, double sum_tol = -1.0) {
  const Layout3 l = ncs(shape);
  const int64_t M = l.n * l.s;
  const DType acc = acc_of(dt), P = param_of(dt);
  const double ts = sum_tol >= 0.0 ? sum_tol : loose_tol_sum(acc, M);
  BnRef r;
  r.out.val.assign(x.size(), 0.0);
  r.out.bound.assign(x.size(), 0.0);
  for (int64_t c = 0; c < l.c; ++c) {
    double mean, invstd, em, ri;
    if (training) {
      double s = 0.0, sa = 0.0, s2 = 0.0;
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t k = 0; k < l.s; ++k) {
          const double v = x[at(l, n, c, k)];
          s += v, sa += std::fabs(v), s2 += v * v;
        }
      mean = s / static_cast<double>(M);
      double sq = 0.0;
      for (int64_t n = 0; n < l.n; ++n)
        for (int64_t k = 0; k < l.s; ++k) sq += (x[at(l, n, c, k)] - mean) * (x[at(l, n, c, k)] - mean);
      const double var = sq / static_cast<double>(M);
      invstd = 1.0 / std::sqrt(var + eps);
      em = ts * sa / static_cast<double>(M);
      const double ev = 3.0 * ts * s2 / static_cast<double>(M);
      ri = ev / (2.0 * (var + eps)) + loose_tol(acc);
      r.save_mean.val.push_back(mean);
      r.save_mean.bound.push_back(em + loose_tol(P) * std::fabs(mean));
      r.save_invstd.val.push_back(invstd);
      r.save_invstd.bound.push_back(invstd * (ri + loose_tol(P)));
      if (!rm.empty()) {
        const double unbiased = sq / static_cast<double>(M - 1);
        const double nm = (1.0 - momentum) * rm[static_cast<size_t>(c)] + momentum * mean;
        const double nv = (1.0 - momentum) * rv[static_cast<size_t>(c)] + momentum * unbiased;
        r.running_mean.val.push_back(nm);
        r.running_mean.bound.push_back(
            momentum * em + 2.0 * loose_tol(P) * (std::fabs((1.0 - momentum) * rm[c]) + std::fabs(momentum * mean)));
        r.running_var.val.push_back(nv);
        r.running_var.bound.push_back(momentum * ev * static_cast<double>(M) / static_cast<double>(M - 1) +
                                      2.0 * loose_tol(P) * (std::fabs((1.0 - momentum) * rv[c]) + momentum * unbiased));
      }
    } else {
      mean = rm[static_cast<size_t>(c)];
      invstd = 1.0 / std::sqrt(rv[static_cast<size_t>(c)] + eps);
      em = 0.0;
      ri = 2.0 * loose_tol(acc);
    }
    const double wc = w.empty() ? 1.0 : w[static_cast<size_t>(c)], bc = b.empty() ? 0.0 : b[static_cast<size_t>(c)];
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t k = 0; k < l.s; ++k) {
        const size_t i = at(l, n, c, k);
        const double y = (x[i] - mean) * invstd * wc + bc;
        r.out.val[i] = y;
        r.out.bound[i] =
            std::fabs(wc) * invstd *
                (em + std::fabs(x[i] - mean) * ri + 2.0 * loose_tol(acc) * (std::fabs(x[i]) + std::fabs(mean))) +
            loose_tol(acc) * std::fabs(bc) + loose_tol(dt) * std::fabs(y) + store_floor(dt);
      }
  }
  return r;
}

struct BnGradRef {
  Expect gx, gw, gb;
};

/// Float64 batch-norm backward with the given statistics (training: through the batch stats).
/// `sum_tol` as for ref_batch_norm.
BnGradRef ref_batch_norm_backward(const Shape& shape, const std::vector<double>& g, const std::vector<double>& x,
                                  const std::vector<double>& w, const std::vector<double>& mean,
                                  const std::vector<double>& invstd, bool training, DType dt, double sum_tol = -1.0) {
  const Layout3 l = ncs(shape);
  const int64_t M = l.n * l.s;
  const DType acc = acc_of(dt), P = param_of(dt);
  const double tm = sum_tol >= 0.0 ? sum_tol : loose_tol_sum(acc, M);
  BnGradRef r;
  r.gx.val.assign(x.size(), 0.0);
  r.gx.bound.assign(x.size(), 0.0);
  for (int64_t c = 0; c < l.c; ++c) {
    const double m = mean[static_cast<size_t>(c)], is = invstd[static_cast<size_t>(c)];
    double sg = 0.0, sga = 0.0, sgx = 0.0, sgxa = 0.0;
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t k = 0; k < l.s; ++k) {
        const size_t i = at(l, n, c, k);
        const double xh = (x[i] - m) * is;
        sg += g[i], sga += std::fabs(g[i]), sgx += g[i] * xh, sgxa += std::fabs(g[i] * xh);
      }
    r.gb.val.push_back(sg);
    r.gb.bound.push_back(tm * sga + loose_tol(P) * std::fabs(sg));
    r.gw.val.push_back(sgx);
    r.gw.bound.push_back((tm + 2.0 * loose_tol(acc)) * sgxa + loose_tol(P) * std::fabs(sgx));
    const double wc = w.empty() ? 1.0 : w[static_cast<size_t>(c)], Md = static_cast<double>(M);
    for (int64_t n = 0; n < l.n; ++n)
      for (int64_t k = 0; k < l.s; ++k) {
        const size_t i = at(l, n, c, k);
        const double xh = (x[i] - m) * is;
        const double inner = training ? g[i] - sg / Md - xh * sgx / Md : g[i];
        const double gx = wc * is * inner;
        const double err_inner = training ? loose_tol(acc) * std::fabs(g[i]) + tm * sga / Md +
                                                std::fabs(xh) * (tm + 2.0 * loose_tol(acc)) * sgxa / Md +
                                                2.0 * loose_tol(acc) * std::fabs(xh * sgx / Md)
                                          : loose_tol(acc) * std::fabs(g[i]);
        r.gx.val[i] = gx;
        r.gx.bound[i] = std::fabs(wc) * is * (err_inner + 2.0 * loose_tol(acc) * std::fabs(inner)) +
                        loose_tol(dt) * std::fabs(gx) + store_floor(dt);
      }
  }
  return r;
}

struct BnCase {
  Shape x;
  double lo, hi;  // input range (an offset range checks the variance's conditioning)
  double momentum, eps;
  bool affine;
};

const std::vector<BnCase>& bn_cases() {
  static const std::vector<BnCase> cs = {
      {{3, 5, 7, 9}, -1.0, 1.0, 0.1, 1e-5, true},    {{16, 7}, -1.0, 1.0, 0.1, 1e-5, true},
      {{4, 3, 10}, 1.0, 3.0, 0.3, 1e-3, true},       {{2, 4, 1, 1}, -2.0, 2.0, 1.0, 1e-5, false},
      {{1, 6, 13, 11}, -1.0, 1.0, 0.1, 1e-5, false}, {{64, 32, 12, 12}, -1.0, 1.0, 0.1, 1e-5, true},
  };
  return cs;
}

}  // namespace

TEST_CASE("cuda batch_norm training matches float64 and the CPU: output, saved and running statistics", "[cuda]") {
  uint64_t seed = 10;
  for (const BnCase& k : bn_cases()) {
    for (DType dt : kFloatTypes) {
      INFO("x " << shape_str(k.x) << " in [" << k.lo << ", " << k.hi << "), momentum " << k.momentum << ", eps "
                << k.eps << (k.affine ? "" : ", no affine") << ", " << dtype_name(dt));
      const DType P = param_of(dt);
      const int64_t C = k.x[1];
      const Tensor x = random_tensor(k.x, dt, ++seed, k.lo, k.hi, Layout::Transposed, kGpu);
      const Tensor w = k.affine ? random_tensor({C}, P, ++seed, 0.5, 1.5, Layout::Contiguous, kGpu) : Tensor();
      const Tensor b = k.affine ? random_tensor({C}, P, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu) : Tensor();
      const std::vector<double> rm0 = random_values(C, ++seed, -0.5, 0.5), rv0 = random_values(C, ++seed, 0.5, 2.0);
      Tensor rm = from_vector(rm0, {C}, {.dtype = P, .device = kGpu}),
             rv = from_vector(rv0, {C}, {.dtype = P, .device = kGpu});
      const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, rm, rv, true, k.momentum, k.eps);
      const BnRef e =
          ref_batch_norm(k.x, to_f64(x), k.affine ? to_f64(w) : std::vector<double>(),
                         k.affine ? to_f64(b) : std::vector<double>(), rm0, rv0, true, k.momentum, k.eps, dt);
      check_expect(r.out, e.out);
      check_expect(r.save_mean, e.save_mean);
      check_expect(r.save_invstd, e.save_invstd);
      check_expect(rm, e.running_mean);
      check_expect(rv, e.running_var);
      if (dt == DType::f32 || dt == DType::f64) {  // the CPU twin has f32/f64 batch norm only
        Tensor rmc = from_vector(rm0, {C}, {.dtype = P}), rvc = from_vector(rv0, {C}, {.dtype = P});
        const kernels::BatchNormResult rc =
            kernels::batch_norm(x.to(Device::cpu()), k.affine ? w.to(Device::cpu()) : Tensor(),
                                k.affine ? b.to(Device::cpu()) : Tensor(), rmc, rvc, true, k.momentum, k.eps);
        check_expect(r.out, doubled(e.out, rc.out));
        check_expect(r.save_mean, doubled(e.save_mean, rc.save_mean));
        check_expect(r.save_invstd, doubled(e.save_invstd, rc.save_invstd));
        check_expect(rm, doubled(e.running_mean, rmc));
        check_expect(rv, doubled(e.running_var, rvc));
      }
    }
  }
}

TEST_CASE("cuda batch_norm training without running statistics", "[cuda]") {
  const Shape xs{5, 3, 4, 6};
  for (DType dt : kFloatTypes) {
    INFO(dtype_name(dt));
    const Tensor x = random_tensor(xs, dt, 77, -1.0, 1.0, Layout::Contiguous, kGpu);
    const kernels::BatchNormResult r = kernels::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    const BnRef e = ref_batch_norm(xs, to_f64(x), {}, {}, {}, {}, true, 0.1, 1e-5, dt);
    check_expect(r.out, e.out);
    check_expect(r.save_mean, e.save_mean);
    check_expect(r.save_invstd, e.save_invstd);
  }
}

TEST_CASE("cuda batch_norm eval uses the running statistics", "[cuda]") {
  uint64_t seed = 200;
  for (const BnCase& k : bn_cases()) {
    for (DType dt : kFloatTypes) {
      INFO("x " << shape_str(k.x) << ", " << dtype_name(dt));
      const DType P = param_of(dt);
      const int64_t C = k.x[1];
      const Tensor x = random_tensor(k.x, dt, ++seed, k.lo, k.hi, Layout::Strided, kGpu);
      const Tensor w = k.affine ? random_tensor({C}, P, ++seed, 0.5, 1.5, Layout::Contiguous, kGpu) : Tensor();
      const Tensor b = k.affine ? random_tensor({C}, P, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu) : Tensor();
      const std::vector<double> rm0 = random_values(C, ++seed, -0.5, 0.5), rv0 = random_values(C, ++seed, 0.5, 2.0);
      const Tensor rm = from_vector(rm0, {C}, {.dtype = P, .device = kGpu}),
                   rv = from_vector(rv0, {C}, {.dtype = P, .device = kGpu});
      const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, rm, rv, false, k.momentum, k.eps);
      const BnRef e =
          ref_batch_norm(k.x, to_f64(x), k.affine ? to_f64(w) : std::vector<double>(),
                         k.affine ? to_f64(b) : std::vector<double>(), rm0, rv0, false, k.momentum, k.eps, dt);
      check_expect(r.out, e.out);
      check_close(rm, to_f64(from_vector(rm0, {C}, {.dtype = P})), 0.0, 0.0);  // untouched in eval
      check_close(rv, to_f64(from_vector(rv0, {C}, {.dtype = P})), 0.0, 0.0);
      if (dt == DType::f32 || dt == DType::f64) {
        const kernels::BatchNormResult rc = kernels::batch_norm(
            x.to(Device::cpu()), k.affine ? w.to(Device::cpu()) : Tensor(), k.affine ? b.to(Device::cpu()) : Tensor(),
            rm.to(Device::cpu()), rv.to(Device::cpu()), false, k.momentum, k.eps);
        check_expect(r.out, doubled(e.out, rc.out));
      }
    }
  }
}

TEST_CASE("cuda batch_norm eval past cuDNN's batch limit (N > 65535) and in bf16 uses its own kernel", "[cuda]") {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {int64_t(70000), int64_t(5)}) {
      INFO(dtype_name(dt) << ", N " << n);
      const DType P = param_of(dt);
      const Shape xs{n, 3};
      const Tensor x = random_tensor(xs, dt, 55, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor w = random_tensor({3}, P, 56, 0.5, 1.5, Layout::Contiguous, kGpu);
      const Tensor b = random_tensor({3}, P, 57, -1.0, 1.0, Layout::Contiguous, kGpu);
      const std::vector<double> rm0 = random_values(3, 58, -0.5, 0.5), rv0 = random_values(3, 59, 0.5, 2.0);
      const kernels::BatchNormResult r =
          kernels::batch_norm(x, w, b, from_vector(rm0, {3}, {.dtype = P, .device = kGpu}),
                              from_vector(rv0, {3}, {.dtype = P, .device = kGpu}), false, 0.1, 1e-5);
      check_expect(r.out, ref_batch_norm(xs, to_f64(x), to_f64(w), to_f64(b), rm0, rv0, false, 0.1, 1e-5, dt).out);
    }
  }
}

TEST_CASE("cuda batch_norm eval of 2^31+ elements uses its own kernel (64-bit indices), not cuDNN", "[cuda][slow]") {
  // cuDNN's batch norm takes fewer than 2^31 elements; eval needs no reduction, so ember's kernel
  // serves it. x (1, 2, 2^30 + 2^16) f16: 2^31 + 2^17 elements, the second channel's tail past
  // 2^31, compared with the float64 reference on that tail (eval is per element). About 9 GB.
  const int64_t S = (int64_t(1) << 30) + (int64_t(1) << 16), tail = 4096;
  const int64_t kNeed = int64_t(10) << 30;
  if (const std::string why = lacks_device_memory(kGpu, kNeed); !why.empty())
    EMBER_SKIP("the test needs about " << (kNeed >> 30) << " GiB of device memory: " << why);
  Generator gen(61);
  const Tensor x = rand({1, 2, S}, {.dtype = DType::f16, .device = kGpu}, gen);
  REQUIRE(x.numel() > (int64_t(1) << 31));
  const Tensor w = from_vector({0.75, 1.25}, {2}, {.dtype = DType::f32, .device = kGpu});
  const Tensor b = from_vector({-0.5, 0.25}, {2}, {.dtype = DType::f32, .device = kGpu});
  const std::vector<double> rm{0.25, 0.5}, rv{0.5, 2.0};
  const kernels::BatchNormResult r =
      kernels::batch_norm(x, w, b, from_vector(rm, {2}, {.dtype = DType::f32, .device = kGpu}),
                          from_vector(rv, {2}, {.dtype = DType::f32, .device = kGpu}), false, 0.1, 1e-5);
  const Tensor xt = x.narrow(2, S - tail, tail);
  check_expect(
      r.out.narrow(2, S - tail, tail),
      ref_batch_norm({1, 2, tail}, to_f64(xt), to_f64(w), to_f64(b), rm, rv, false, 0.1, 1e-5, DType::f16).out);
}

TEST_CASE("cuda batch_norm training past cuDNN's batch limit is refused with a message", "[cuda]") {
  const Tensor x = zeros({880802, 1, 2}, {.dtype = DType::f32, .device = kGpu});
  REQUIRE_THROWS_WITH(kernels::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
                      Catch::Contains("880801") && Catch::Contains("N = 880802"));
}

TEST_CASE("cuda batch_norm training past cuDNN's batch limit with one value per (n, c): channels-last and 2-D",
          "[cuda]") {
  // A channels-last (870, 2, 32, 32) input is (N*H*W = 890880, C = 2, 1) to the kernels, and a
  // (890000, 3) batch is (890000, 3, 1): both past N = 880801, both run on their (1, C, N) transpose.
  // The per-channel sums of M ~ 890000 terms get probable_sum_tol(f32, M), about 4.5e-4 (the
  // default loose_tol_sum(f32, M) is 9.4e-3, which let the variance, and so every output, be off
  // by more than 1%); the bounds built on it follow as for the other cases.
  uint64_t seed = 900;
  for (const bool channels_last : {true, false}) {
    const Shape xs = channels_last ? Shape{870, 2, 32, 32} : Shape{890000, 3};
    INFO("x " << shape_str(xs) << (channels_last ? " channels_last" : ""));
    const int64_t C = xs[1];
    const double sum_tol = probable_sum_tol(DType::f32, xs.size() == 4 ? xs[0] * xs[2] * xs[3] : xs[0]);
    Tensor x = random_tensor(xs, DType::f32, ++seed, -1.0, 3.0, Layout::Contiguous, kGpu);
    if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
    const Tensor w = random_tensor({C}, DType::f32, ++seed, 0.5, 1.5, Layout::Contiguous, kGpu);
    const Tensor b = random_tensor({C}, DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    const std::vector<double> rm0 = random_values(C, ++seed, -0.5, 0.5), rv0 = random_values(C, ++seed, 0.5, 2.0);
    Tensor rm = from_vector(rm0, {C}, {.dtype = DType::f32, .device = kGpu}),
           rv = from_vector(rv0, {C}, {.dtype = DType::f32, .device = kGpu});
    const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    if (channels_last) CHECK(r.out.suggest_memory_format() == MemoryFormat::channels_last);
    const BnRef e = ref_batch_norm(xs, to_f64(x), to_f64(w), to_f64(b), rm0, rv0, true, 0.1, 1e-5, DType::f32, sum_tol);
    check_expect(r.out, e.out);
    check_expect(r.save_mean, e.save_mean);
    check_expect(r.save_invstd, e.save_invstd);
    check_expect(rm, e.running_mean);
    check_expect(rv, e.running_var);

    Tensor gy = random_tensor(xs, DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    if (channels_last) gy = gy.contiguous(MemoryFormat::channels_last);
    const kernels::BatchNormGrads g = kernels::batch_norm_backward(gy, x, w, r.save_mean, r.save_invstd, true, 1e-5);
    const BnGradRef eg = ref_batch_norm_backward(xs, to_f64(gy), to_f64(x), to_f64(w), to_f64(r.save_mean),
                                                 to_f64(r.save_invstd), true, DType::f32, sum_tol);
    check_expect(g.grad_x, eg.gx);
    check_expect(g.grad_weight, eg.gw);
    check_expect(g.grad_bias, eg.gb);
  }
}

TEST_CASE("cuda batch_norm on channels_last input in f32, f16 and bf16 matches float64: the (N*H*W, C, 1) view",
          "[cuda][norm]") {
  // A channels-last x reaches the kernels as its (N*H*W, C, 1) row-major view (kernels/norm.cpp):
  // the same per-channel statistics as (N, C, H*W), the output in the same memory order. bf16 is
  // staged through f32 copies of x and grad_out and rounded once at the end (kernels/cuda/norm.cu);
  // bf16's eval forward is ember's own kernel. Every result against the float64 references above,
  // which read the values in the logical (N, C, H, W) order, so a view that mixed up channels or
  // positions would fail; results stay channels-last.
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  const Shape xs{4, 6, 5, 7};
  const int64_t C = xs[1];
  uint64_t seed = 1500;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const DType P = param_of(dt);
    const Tensor x = random_tensor(xs, dt, ++seed, -1.0, 2.0, Layout::Contiguous, kGpu).contiguous(kCL);
    const Tensor w = random_tensor({C}, P, ++seed, 0.5, 1.5, Layout::Contiguous, kGpu);
    const Tensor b = random_tensor({C}, P, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    const std::vector<double> rm0 = random_values(C, ++seed, -0.5, 0.5), rv0 = random_values(C, ++seed, 0.5, 2.0);
    Tensor rm = from_vector(rm0, {C}, {.dtype = P, .device = kGpu}),
           rv = from_vector(rv0, {C}, {.dtype = P, .device = kGpu});
    const std::vector<double> xv = to_f64(x), wv = to_f64(w), bv = to_f64(b);

    // Training: output, saved and running statistics.
    const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    CHECK(r.out.suggest_memory_format() == kCL);
    const BnRef e = ref_batch_norm(xs, xv, wv, bv, rm0, rv0, true, 0.1, 1e-5, dt);
    check_expect(r.out, e.out);
    check_expect(r.save_mean, e.save_mean);
    check_expect(r.save_invstd, e.save_invstd);
    check_expect(rm, e.running_mean);
    check_expect(rv, e.running_var);

    // Eval: the running statistics given.
    const kernels::BatchNormResult re =
        kernels::batch_norm(x, w, b, from_vector(rm0, {C}, {.dtype = P, .device = kGpu}),
                            from_vector(rv0, {C}, {.dtype = P, .device = kGpu}), false, 0.1, 1e-5);
    CHECK(re.out.suggest_memory_format() == kCL);
    check_expect(re.out, ref_batch_norm(xs, xv, wv, bv, rm0, rv0, false, 0.1, 1e-5, dt).out);

    // Backward, training (through the batch statistics the forward saved) and eval.
    const Tensor gy = random_tensor(xs, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu).contiguous(kCL);
    const std::vector<double> gv = to_f64(gy);
    const kernels::BatchNormGrads g = kernels::batch_norm_backward(gy, x, w, r.save_mean, r.save_invstd, true, 1e-5);
    CHECK(g.grad_x.suggest_memory_format() == kCL);
    const BnGradRef eg = ref_batch_norm_backward(xs, gv, xv, wv, to_f64(r.save_mean), to_f64(r.save_invstd), true, dt);
    check_expect(g.grad_x, eg.gx);
    check_expect(g.grad_weight, eg.gw);
    check_expect(g.grad_bias, eg.gb);
    std::vector<double> is(rv0.size());
    for (size_t i = 0; i < rv0.size(); ++i) is[i] = 1.0 / std::sqrt(rv0[i] + 1e-5);
    const Tensor mean = from_vector(rm0, {C}, {.dtype = P, .device = kGpu}),
                 invstd = from_vector(is, {C}, {.dtype = P, .device = kGpu});
    const kernels::BatchNormGrads ge = kernels::batch_norm_backward(gy, x, w, mean, invstd, false, 1e-5);
    CHECK(ge.grad_x.suggest_memory_format() == kCL);
    const BnGradRef ege = ref_batch_norm_backward(xs, gv, xv, wv, to_f64(mean), to_f64(invstd), false, dt);
    check_expect(ge.grad_x, ege.gx);
    check_expect(ge.grad_weight, ege.gw);
    check_expect(ge.grad_bias, ege.gb);
  }
}

TEST_CASE("cuda batch_norm_backward in training (cuDNN) and eval (kernel) matches float64 and the CPU", "[cuda]") {
  uint64_t seed = 400;
  for (const BnCase& k : bn_cases()) {
    for (bool training : {true, false}) {
      for (DType dt : kFloatTypes) {
        INFO("x " << shape_str(k.x) << (training ? ", training" : ", eval") << ", " << dtype_name(dt));
        const DType P = param_of(dt);
        const int64_t C = k.x[1];
        const Tensor x = random_tensor(k.x, dt, ++seed, k.lo, k.hi, Layout::Contiguous, kGpu);
        const Tensor gy = random_tensor(k.x, dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
        const Tensor w = k.affine ? random_tensor({C}, P, ++seed, 0.5, 1.5, Layout::Contiguous, kGpu) : Tensor();
        Tensor mean, invstd;
        if (training) {  // the statistics the forward saved
          const kernels::BatchNormResult r = kernels::batch_norm(x, w, Tensor(), Tensor(), Tensor(), true, 0.1, k.eps);
          mean = r.save_mean, invstd = r.save_invstd;
        } else {  // eval: running mean and 1 / sqrt(running var + eps), as the caller passes them
          const std::vector<double> rv = random_values(C, ++seed, 0.5, 2.0);
          std::vector<double> is(rv.size());
          for (size_t i = 0; i < rv.size(); ++i) is[i] = 1.0 / std::sqrt(rv[i] + k.eps);
          mean = from_vector(random_values(C, ++seed, -0.5, 0.5), {C}, {.dtype = P, .device = kGpu});
          invstd = from_vector(is, {C}, {.dtype = P, .device = kGpu});
        }
        const kernels::BatchNormGrads g = kernels::batch_norm_backward(gy, x, w, mean, invstd, training, k.eps);
        const BnGradRef e =
            ref_batch_norm_backward(k.x, to_f64(gy), to_f64(x), k.affine ? to_f64(w) : std::vector<double>(),
                                    to_f64(mean), to_f64(invstd), training, dt);
        check_expect(g.grad_x, e.gx);
        check_expect(g.grad_weight, e.gw);
        check_expect(g.grad_bias, e.gb);
        if (dt == DType::f32 || dt == DType::f64) {
          const kernels::BatchNormGrads gc = kernels::batch_norm_backward(
              gy.to(Device::cpu()), x.to(Device::cpu()), k.affine ? w.to(Device::cpu()) : Tensor(),
              mean.to(Device::cpu()), invstd.to(Device::cpu()), training, k.eps);
          check_expect(g.grad_x, doubled(e.gx, gc.grad_x));
          check_expect(g.grad_weight, doubled(e.gw, gc.grad_weight));
          check_expect(g.grad_bias, doubled(e.gb, gc.grad_bias));
        }
      }
    }
  }
}

TEST_CASE("cuda batch_norm eval kernels: many chunks per channel, many channels, bit-identical reruns",
          "[cuda][norm]") {
  // The eval backward splits each channel's N * S elements over up to 65535 chunks (blocks
  // (c, j)) and adds the partials in chunk order; the eval forward's own kernel (bf16) finds the
  // channel with two fast divisions. Few channels with long runs, and more channels than the
  // 65535 blocks the old one-block-per-channel grid was capped at (S = 1, as in BatchNorm1d). The
  // eval forward in every dtype (cuDNN's but in bf16).
  struct Case {
    Shape x;
  };
  for (const Case& k : {Case{{3000, 2, 50}}, Case{{3, 70000}}, Case{{7, 5, 3, 3}}}) {
    const int64_t C = k.x[1];
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      INFO("x " << shape_str(k.x) << ", " << dtype_name(dt));
      const DType P = param_of(dt);
      const Tensor x = random_tensor(k.x, dt, 71, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor gy = random_tensor(k.x, dt, 72, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor w = random_tensor({C}, P, 73, 0.5, 1.5, Layout::Contiguous, kGpu);
      const std::vector<double> rm = random_values(C, 74, -0.5, 0.5), rv = random_values(C, 75, 0.5, 2.0);
      std::vector<double> is(rv.size());
      for (size_t i = 0; i < rv.size(); ++i) is[i] = 1.0 / std::sqrt(rv[i] + 1e-5);
      const Tensor mean = from_vector(rm, {C}, {.dtype = P, .device = kGpu}),
                   invstd = from_vector(is, {C}, {.dtype = P, .device = kGpu});
      const kernels::BatchNormGrads g = kernels::batch_norm_backward(gy, x, w, mean, invstd, false, 1e-5);
      const BnGradRef e =
          ref_batch_norm_backward(k.x, to_f64(gy), to_f64(x), to_f64(w), to_f64(mean), to_f64(invstd), false, dt);
      check_expect(g.grad_x, e.gx);
      check_expect(g.grad_weight, e.gw);
      check_expect(g.grad_bias, e.gb);
      const kernels::BatchNormGrads again = kernels::batch_norm_backward(gy, x, w, mean, invstd, false, 1e-5);
      check_same_bits(again.grad_weight, g.grad_weight);
      check_same_bits(again.grad_bias, g.grad_bias);
      {  // the eval forward: ember's kernel in bf16, cuDNN's otherwise (also past 65535 channels)
        const Tensor b = random_tensor({C}, P, 76, -1.0, 1.0, Layout::Contiguous, kGpu);
        const kernels::BatchNormResult r =
            kernels::batch_norm(x, w, b, from_vector(rm, {C}, {.dtype = P, .device = kGpu}),
                                from_vector(rv, {C}, {.dtype = P, .device = kGpu}), false, 0.1, 1e-5);
        check_expect(r.out, ref_batch_norm(k.x, to_f64(x), to_f64(w), to_f64(b), rm, rv, false, 0.1, 1e-5, dt).out);
      }
    }
  }
}

TEST_CASE("cuda batch_norm training through cuDNN with more than 65535 channels", "[cuda][norm]") {
  // cuDNN's training kernels and their backward on (3, 70000) (BatchNorm1d over a wide layer): a
  // grid that put the channels on a dimension capped at 65535 would fail or skip channels here.
  const Shape xs{3, 70000};
  const int64_t C = xs[1];
  const Tensor x = random_tensor(xs, DType::f32, 81, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor gy = random_tensor(xs, DType::f32, 82, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor w = random_tensor({C}, DType::f32, 83, 0.5, 1.5, Layout::Contiguous, kGpu);
  const Tensor b = random_tensor({C}, DType::f32, 84, -1.0, 1.0, Layout::Contiguous, kGpu);
  const std::vector<double> rm = random_values(C, 85, -0.5, 0.5), rv = random_values(C, 86, 0.5, 2.0);
  const Tensor rmt = from_vector(rm, {C}, {.dtype = DType::f32, .device = kGpu}),
               rvt = from_vector(rv, {C}, {.dtype = DType::f32, .device = kGpu});
  const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, rmt, rvt, true, 0.1, 1e-5);
  const BnRef e = ref_batch_norm(xs, to_f64(x), to_f64(w), to_f64(b), rm, rv, true, 0.1, 1e-5, DType::f32);
  check_expect(r.out, e.out);
  check_expect(r.save_mean, e.save_mean);
  check_expect(r.save_invstd, e.save_invstd);
  check_expect(rmt, e.running_mean);
  check_expect(rvt, e.running_var);
  const kernels::BatchNormGrads g = kernels::batch_norm_backward(gy, x, w, r.save_mean, r.save_invstd, true, 1e-5);
  const BnGradRef eg = ref_batch_norm_backward(xs, to_f64(gy), to_f64(x), to_f64(w), to_f64(r.save_mean),
                                               to_f64(r.save_invstd), true, DType::f32);
  check_expect(g.grad_x, eg.gx);
  check_expect(g.grad_weight, eg.gw);
  check_expect(g.grad_bias, eg.gb);
}

TEST_CASE("cuda dropout and dropout_backward match the CPU bit for bit", "[cuda]") {
  uint64_t seed = 1000;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 3, 4, 5, 17, 1000, 100003}) {
      for (double p : {0.0, 0.1, 1.0 / 3.0, 0.5, 0.9}) {
        for (int64_t skip : {0, 1}) {  // skip = 1: the data starts one element in (misaligned)
          INFO(dtype_name(dt) << ", n " << n << ", p " << p << ", misaligned " << skip);
          const uint64_t s = ++seed, off = seed * 7;
          const Tensor buf = random_tensor({n + skip}, dt, s, -2.0, 2.0, Layout::Contiguous, kGpu);
          const Tensor x = buf.narrow(0, skip, n);
          const Tensor y = kernels::dropout(x, p, s, off);
          const Tensor yc = kernels::dropout(x.to(Device::cpu()), p, s, off);
          check_same_bits(y, yc);
          const Tensor gy = kernels::dropout_backward(x, p, s, off);
          check_same_bits(gy, kernels::dropout_backward(x.to(Device::cpu()), p, s, off));
          check_same_bits(gy, y);  // one mask, one scaling
        }
      }
    }
  }
}

TEST_CASE("cuda dropout keeps element i iff its Philox uniform is >= p, scaled by 1 / (1 - p)", "[cuda]") {
  // An independent statement of the rule of kernels/norm.h (u compared in double, as u is a
  // multiple of 2^-24), on a tensor of ones, plus the kept fraction against a 5-sigma bound.
  const int64_t n = 1 << 20;
  for (double p : {0.25, 0.5, 0.8}) {
    INFO("p " << p);
    const uint64_t seed = 0xabcdef, offset = 12345;
    const Tensor y = kernels::dropout(ones({n}, {.dtype = DType::f32, .device = kGpu}), p, seed, offset);
    const std::vector<double> v = to_f64(y);
    const double scale = static_cast<double>(static_cast<float>(1.0 / (1.0 - p)));
    int64_t bad = 0, kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(uint_to_unit_float(philox_element(seed, offset, static_cast<uint64_t>(i))));
      const double expect = u >= p ? scale : 0.0;
      bad += v[static_cast<size_t>(i)] != expect;
      kept += u >= p;
    }
    CHECK(bad == 0);
    const double frac = static_cast<double>(kept) / static_cast<double>(n);
    CHECK(std::fabs(frac - (1.0 - p)) <= 5.0 * std::sqrt(p * (1.0 - p) / static_cast<double>(n)));
  }
  // p == 1 drops everything (the front's special case), p == 0 is the identity.
  const Tensor x = random_tensor({37}, DType::f32, 5, -1.0, 1.0, Layout::Contiguous, kGpu);
  check_close(kernels::dropout(x, 1.0, 1, 2), std::vector<double>(37, 0.0), 0.0, 0.0);
  check_same_bits(kernels::dropout(x, 0.0, 1, 2), x);
}

TEST_CASE("cuda dropout on 2^24+ elements matches the CPU", "[cuda][slow]") {
  const int64_t n = (int64_t(1) << 24) + 7;
  Generator gen(3);
  const Tensor x = rand({n}, {.dtype = DType::f32, .device = kGpu}, gen);
  check_same_bits(kernels::dropout(x, 0.3, 99, 1u << 30), kernels::dropout(x.to(Device::cpu()), 0.3, 99, 1u << 30));
}
