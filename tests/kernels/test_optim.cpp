// The fused optimizer kernels of kernels/optim.h on the CPU, called directly: f16/bf16 gradients
// with f32 parameters, many tensors spanning several chunks, strided operands, the global norm over
// mixed dtypes, clip_by_norm_ with a given norm, and the argument checks (errors name the slot).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/kernels/optim.h>
#include "optim/optim_reference.h"
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("sgd_step / adam_step kernels: f32 parameters with f16 and bf16 gradients", "[cpu][optim]") {
  for (const DType gdt : {DType::f16, DType::bf16}) {
    INFO("grad dtype " << dtype_name(gdt));
    const std::vector<Shape> shapes = {{3, 33}, {100003}, {1}};
    std::vector<Tensor> p_sgd, p_adam, bufs, ms, vs;
    std::vector<std::vector<double>> r_sgd, r_adam;
    std::vector<SgdRef> st_sgd;
    std::vector<AdamRef> st_adam;
    for (size_t i = 0; i < shapes.size(); ++i) {
      p_sgd.push_back(random_tensor(shapes[i], DType::f32, 10 + i));
      p_adam.push_back(random_tensor(shapes[i], DType::f32, 20 + i));
      bufs.push_back(zeros(shapes[i]));
      ms.push_back(zeros(shapes[i]));
      vs.push_back(zeros(shapes[i]));
      r_sgd.push_back(to_f64(p_sgd[i]));
      r_adam.push_back(to_f64(p_adam[i]));
      st_sgd.push_back(SgdRef{0.1, 0.9, 0.1, 0.01, false});
      st_adam.push_back(AdamRef{0.01, 0.9, 0.999, 1e-8, 0.05, true});
      // f32 parameters: the math is f32 whatever the gradients' dtype (their values are exact in f32).
      st_sgd.back().u = st_adam.back().u = unit_roundoff(DType::f32);
    }
    for (int s = 0; s < 3; ++s) {
      std::vector<kernels::SgdSlot> sgd;
      std::vector<kernels::AdamSlot> adam;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor g = random_tensor(shapes[i], gdt, 100 * s + i);
        const std::vector<double> gv = to_f64(g);  // the 16-bit values, exactly
        st_sgd[i].step(r_sgd[i], gv);
        st_adam[i].step(r_adam[i], gv);
        sgd.push_back({p_sgd[i], g, bufs[i], s == 0});
        adam.push_back({p_adam[i], g, ms[i], vs[i], s + 1});
      }
      kernels::sgd_step(sgd, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
      kernels::adam_step(adam, {.lr = 0.01, .weight_decay = 0.05, .decoupled = true});
      for (size_t i = 0; i < shapes.size(); ++i) {
        check_bounded(p_sgd[i], r_sgd[i], st_sgd[i].err_p);
        check_bounded(p_adam[i], r_adam[i], st_adam[i].err_p);
      }
    }
  }
}

TEST_CASE("sgd_step kernel: strided param, gradient and buffer", "[cpu][optim]") {
  Tensor p = random_tensor({9, 4}, DType::f64, 1, -1, 1, Layout::Transposed);
  Tensor g = random_tensor({9, 4}, DType::f64, 2, -1, 1, Layout::Strided);
  Tensor buf = random_tensor({9, 4}, DType::f64, 3, -1, 1, Layout::Strided);
  SgdRef ref{0.3, 0.7, 0.2, 0, false};
  ref.buf = to_f64(buf);
  ref.has_buf = true;
  ref.u = unit_roundoff(DType::f64);
  std::vector<double> rp = to_f64(p);
  ref.step(rp, to_f64(g));
  kernels::sgd_step({{p, g, buf, false}}, {.lr = 0.3, .momentum = 0.7, .dampening = 0.2});
  check_bounded(p, rp, ref.err_p);
  check_bounded(buf, ref.buf, ref.err_buf);
}

TEST_CASE("global_norm kernel: mixed dtypes, layouts and sizes against float64", "[cpu][optim]") {
  std::vector<Tensor> ts = {random_tensor({1000, 70}, DType::f32, 1), random_tensor({33}, DType::f16, 2, -4, 4),
                            random_tensor({17, 5}, DType::bf16, 3, -1, 1, Layout::Transposed),
                            random_tensor({12, 6}, DType::f32, 4, -3, 3, Layout::Strided), zeros({0, 3})};
  double sq = 0;
  int64_t count = 0;
  for (const Tensor& t : ts)
    for (double v : to_f64(t)) sq += v * v, ++count;
  Tensor n = kernels::global_norm(ts);
  CHECK(n.dtype() == DType::f32);
  CHECK(n.dim() == 0);
  // Squares of f32/f16/bf16 values are exact in double (at most 48 bits); the kernel's chunked sum
  // and this loop's are each within gamma_count(u64) of the exact sum (half that after the sqrt);
  // a sqrt in double each (2 u64); the cast of the result to f32 (u32).
  const double u64 = unit_roundoff(DType::f64);
  CHECK(n.item<double>() == Approx(std::sqrt(sq)).epsilon(unit_roundoff(DType::f32) + gamma_n(count, u64) + 2 * u64));
  // All f64: the result is f64 and (summed in double) accurate to f64.
  std::vector<Tensor> ds = {random_tensor({300, 301}, DType::f64, 5), random_tensor({7}, DType::f64, 6)};
  double dsq = 0;
  for (const Tensor& t : ds)
    for (double v : to_f64(t)) dsq += v * v;
  Tensor dn = kernels::global_norm(ds);
  CHECK(dn.dtype() == DType::f64);
  // Each side: n squares and n - 1 sums in double, within gamma_n(u64) of the exact sum of
  // squares (half that after the sqrt), and a sqrt (u64).
  const int64_t dcount = 300 * 301 + 7;
  CHECK(dn.item<double>() == Approx(std::sqrt(dsq)).epsilon(gamma_n(dcount, u64) + 2 * u64));
  // No tensors: a CPU 0.
  CHECK(kernels::global_norm({}).item<double>() == 0.0);
}

