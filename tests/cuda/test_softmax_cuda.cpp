// CUDA softmax / log-softmax (forward, backward) and the fused cross-entropy (forward, backward)
// of kernels/cuda/softmax.cu, against float64 references computed here and against the CPU twin.
//
// Tolerances follow the error of each formula in the accumulation dtype (f32 for f16/bf16/f32,
// f64 for f64): a length-D sum is allowed loose_tol_sum(acc, D) times its terms' rms (loose_tol(acc) times
// their 2-norm), exp(z) a relative loose_tol(acc) * (|z| + 1) (z itself carries a rounding), and the
// result one rounding in the output dtype, loose_tol(out) * |ref|. f16 results below its normal range
// get an absolute 2^-24 (one f16 subnormal step).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/softmax.h>
#include "support/reference.h"
#include "support/softmax_nonfinite.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

DType acc_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }
double floor_of(DType dt) { return dt == DType::f16 ? std::ldexp(1.0, -24) : 0.0; }

struct Expect {
  std::vector<double> out, bound;
};

/// (outer, D, inner) of `shape` around dim.
void split(const Shape& shape, int64_t dim, int64_t& outer, int64_t& D, int64_t& inner) {
  outer = 1, inner = 1, D = shape[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
}

Expect ref_softmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log, DType dt) {
  int64_t outer, D, inner;
  split(shape, dim, outer, D, inner);
  Expect e{std::vector<double>(x.size()), std::vector<double>(x.size())};
  const double ta = loose_tol(acc_dtype(dt)), to = loose_tol(dt), fl = floor_of(dt),
               sd = std::sqrt(static_cast<double>(D));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return static_cast<size_t>((o * D + d) * inner + i); };
      double m = -INFINITY;
      for (int64_t d = 0; d < D; ++d) m = std::max(m, x[at(d)]);
      double s = 0.0;
      for (int64_t d = 0; d < D; ++d) s += std::exp(x[at(d)] - m);
      const double ls = std::log(s);
      for (int64_t d = 0; d < D; ++d) {
        const double z = x[at(d)] - m;
        if (log) {
          e.out[at(d)] = z - ls;
          e.bound[at(d)] = ta * (std::fabs(x[at(d)]) + std::fabs(m) + std::fabs(ls) + sd) + to * std::fabs(z - ls);
        } else {
          const double y = std::exp(z) / s;
          e.out[at(d)] = y;
          e.bound[at(d)] = y * (ta * (std::fabs(z) + sd + 2.0) + to) + fl;
        }
      }
    }
  return e;
}

Expect ref_softmax_backward(const std::vector<double>& g, const std::vector<double>& y, const Shape& shape, int64_t dim,
                            bool log, DType dt) {
  int64_t outer, D, inner;
  split(shape, dim, outer, D, inner);
  Expect e{std::vector<double>(g.size()), std::vector<double>(g.size())};
  const double ta = loose_tol(acc_dtype(dt)), to = loose_tol(dt), fl = floor_of(dt);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return static_cast<size_t>((o * D + d) * inner + i); };
      double acc = 0.0, sq = 0.0;  // sum of g*y (softmax) or of g (log-softmax), and its terms' squares
      for (int64_t d = 0; d < D; ++d) {
        const double t = log ? g[at(d)] : g[at(d)] * y[at(d)];
        acc += t;
        sq += t * t;
      }
      const double acc_err = ta * std::sqrt(sq);
      for (int64_t d = 0; d < D; ++d) {
        const double gv = g[at(d)], yv = y[at(d)];
        double dx, bound;
        if (log) {
          const double p = std::exp(yv);
          dx = gv - p * acc;
          bound = p * (acc_err + ta * (std::fabs(yv) + 1.0) * std::fabs(acc)) + ta * std::fabs(gv);
        } else {
          dx = yv * (gv - acc);
          bound = std::fabs(yv) * (acc_err + ta * (std::fabs(gv) + std::fabs(acc)));
        }
        e.out[at(d)] = dx;
        e.bound[at(d)] = bound + to * std::fabs(dx) + fl;
      }
    }
  return e;
}

void check_expect(const std::vector<double>& got, const Expect& e, double slack, const std::string& what) {
  REQUIRE(got.size() == e.out.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = e.out[i];
    const bool ok = std::isnan(want) ? std::isnan(got[i]) : std::fabs(got[i] - want) <= slack * e.bound[i];
    if (!ok && bad++ < 5)
      UNSCOPED_INFO(what << " [" << i << "] got " << got[i] << " expected " << want << " bound " << slack * e.bound[i]);
  }
  CHECK(bad == 0);
}

