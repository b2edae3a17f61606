// optim::Adam and optim::AdamW against values by hand and a float64 reference loop
// (optim_reference.h): bias correction, coupled L2 vs decoupled decay, per-parameter step counts
// when a parameter skips a step, state tensors, and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/optim/adam.h>
#include "optim/optim_reference.h"
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

TEST_CASE("Adam: first steps by hand", "[cpu][optim]") {
  // Step 1: m = 0.1 g, v = 0.001 g^2; m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps).
  //
  // Bound (u = unit_roundoff(dt), u64 = 2^-53, r = u + u64), counting kernels/optim_math.h's
  // roundings of the update d = (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps)) relative to |d|:
  //   step 1: lr / bc1 in double and its cast (u64 + u), c1 = 1 - beta1's cast and c1 g (2u; bc1 is
  //     the same double 1 - beta1, so they cancel), v = c2 g g (3u, halved by the sqrt), the sqrt,
  //     sqrt(bc2)'s double sqrt and cast, the division and the eps sum (4u + u64), m / den and the
  //     product (2u): 10.5u + 2u64; the hand formula rounds three times in double (3u64), its
  //     1 - d once (u64 |p1|), ember's p - d once (u |p1|). So r |p1| + 11 r |d1|.
  //   step 2: m2 = c1 (2 - c1) g (3.4u), v2 = c2 (1 + beta2) g^2 (5u, halved), the sqrt and the
  //     other roundings as above (6u), lr / bc1 (u): 13u. The bias corrections 1 - pow(beta, 2) are
  //     differences of nearby doubles: pow's error (at most 1 ulp, 2 u64 beta^2) is amplified by
  //     beta^2 / (1 - beta^2), 499 for beta2 = 0.999 (halved by the sqrt) and 4.3 for beta1 = 0.9:
  //     about 510 u64 of |d2| with the other double roundings. So r (|p1| + |p2|) + 11 r |d1| +
  //     (13 r + 520 u64) |d2| for the two steps.
  const double u64 = unit_roundoff(DType::f64);
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    const double r = unit_roundoff(dt) + u64;
    Tensor p = from_vector({1.0, -2.0}, {2}, {.dtype = dt}).requires_grad_();
    optim::Adam opt({p}, {.lr = 0.1});
    p.set_grad(from_vector({0.5, -4.0}, {2}, {.dtype = dt}));
    opt.step();
    const std::vector<double> got = to_f64(p);
    const double d[2] = {0.1 * 0.5 / (0.5 + 1e-8), 0.1 * 4.0 / (4.0 + 1e-8)};  // |d1| = |d2| per element
    const double p1[2] = {1.0 - d[0], -2.0 + d[1]}, p2[2] = {1.0 - 2 * d[0], -2.0 + 2 * d[1]};
    for (int i = 0; i < 2; ++i) CHECK(std::fabs(got[i] - p1[i]) <= r * std::fabs(p1[i]) + 11 * r * d[i]);
    // Step 2 with the same gradient: m = 0.19 g, v = 0.001999 g^2, bias corrections 0.19 and
    // 0.001999, so again m_hat = g, v_hat = g^2: another lr * sign(g) (up to eps).
    p.set_grad(from_vector({0.5, -4.0}, {2}, {.dtype = dt}));
    opt.step();
    const std::vector<double> got2 = to_f64(p);
    for (int i = 0; i < 2; ++i)
      CHECK(std::fabs(got2[i] - p2[i]) <=
            r * (std::fabs(p1[i]) + std::fabs(p2[i])) + 11 * r * d[i] + (13 * r + 520 * u64) * d[i]);
    CHECK(opt.state(0).at("step").item<int64_t>() == 2);
    CHECK(opt.state(0).at("step").dtype() == DType::i64);
    CHECK(opt.state(0).at("step").dim() == 0);
  }
}

TEST_CASE("AdamW: decoupled decay by hand", "[cpu][optim]") {
  // p = 2, g = 0 (so the Adam term is 0 / (0 + eps) = 0): only the decay acts, p *= 1 - lr * wd.
  Tensor p = from_vector({2.0}, {1}, {.dtype = DType::f64}).requires_grad_();
  optim::AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  CHECK(opt.name() == "AdamW");
  for (int s = 0; s < 3; ++s) {
    p.set_grad(zeros({1}, {.dtype = DType::f64}));
    opt.step();
  }
  CHECK(p.item<double>() == Approx(2.0 * std::pow(0.95, 3)).epsilon(1e-12));
  // Adam's coupled decay with g = 0: g' = wd * p, and step 1 moves p by lr * sign(p) instead.
  Tensor q = from_vector({2.0}, {1}, {.dtype = DType::f64}).requires_grad_();
  optim::Adam adam({q}, {.lr = 0.1, .weight_decay = 0.5});
  q.set_grad(zeros({1}, {.dtype = DType::f64}));
  adam.step();
  CHECK(q.item<double>() == Approx(2.0 - 0.1 * 1.0 / (1.0 + 1e-8)).epsilon(1e-12));
}

