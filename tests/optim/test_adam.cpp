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
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor p = from_vector({1.0, -2.0}, {2}, {.dtype = dt}).requires_grad_();
    optim::Adam opt({p}, {.lr = 0.1});
    p.set_grad(from_vector({0.5, -4.0}, {2}, {.dtype = dt}));
    opt.step();
    const std::vector<double> got = to_f64(p);
    CHECK(got[0] == Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(4 * tol(dt)));
    CHECK(got[1] == Approx(-2.0 + 0.1 * 4.0 / (4.0 + 1e-8)).epsilon(4 * tol(dt)));
    // Step 2 with the same gradient: m = 0.19 g, v = 0.001999 g^2, bias corrections 0.19 and
    // 0.001999, so again m_hat = g, v_hat = g^2: another lr * sign(g) (up to eps).
    p.set_grad(from_vector({0.5, -4.0}, {2}, {.dtype = dt}));
    opt.step();
    const std::vector<double> got2 = to_f64(p);
    CHECK(got2[0] == Approx(1.0 - 0.2 * 0.5 / (0.5 + 1e-8)).epsilon(4 * tol(dt)));
    CHECK(got2[1] == Approx(-2.0 + 0.2 * 4.0 / (4.0 + 1e-8)).epsilon(4 * tol(dt)));
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
        for (size_t i = 0; i < shapes.size(); ++i) check_param(params[i], ref[i], dt);
      }
      check_param(opt->state(1).at("exp_avg"), st[1].m, dt);
      check_param(opt->state(1).at("exp_avg_sq"), st[1].v, dt);
      CHECK(opt->state(3).at("step").item<int64_t>() == 3);
    }
  }
}

TEST_CASE("Adam: step counts and bias corrections are per parameter", "[cpu][optim]") {
  Tensor a = random_tensor({8}, DType::f32, 70).requires_grad_();
  Tensor b = random_tensor({3, 3}, DType::f32, 71).requires_grad_();
  std::vector<double> ra = to_f64(a), rb = to_f64(b);
  AdamRef sa{0.05}, sb{0.05};
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
    check_param(a, ra, DType::f32);
    check_param(b, rb, DType::f32);
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