/// GPU result vs reference, and vs the CPU twin (each meets the bound, so they differ by <= 2x).
void check_both(const Tensor& gpu, const Tensor& cpu, const Expect& e) {
  REQUIRE(gpu.device() == kGpu);
  CHECK(gpu.sizes() == cpu.sizes());
  CHECK(gpu.dtype() == cpu.dtype());
  const std::vector<double> got = to_f64(gpu);
  check_expect(got, e, 1.0, "cuda vs f64 reference:");
  Expect twin = e;
  twin.out = to_f64(cpu);
  check_expect(got, twin, 2.0, "cuda vs cpu twin:");
}

void check_softmax(const Shape& shape, int64_t dim, DType dt, Layout layout, uint64_t seed) {
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax " : "softmax ")
         << shape_str(shape) << " dim " << dim << " " << dtype_name(dt) << " layout " << static_cast<int>(layout));
    Tensor xc = random_tensor(shape, dt, seed, -4.0, 4.0, layout);
    Tensor xg = random_tensor(shape, dt, seed, -4.0, 4.0, layout, kGpu);
    const Expect e = ref_softmax(to_f64(xc), shape, dim, log, dt);
    check_both(kernels::softmax(xg, dim, log), kernels::softmax(xc, dim, log), e);

    // Backward with an arbitrary upstream gradient; y need not be a real softmax for the formula,
    // but log-softmax outputs are kept <= 0 so exp(y) stays a probability.
    Tensor gc = random_tensor(shape, dt, seed + 1, -1.0, 1.0, layout);
    Tensor gg = random_tensor(shape, dt, seed + 1, -1.0, 1.0, layout, kGpu);
    const double ylo = log ? -6.0 : 0.0, yhi = log ? 0.0 : 1.0;
    Tensor yc = random_tensor(shape, dt, seed + 2, ylo, yhi);
    Tensor yg = yc.to(kGpu);
    const Expect eb = ref_softmax_backward(to_f64(gc), to_f64(yc), shape, dim, log, dt);
    check_both(kernels::softmax_backward(gg, yg, dim, log), kernels::softmax_backward(gc, yc, dim, log), eb);
  }
}

}  // namespace

TEST_CASE("cuda softmax: rows on both sides of every kernel switch, every float dtype", "[cuda][softmax]") {
  // softmax.cu: rows in registers, a warp per row holding 4 or 32 per lane (<= 128, <= 1024), a
  // block holding 16 or 32 per thread (<= 4096, <= 8192); longer rows take the online kernel.
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (int64_t D : {1, 10, 33, 128, 129, 1024, 1025, 3001, 4096, 4097, 8192, 8193})
      check_softmax({37, D}, 1, dt, Layout::Contiguous, 100 + D);
}

TEST_CASE("cuda softmax: leading and middle dims (strided kernel), non-contiguous inputs", "[cuda][softmax]") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    check_softmax({5, 19, 7}, 1, dt, Layout::Contiguous, 1);
    check_softmax({5, 19, 7}, 0, dt, Layout::Strided, 2);
    check_softmax({5, 19, 7}, 2, dt, Layout::Transposed, 3);
    check_softmax({3, 1100, 2}, 1, dt, Layout::Contiguous, 4);
    check_softmax({301, 45}, 0, dt, Layout::Transposed, 5);
  }
}

TEST_CASE("cuda softmax: many rows (grid-stride over rows)", "[cuda][softmax][slow]") {
  check_softmax({600001, 3}, 1, DType::f32, Layout::Contiguous, 6);  // more rows than 65536 blocks x 8 warps
  check_softmax({600, 5000}, 1, DType::f16, Layout::Contiguous, 7);
  check_softmax({200003, 3}, 0, DType::f32, Layout::Contiguous, 8);  // D = 200003, strided columns
}