TEST_CASE("Adam and AdamW: three steps against the float64 reference", "[cpu][optim]") {
  const std::vector<Shape> shapes = {{11, 6}, {3}, {2, 1, 5}, {40001}};
  struct Combo {
    bool decoupled;
    double weight_decay, beta1, beta2, eps;
  };
  const std::vector<Combo> combos = {{false, 0, 0.9, 0.999, 1e-8},
                                     {false, 1e-2, 0.9, 0.999, 1e-8},
                                     {true, 1e-2, 0.9, 0.999, 1e-8},
                                     {true, 0.1, 0.8, 0.99, 1e-6},
                                     {false, 0, 0.0, 0.5, 1e-3}};
  uint64_t seed = 500;
  for (const DType dt : {DType::f32, DType::f64}) {
    for (const Combo& c : combos) {
      INFO(dtype_name(dt) << (c.decoupled ? " AdamW" : " Adam") << " wd " << c.weight_decay << " betas " << c.beta1
                          << "," << c.beta2 << " eps " << c.eps);
      std::vector<Tensor> params;
      std::vector<std::vector<double>> ref;
      std::vector<AdamRef> st(shapes.size());
      for (size_t i = 0; i < shapes.size(); ++i) {
        params.push_back(random_tensor(shapes[i], dt, ++seed).requires_grad_());
        ref.push_back(to_f64(params.back()));
        st[i] = AdamRef{0.01, c.beta1, c.beta2, c.eps, c.weight_decay, c.decoupled};
        st[i].u = unit_roundoff(dt);
      }
      std::unique_ptr<optim::Optimizer> opt;
      if (c.decoupled)
        opt = std::make_unique<optim::AdamW>(
            params,
            optim::AdamWOptions{.lr = 0.01, .betas = {c.beta1, c.beta2}, .eps = c.eps, .weight_decay = c.weight_decay});
      else
        opt = std::make_unique<optim::Adam>(
            params,
            optim::AdamOptions{.lr = 0.01, .betas = {c.beta1, c.beta2}, .eps = c.eps, .weight_decay = c.weight_decay});
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          Tensor g = random_tensor(shapes[i], dt, ++seed);
          params[i].set_grad(g);
          st[i].step(ref[i], to_f64(g));
        }
        opt->step();
        for (size_t i = 0; i < shapes.size(); ++i) check_bounded(params[i], ref[i], st[i].err_p);
      }
      check_bounded(opt->state(1).at("exp_avg"), st[1].m, st[1].err_m);
      check_bounded(opt->state(1).at("exp_avg_sq"), st[1].v, st[1].err_v);
      CHECK(opt->state(3).at("step").item<int64_t>() == 3);
    }
  }
}

TEST_CASE("Adam: step counts and bias corrections are per parameter", "[cpu][optim]") {
  Tensor a = random_tensor({8}, DType::f32, 70).requires_grad_();
  Tensor b = random_tensor({3, 3}, DType::f32, 71).requires_grad_();
  std::vector<double> ra = to_f64(a), rb = to_f64(b);
  AdamRef sa{0.05}, sb{0.05};
  sa.u = sb.u = unit_roundoff(DType::f32);
  sb.err_p.assign(rb.size(), 0.0);  // b is untouched until its first gradient: bound 0, exact
  optim::Adam opt({a, b}, {.lr = 0.05});
  for (uint64_t s = 0; s < 4; ++s) {
    Tensor ga = random_tensor({8}, DType::f32, 80 + s);
    a.set_grad(ga);
    sa.step(ra, to_f64(ga));
    if (s % 2 == 1) {  // b only gets gradients on steps 2 and 4
      Tensor gb = random_tensor({3, 3}, DType::f32, 90 + s);
      b.set_grad(gb);
      sb.step(rb, to_f64(gb));
    } else {
      b.set_grad(Tensor());
    }
    opt.step();
    check_bounded(a, ra, sa.err_p);
    check_bounded(b, rb, sb.err_p);
  }
  CHECK(opt.state(0).at("step").item<int64_t>() == 4);
  CHECK(opt.state(1).at("step").item<int64_t>() == 2);
}

TEST_CASE("Adam: options round trip and argument errors", "[cpu][optim]") {
  Tensor p = random_tensor({2}, DType::f32, 9).requires_grad_();
  optim::AdamW w({p}, {.lr = 3e-4, .betas = {0.85, 0.98}, .eps = 1e-7});
  const optim::AdamWOptions o = w.options();
  CHECK(o.lr == 3e-4);
  CHECK(o.betas.first == 0.85);
  CHECK(o.betas.second == 0.98);
  CHECK(o.eps == 1e-7);
  CHECK(o.weight_decay == 1e-2);  // AdamW's default, as PyTorch
  CHECK(optim::Adam({p}).options().weight_decay == 0.0);
  CHECK_THAT(error_of([&] { optim::Adam({p}, {.betas = {1.0, 0.999}}); }), Catch::Contains("invalid beta1 1"));
  CHECK_THAT(error_of([&] { optim::Adam({p}, {.betas = {0.9, -0.1}}); }), Catch::Contains("invalid beta2 -0.1"));
  CHECK_THAT(error_of([&] { optim::AdamW({p}, {.eps = -1}); }), Catch::Contains("AdamW: invalid eps -1"));
  CHECK_THAT(error_of([&] { optim::Adam({p}, {.weight_decay = -1}); }), Catch::Contains("invalid weight_decay -1"));
}