TEST_CASE("clip_by_norm_ kernel: the factor min(1, max / (norm + eps)) over mixed dtypes", "[cpu][optim]") {
  Tensor a = random_tensor({50, 3}, DType::f32, 7);
  Tensor b = random_tensor({20}, DType::bf16, 8);
  Tensor c = random_tensor({4, 4}, DType::f64, 9, -1, 1, Layout::Transposed);
  const std::vector<double> a0 = to_f64(a), b0 = to_f64(b), c0 = to_f64(c);
  kernels::clip_by_norm_({a, b, c}, scalar_tensor(10.0), 2.0, 0.0);  // factor 0.2
  auto scaled = [](std::vector<double> v, double f) {
    for (double& x : v) x *= f;
    return v;
  };
  // x f: f = 2 / (10 + 0) in double (u64), cast to the math dtype (f32 for f32 and bf16; none
  // for f64) and the product (2 u), the store of a bf16 result (u_bf16); the reference's 0.2 and its
  // product (2 u64). First order, kSecondOrder for the rest.
  const double u64 = unit_roundoff(DType::f64), u32 = unit_roundoff(DType::f32);
  const double rt32 = kSecondOrder * (2 * u32 + 3 * u64);
  check_close(a, scaled(a0, 0.2), rt32);
  check_close(b, scaled(b0, 0.2), kSecondOrder * (unit_roundoff(DType::bf16) + 2 * u32 + 3 * u64));
  check_close(c, scaled(c0, 0.2), kSecondOrder * 4 * u64);
  const std::vector<double> a1 = to_f64(a);
  kernels::clip_by_norm_({a}, scalar_tensor(1.0, {.dtype = DType::f64}), 2.0);  // factor capped at 1: unchanged
  CHECK(to_f64(a) == a1);  // x * 1 is exact
}

TEST_CASE("optimizer kernels: argument errors name the slot", "[cpu][optim]") {
  Tensor p = zeros({3, 2}), g = zeros({3, 2}), m = zeros({3, 2}), v = zeros({3, 2});
  const kernels::AdamHyper ah{.lr = 0.1};
  CHECK_THAT(error_of([&] {
               kernels::adam_step({{p, g, m, v, 1}, {p, zeros({2, 3}), m, v, 1}}, ah);
             }),
             Catch::Contains("adam_step: slot 1: gradient of shape [2, 3] for a parameter of shape [3, 2]"));
  CHECK_THAT(error_of([&] {
               kernels::adam_step({{p, g, m, zeros({3, 2}, {.dtype = DType::f64}), 1}}, ah);
             }),
             Catch::Contains("slot 0: exp_avg_sq of dtype f64 for a parameter of dtype f32"));
  CHECK_THAT(error_of([&] { kernels::adam_step({{p, g, m, v, 0}}, ah); }), Catch::Contains("step count 0"));
  CHECK_THAT(error_of([&] {
               kernels::sgd_step(
                   {{zeros({2}, {.dtype = DType::f64}), zeros({2}, {.dtype = DType::f16}), Tensor(), false}}, {});
             }),
             Catch::Contains("gradient of dtype f16 for a parameter of dtype f64"));
  CHECK_THAT(error_of([&] {
               kernels::sgd_step({{p, g, Tensor(), false}}, {.lr = 0.1, .momentum = 0.9});
             }),
             Catch::Contains("slot 0: momentum_buffer is undefined"));
  CHECK_THAT(error_of([&] {
               kernels::sgd_step({{p, g, m, false}}, {.lr = 0.1});
             }),
             Catch::Contains("a momentum buffer was given with momentum 0"));
  CHECK_THAT(error_of([&] {
               kernels::sgd_step(
                   {{zeros({2}, {.dtype = DType::i64}), zeros({2}, {.dtype = DType::i64}), Tensor(), false}}, {});
             }),
             Catch::Contains("parameters must be f32 or f64, got i64"));
  CHECK_THAT(error_of([&] {
               kernels::global_norm({p, zeros({2}, {.dtype = DType::i32})});
             }),
             Catch::Contains("tensor 1 has dtype i32"));
  CHECK_THAT(error_of([&] { kernels::clip_by_norm_({p}, zeros({2}), 1.0); }),
             Catch::Contains("total_norm must be a one-element f32/f64 tensor, got [2] f32"));
}