TEST_CASE("cuda softmax: -inf entries get probability 0; an all -inf row is NaN", "[cuda][softmax]") {
  const double ninf = -INFINITY;
  const std::vector<double> v = {ninf,     1.0,  2.0,  ninf, 0.5, /**/ ninf, ninf, ninf, ninf, ninf,
                                 /**/ 3.0, ninf, ninf, ninf, ninf};
  Tensor x = from_vector(v, {3, 5}, {.dtype = DType::f32, .device = kGpu});
  const std::vector<double> y = to_f64(kernels::softmax(x, 1));
  const double s = std::exp(1.0 - 2.0) + 1.0 + std::exp(0.5 - 2.0);
  const std::vector<double> row0 = {0.0, std::exp(-1.0) / s, 1.0 / s, 0.0, std::exp(-1.5) / s};
  for (int i = 0; i < 5; ++i) CHECK(std::fabs(y[i] - row0[i]) <= 4 * loose_tol(DType::f32) * row0[i]);
  for (int i = 5; i < 10; ++i) CHECK(std::isnan(y[i]));
  CHECK(y[10] == 1.0);
  for (int i = 11; i < 15; ++i) CHECK(y[i] == 0.0);
  const std::vector<double> ly = to_f64(kernels::softmax(x, 1, true));
  CHECK(ly[0] == -INFINITY);
  CHECK(std::fabs(ly[2] + std::log(s)) <= 4 * loose_tol(DType::f32));
  CHECK(ly[10] == 0.0);
}

namespace {

struct CeRef {
  std::vector<double> loss, lse, loss_bound, lse_bound;
};

CeRef ref_ce(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t N, int64_t C, double ls, DType dt) {
  CeRef r;
  // The rows are stored in the accumulation dtype (f64 for f64 logits, else f32).
  const double ta = loose_tol(acc_dtype(dt)), to = loose_tol(kernels::cross_entropy_row_dtype(dt)),
               sc = std::sqrt(static_cast<double>(C));
  for (int64_t n = 0; n < N; ++n) {
    const double* row = x.data() + n * C;
    double m = -INFINITY, sum = 0.0, sq = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      m = std::max(m, row[c]);
      sum += row[c];
      sq += row[c] * row[c];
    }
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(row[c] - m);
    const double lse = m + std::log(s);
    const double loss = lse - (1.0 - ls) * row[t[n]] - ls / C * sum;
    const double lse_err = ta * (std::fabs(m) + std::fabs(std::log(s)) + sc);
    r.lse.push_back(lse);
    r.lse_bound.push_back(lse_err + to * std::fabs(lse));
    r.loss.push_back(loss);
    r.loss_bound.push_back(lse_err + ta * (std::fabs(row[t[n]]) + ls / C * std::sqrt(sq)) + to * std::fabs(loss));
  }
  return r;
}

std::vector<int64_t> random_targets(int64_t N, int64_t C, uint64_t seed) {
  std::vector<double> u = random_values(N, seed, 0.0, static_cast<double>(C));
  std::vector<int64_t> t;
  for (double v : u) t.push_back(std::min<int64_t>(C - 1, static_cast<int64_t>(v)));
  return t;
}

void check_cross_entropy(int64_t N, int64_t C, double ls, DType dt, uint64_t seed) {
  INFO("cross_entropy N " << N << " C " << C << " ls " << ls << " " << dtype_name(dt));
  Tensor xc = random_tensor({N, C}, dt, seed, -4.0, 4.0);
  Tensor xg = xc.to(kGpu);
  const std::vector<int64_t> t = random_targets(N, C, seed + 1);
  Tensor tc = from_vector(t, {N});
  Tensor tg = tc.to(kGpu);
  const std::vector<double> xv = to_f64(xc);
  const CeRef ref = ref_ce(xv, t, N, C, ls, dt);

  kernels::CrossEntropyRows rg = kernels::cross_entropy_rows(xg, tg, ls);
  kernels::CrossEntropyRows rc = kernels::cross_entropy_rows(xc, tc, ls);
  REQUIRE(rg.loss.device() == kGpu);
  CHECK(rg.loss.dtype() == kernels::cross_entropy_row_dtype(dt));
  CHECK(rg.lse.dtype() == kernels::cross_entropy_row_dtype(dt));
  CHECK(rg.loss.dtype() == (dt == DType::f64 ? DType::f64 : DType::f32));
  CHECK(rg.loss.sizes() == Shape{N});
  check_both(rg.loss, rc.loss, Expect{ref.loss, ref.loss_bound});
  check_both(rg.lse, rc.lse, Expect{ref.lse, ref.lse_bound});

  // Backward, fed the reference lse rounded to f32 and per-row gradients. Both devices recompute
  // each row's lse in the accumulation type rather than trust the f32 one, so the reference uses
  // the exact lse for every dtype.
  std::vector<double> lse32(ref.lse.size()), lse_used(ref.lse.size());
  for (size_t i = 0; i < lse32.size(); ++i) {
    lse32[i] = round_to(DType::f32, ref.lse[i]);
    lse_used[i] = ref.lse[i];
  }
  const std::vector<double> gv = random_values(N, seed + 2, -1.0, 1.0);
  std::vector<double> g32(gv.size());
  for (size_t i = 0; i < gv.size(); ++i) g32[i] = round_to(DType::f32, gv[i]);
  Tensor lc = from_vector(lse32, {N}, {.dtype = DType::f32}), gc = from_vector(g32, {N}, {.dtype = DType::f32});
  Expect eb{std::vector<double>(xv.size()), std::vector<double>(xv.size())};
  const double ta = loose_tol(acc_dtype(dt)), to = loose_tol(dt), fl = floor_of(dt);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = static_cast<size_t>(n * C + c);
      const double z = xv[k] - lse_used[n];
      const double p = std::exp(z);
      const double d = g32[n] * (p - (c == t[n] ? 1.0 - ls : 0.0) - ls / C);
      eb.out[k] = d;
      eb.bound[k] = std::fabs(g32[n]) * (p * ta * (std::fabs(z) + 2.0) + ta * (1.0 + ls)) + to * std::fabs(d) + fl;
    }
  check_both(kernels::cross_entropy_backward(gc.to(kGpu), xg, tg, lc.to(kGpu), ls),
             kernels::cross_entropy_backward(gc, xc, tc, lc, ls), eb);

  // A scalar gradient expanded to every row (stride 0), as a mean loss hands it back.
  Tensor g1 = from_vector({0.25}, {1}, {.dtype = DType::f32});
  Tensor dg = kernels::cross_entropy_backward(g1.to(kGpu).expand({N}), xg, tg, lc.to(kGpu), ls);
  Tensor dc = kernels::cross_entropy_backward(g1.expand({N}), xc, tc, lc, ls);
  check_close(dg, to_f64(dc), 2 * loose_tol(dt), 2 * (loose_tol(acc_dtype(dt)) + fl));
}

}  // namespace

TEST_CASE("cuda cross_entropy: warp and block rows, label smoothing, every float dtype", "[cuda][softmax]") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (int64_t C : {1, 10, 128, 129, 1000, 1500, 4097, 8192, 8193})
      for (double ls : {0.0, 0.1}) check_cross_entropy(37, C, ls, dt, 500 + C);
}

TEST_CASE("cuda cross_entropy: more rows than one grid of warps", "[cuda][softmax][slow]") {
  check_cross_entropy(600001, 3, 0.05, DType::f32, 600);  // 65536 blocks x 8 warps < N
}

TEST_CASE("cuda cross_entropy: an out-of-range target is an error naming it", "[cuda][softmax]") {
  // The check is read without waiting (core/device_check.h): the error comes with the loss.
  Tensor x = random_tensor({8, 10}, DType::f32, 700, -1.0, 1.0, Layout::Contiguous, kGpu);
  std::vector<int64_t> t = {0, 1, 2, 3, 4, 1234567, 6, 7};
  kernels::CrossEntropyRows bad = kernels::cross_entropy_rows(x, from_vector(t, {8}).to(kGpu));
  CHECK_THROWS_WITH(bad.loss.to(Device::cpu()),
                    Catch::Contains("target[5] = 1234567") && Catch::Contains("out of range [0, 10)"));
  t[5] = 5;
  t[2] = -1;
  bad = kernels::cross_entropy_rows(x, from_vector(t, {8}).to(kGpu));
  CHECK_THROWS_WITH(synchronize(kGpu), Catch::Contains("target[2] = -1") && Catch::Contains("out of range"));
  // The device is still usable and the flag does not leak into the next call.
  t[2] = 2;
  kernels::CrossEntropyRows r = kernels::cross_entropy_rows(x, from_vector(t, {8}).to(kGpu));
  for (double l : to_f64(r.loss)) CHECK(std::isfinite(l));
}

TEST_CASE("cuda cross_entropy: huge f32 logits keep f32 accuracy (no f32 lse round trip)", "[cuda][softmax]") {
  // Logits 1e4 + U[-4, 4]: an f32 lse near 1e4 is only good to ~5e-4 (half an ulp), so a loss
  // computed as lse - x_t, or a gradient as exp(x - lse32), would miss the bounds below, which
  // follow the f32 error of log(sum exp(x - max)) (max - x is exact for such close values).
  // With label smoothing the row's mean enters as ls (max - mean x), from a sum of the logits that
  // an f32 accumulation got wrong by ~1e-4 here (it is accumulated in double, as the CPU's is).
  const int64_t N = 37;
  for (int64_t C : {10, 1500, 9000}) {  // a warp per row, a block per row, a row too long to cache
    INFO("C " << C);
    Tensor xc = random_tensor({N, C}, DType::f32, 800 + C, 1.0e4 - 4.0, 1.0e4 + 4.0);
    Tensor xg = xc.to(kGpu);
    const std::vector<int64_t> t = random_targets(N, C, 900 + C);
    Tensor tc = from_vector(t, {N});
    Tensor tg = tc.to(kGpu);
    const std::vector<double> xv = to_f64(xc);
    const double ta = loose_tol(DType::f32), sc = std::sqrt(static_cast<double>(C));
    Expect loss{std::vector<double>(N), std::vector<double>(N)};
    std::vector<double> lse(N), zspan(N);
    for (int64_t n = 0; n < N; ++n) {
      const double* row = xv.data() + n * C;
      double m = -INFINITY, lo = INFINITY, s = 0.0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, row[c]), lo = std::min(lo, row[c]);
      for (int64_t c = 0; c < C; ++c) s += std::exp(row[c] - m);
      lse[n] = m + std::log(s);
      zspan[n] = m - lo;
      loss.out[n] = std::log(s) + (m - row[t[n]]);
      // exp of each (x - max) to a relative ta * (|z| + 1), their f32 sum to tol_sum, the log, and
      // one f32 rounding of the result.
      loss.bound[n] = ta * (zspan[n] + 2.0 + sc + std::fabs(std::log(s))) + ta * std::fabs(loss.out[n]);
    }
    kernels::CrossEntropyRows rg = kernels::cross_entropy_rows(xg, tg);
    kernels::CrossEntropyRows rc = kernels::cross_entropy_rows(xc, tc);
    check_both(rg.loss, rc.loss, loss);
    {
      const double ls = 0.1;
      Expect smooth = loss;
      for (int64_t n = 0; n < N; ++n) {
        const double* row = xv.data() + n * C;
        double m = -INFINITY, sum = 0.0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, row[c]), sum += row[c];
        const size_t i = static_cast<size_t>(n);
        // log(s) + (m - x_t) becomes log(s) + (1 - ls)(m - x_t) + ls (m - mean x); m - mean x is
        // below zspan, computed to a relative f32 rounding or two.
        const double gap_t = m - row[t[n]], gap_mean = m - sum / static_cast<double>(C);
        smooth.out[i] = loss.out[i] - ls * gap_t + ls * gap_mean;
        smooth.bound[i] = loss.bound[i] + 2 * ta * ls * zspan[n] + ta * std::fabs(smooth.out[i]);
      }
      check_both(kernels::cross_entropy_rows(xg, tg, ls).loss, kernels::cross_entropy_rows(xc, tc, ls).loss, smooth);
    }

    // Backward from the forward's own (f32) lse, as autograd hands it in.
    const std::vector<double> gv = random_values(N, 950 + C, -1.0, 1.0);
    std::vector<double> g32(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) g32[i] = round_to(DType::f32, gv[i]);
    Tensor gc = from_vector(g32, {N}, {.dtype = DType::f32});
    Expect eb{std::vector<double>(xv.size()), std::vector<double>(xv.size())};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const size_t k = static_cast<size_t>(n * C + c);
        const double z = xv[k] - lse[n];
        const double p = std::exp(z);
        const double d = g32[n] * (p - (c == t[n] ? 1.0 : 0.0));
        eb.out[k] = d;
        // z = (x - max) - log(s): exact difference, log(s) as in the forward bound.
        eb.bound[k] = std::fabs(g32[n]) * (p * ta * (std::fabs(z) + zspan[n] + 3.0 + sc) + ta) + ta * std::fabs(d);
      }
    check_both(kernels::cross_entropy_backward(gc.to(kGpu), xg, tg, rg.lse, 0.0),
               kernels::cross_entropy_backward(gc, xc, tc, rc.lse, 0.0), eb);
  }
}

TEST_CASE("cuda softmax, log_softmax and cross_entropy follow kernels/softmax.h for NaN and +-inf logits",
          "[cuda][softmax]") {
  // The rows of support/softmax_nonfinite.h: a lane (D <= 32: one entry per lane; 100: several)
  // or a block thread (1300) that sees only NaN, or only -inf, or a +inf, must give what the CPU
  // gives: NaN throughout for NaN, +inf and all -inf rows, probability 0 for a -inf entry.
  for (DType dt : {DType::f32, DType::f16, DType::f64})
    for (int64_t D : {3, 10, 32, 100, 1300}) {
      NonFiniteLogits l = nonfinite_logits(D, 900 + D);
      INFO(dtype_name(dt) << " D " << D);
      const Tensor xc = from_vector(l.x, {l.rows, D}, {.dtype = dt});
      l.x = to_f64(xc);
      const Tensor xg = xc.to(kGpu);
      const Tensor xtc = from_vector(transposed(l, l.x), {D, l.rows}, {.dtype = dt}), xtg = xtc.to(kGpu);
      const double rt = 4 * loose_tol_sum(acc_dtype(dt), D) + 2 * loose_tol(dt);
      const double at = 4 * loose_tol(acc_dtype(dt)) * (std::log(static_cast<double>(D)) + 9) + floor_of(dt);
      // Against the rule's float64 values and against the CPU twin (NaN where it has NaN, and only there).
      auto check_twin = [&](const Tensor& gpu, const Tensor& cpu, const std::vector<double>& ref, double a) {
        REQUIRE(gpu.device() == kGpu);
        check_close(gpu, ref, rt, a);
        check_close(gpu, to_f64(cpu), 2 * rt, 2 * a);
      };
      for (bool log : {false, true}) {
        INFO("log " << log);
        const std::vector<double> ref = nonfinite_softmax_ref(l, log);
        check_twin(kernels::softmax(xg, 1, log), kernels::softmax(xc, 1, log), ref, log ? at : floor_of(dt));
        check_twin(kernels::softmax(xtg, 0, log), kernels::softmax(xtc, 0, log), transposed(l, ref),
                   log ? at : floor_of(dt));
        const Tensor yc = from_vector(ref, {l.rows, D}, {.dtype = dt});
        const Tensor gc = random_tensor({l.rows, D}, dt, 901 + D, -1.0, 1.0);
        const std::vector<double> dref = nonfinite_softmax_backward_ref(to_f64(gc), to_f64(yc), l.rows, D, log);
        check_twin(kernels::softmax_backward(gc.to(kGpu), yc.to(kGpu), 1, log),
                   kernels::softmax_backward(gc, yc, 1, log), dref,
                   6 * loose_tol_sum(acc_dtype(dt), D) + 2 * loose_tol(dt) + floor_of(dt));
      }
      for (double ls : {0.0, 0.1, 1.0}) {  // 1: the target left out (a -inf one too: +inf, not NaN)
        INFO("cross_entropy ls " << ls);
        std::vector<double> loss, lse;
        nonfinite_cross_entropy_ref(l, ls, loss, lse);
        const Tensor tc = from_vector(l.target, {l.rows}), tg = tc.to(kGpu);
        const kernels::CrossEntropyRows rg = kernels::cross_entropy_rows(xg, tg, ls);
        const kernels::CrossEntropyRows rc = kernels::cross_entropy_rows(xc, tc, ls);
        const double a32 = 16 * loose_tol_sum(acc_dtype(dt), D) + 16 * loose_tol(DType::f32);
        check_twin(rg.loss, rc.loss, loss, a32);
        check_twin(rg.lse, rc.lse, lse, a32);
        const Tensor gc = from_vector(random_values(l.rows, 902, -1.0, 1.0), {l.rows}, {.dtype = DType::f32});
        const std::vector<double> dref = nonfinite_cross_entropy_backward_ref(l, to_f64(gc), ls);
        check_twin(kernels::cross_entropy_backward(gc.to(kGpu), xg, tg, rg.lse, ls),
                   kernels::cross_entropy_backward(gc, xc, tc, rc.lse, ls), dref, rt + floor_of(dt));
      }
    }
}
