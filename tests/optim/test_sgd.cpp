// optim::SGD against values worked out by hand and against a float64 reference loop
// (optim_reference.h): plain, momentum, dampening, Nesterov, weight decay, first-step buffer
// initialisation (also for a parameter whose first gradient arrives late), skipped parameters,
// strided parameters, zero_grad, an autograd-driven step, and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/optim/sgd.h>
#include "optim/optim_reference.h"
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor leaf(const std::vector<double>& vals, const Shape& shape, DType dt = DType::f32) {
  Tensor t = from_vector(vals, shape, {.dtype = dt});
  t.requires_grad_();
  return t;
}

}  // namespace

TEST_CASE("SGD: one parameter, values by hand (plain, momentum, nesterov, weight decay, dampening)", "[cpu][optim]") {
  // p = 1, g = 0.5 every step, lr = 0.1.
  struct Case {
    const char* what;
    optim::SGDOptions o;
    double p1, p2, p3;
  };
  const std::vector<Case> cases = {
      // p -= 0.05 each step
      {"plain", {.lr = 0.1}, 0.95, 0.90, 0.85},
      // buf: 0.5, 0.95, 1.355; p: 1 - 0.05, - 0.095, - 0.1355
      {"momentum 0.9", {.lr = 0.1, .momentum = 0.9}, 0.95, 0.855, 0.7195},
      // first buf = g (no dampening), then buf = 0.9 buf + 0.5 g: 0.5, 0.7, 0.88
      {"momentum 0.9, dampening 0.5", {.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, 0.95, 0.88, 0.792},
      // d = g + 0.9 buf: 0.95, 1.355, 1.7195
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}, 0.905, 0.7695, 0.59755},
      // g' = 0.5 + 0.1 p: 0.6 -> p 0.94; 0.594 -> 0.8806; 0.58806 -> 0.821794
      {"weight decay 0.1", {.lr = 0.1, .weight_decay = 0.1}, 0.94, 0.8806, 0.821794},
  };
  // Bound: SgdRef's running error bound (optim_reference.h) with ember's unit roundoff. It counts
  // one float64 rounding per product with a hyperparameter; that u64 |term| also covers the
  // hyperparameters' own rounding to double (0.1, 0.9 are not binary), so it bounds |ember - the
  // exact decimal result|. The decimal expected values round once more when stored: u64 |expect|.
  for (const DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      INFO(c.what << " " << dtype_name(dt));
      Tensor p = leaf({1.0}, {1}, dt);
      optim::SGD opt({p}, c.o);
      SgdRef st{c.o.lr, c.o.momentum, c.o.dampening, c.o.weight_decay, c.o.nesterov};
      st.u = unit_roundoff(dt);
      std::vector<double> ref = {1.0};
      const double expect[3] = {c.p1, c.p2, c.p3};
      for (int s = 0; s < 3; ++s) {
        p.set_grad(from_vector({0.5}, {1}, {.dtype = dt}));
        opt.step();
        st.step(ref, {0.5});
        const double bound = kSecondOrder * st.err_p[0] + unit_roundoff(DType::f64) * std::fabs(expect[s]);
        INFO("step " << s + 1 << ", bound " << bound);
        CHECK(std::fabs(p.item<double>() - expect[s]) <= bound);
      }
    }
  }
}

TEST_CASE("SGD: three steps against the float64 reference, every option combination", "[cpu][optim]") {
  const std::vector<Shape> shapes = {{7, 13}, {5}, {1, 3, 1}, {65537}};  // the last spans several kernel chunks
  struct Combo {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Combo> combos = {{0, 0, 0, false},     {0.9, 0, 0, false},  {0.9, 0.3, 0, false},
                                     {0.9, 0, 0, true},    {0, 0, 1e-2, false}, {0.8, 0.1, 5e-2, false},
                                     {0.95, 0, 1e-3, true}};
  uint64_t seed = 100;
  for (const DType dt : {DType::f32, DType::f64}) {
    for (const Combo& c : combos) {
      INFO(dtype_name(dt) << " momentum " << c.momentum << " dampening " << c.dampening << " wd " << c.weight_decay
                          << " nesterov " << c.nesterov);
      std::vector<Tensor> params;
      std::vector<std::vector<double>> ref;
      std::vector<SgdRef> st(shapes.size());
      for (size_t i = 0; i < shapes.size(); ++i) {
        params.push_back(random_tensor(shapes[i], dt, ++seed).requires_grad_());
        ref.push_back(to_f64(params.back()));
        st[i] = SgdRef{0.05, c.momentum, c.dampening, c.weight_decay, c.nesterov};
        st[i].u = unit_roundoff(dt);
      }
      optim::SGD opt(params, {.lr = 0.05,
                              .momentum = c.momentum,
                              .dampening = c.dampening,
                              .weight_decay = c.weight_decay,
                              .nesterov = c.nesterov});
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          Tensor g = random_tensor(shapes[i], dt, ++seed);
          params[i].set_grad(g);
          st[i].step(ref[i], to_f64(g));
        }
        opt.step();
        for (size_t i = 0; i < shapes.size(); ++i) check_bounded(params[i], ref[i], st[i].err_p);
      }
      // The momentum buffer is state, of the parameter's shape and dtype.
      if (c.momentum != 0) {
        REQUIRE(opt.state(0).count("momentum_buffer") == 1);
        check_bounded(opt.state(0).at("momentum_buffer"), st[0].buf, st[0].err_buf);
      } else {
        CHECK(opt.state(0).empty());
      }
    }
  }
}

TEST_CASE("SGD: a parameter without a gradient is skipped, its buffer starts at its first gradient", "[cpu][optim]") {
  Tensor a = random_tensor({4, 3}, DType::f32, 1).requires_grad_();
  Tensor b = random_tensor({6}, DType::f32, 2).requires_grad_();
  std::vector<double> ra = to_f64(a), rb = to_f64(b);
  const std::vector<double> b0 = rb;
  SgdRef sa{0.1, 0.9, 0.2, 0.01, false}, sb{0.1, 0.9, 0.2, 0.01, false};
  sa.u = sb.u = unit_roundoff(DType::f32);
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01});
  // Step 1: only a has a gradient.
  Tensor ga = random_tensor({4, 3}, DType::f32, 3);
  a.set_grad(ga);
  sa.step(ra, to_f64(ga));
  opt.step();
  check_bounded(a, ra, sa.err_p);
  CHECK(to_f64(b) == b0);  // untouched, bit for bit
  CHECK(opt.state(1).empty());
  // Steps 2 and 3: both; b's first step initialises its buffer without dampening.
  for (uint64_t s = 0; s < 2; ++s) {
    Tensor g1 = random_tensor({4, 3}, DType::f32, 10 + s), g2 = random_tensor({6}, DType::f32, 20 + s);
    a.set_grad(g1);
    b.set_grad(g2);
    sa.step(ra, to_f64(g1));
    sb.step(rb, to_f64(g2));
    opt.step();
    check_bounded(a, ra, sa.err_p);
    check_bounded(b, rb, sb.err_p);
  }
}

TEST_CASE("SGD: strided (non-contiguous) parameters are updated through their own strides", "[cpu][optim]") {
  for (const Layout layout : {Layout::Transposed, Layout::Strided}) {
    Tensor p = random_tensor({5, 7}, DType::f32, 31, -1, 1, layout);
    REQUIRE_FALSE(p.is_contiguous());
    p.requires_grad_();
    Tensor g = random_tensor({5, 7}, DType::f32, 32, -1, 1, Layout::Transposed);
    std::vector<double> ref = to_f64(p);
    SgdRef st{0.2, 0.5, 0, 0.1, true};
    st.u = unit_roundoff(DType::f32);
    optim::SGD opt({p}, {.lr = 0.2, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true});
    for (int s = 0; s < 2; ++s) {
      p.set_grad(g);
      st.step(ref, to_f64(g));
      opt.step();
      check_bounded(p, ref, st.err_p);
    }
    // The strided layout's gaps hold 1e4 (random_tensor poisons them): still there.
    if (layout == Layout::Strided) {
      const float* base = static_cast<const float*>(p.storage().data());
      CHECK(base[1] == 1e4f);
    }
  }
}

TEST_CASE("SGD: zero_grad sets gradients to undefined, or to zero in place", "[cpu][optim]") {
  Tensor p = random_tensor({3, 2}, DType::f32, 5).requires_grad_();
  Tensor q = random_tensor({2}, DType::f32, 6).requires_grad_();
  optim::SGD opt({p, q}, {.lr = 0.1});
  p.set_grad(ones({3, 2}));
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  CHECK_FALSE(q.grad().defined());
  Tensor g = ones({2});
  q.set_grad(g);
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(q.grad().defined());
  CHECK(q.grad().is_same(g));  // zeroed in place, same tensor
  CHECK(to_f64(q.grad()) == std::vector<double>{0.0, 0.0});
}

TEST_CASE("SGD: a step driven by autograd (loss.backward) and set_lr", "[cpu][optim]") {
  // L = sum((p - t)^2): dL/dp = 2 (p - t), so p1 = p0 - lr * 2 (p0 - t).
  Tensor p = random_tensor({9}, DType::f64, 40).requires_grad_();
  Tensor t = random_tensor({9}, DType::f64, 41);
  std::vector<double> ref = to_f64(p);
  const std::vector<double> tv = to_f64(t);
  optim::SGD opt({p}, {.lr = 0.25});
  // Running error bound, r = u + u64 = 2^-52 (ember's f64 rounding and this loop's): p - t rounds
  // once on each side (backward's 2 d is exact: d + d), lr * g once, the subtraction once; errors
  // already made pass through p' = p - 2 lr (p - t), whose derivative 1 - 2 lr is within [0, 1).
  const double r = 2 * unit_roundoff(DType::f64);
  std::vector<double> err(ref.size(), 0.0);
  for (double lr : {0.25, 0.1}) {
    opt.set_lr(lr);
    CHECK(opt.lr() == lr);
    opt.zero_grad();
    Tensor d = p - t;
    sum(d * d).backward();
    opt.step();
    for (size_t i = 0; i < ref.size(); ++i) {
      const double step = lr * 2 * (ref[i] - tv[i]);
      ref[i] -= step;
      err[i] = (1 - 2 * lr) * err[i] + r * (2 * std::fabs(step) + std::fabs(ref[i]));
    }
    check_bounded(p, ref, err);
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
}

TEST_CASE("SGD: argument errors name the problem", "[cpu][optim]") {
  Tensor p = random_tensor({2, 2}, DType::f32, 7).requires_grad_();
  CHECK_THAT(error_of([&] { optim::SGD({p}, {.lr = -1}); }), Catch::Contains("invalid learning rate -1"));
  CHECK_THAT(error_of([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }),
             Catch::Contains("Nesterov momentum requires momentum > 0 and dampening == 0"));
  CHECK_THAT(error_of([&] { optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }),
             Catch::Contains("dampening 0.1"));
  CHECK_THAT(error_of([&] {
               optim::SGD({p, p}, {.lr = 0.1});
             }),
             Catch::Contains("parameters 0 and 1 are the same tensor"));
  Tensor h = empty({3}, {.dtype = DType::f16});
  CHECK_THAT(error_of([&] { optim::SGD({h}, {.lr = 0.1}); }), Catch::Contains("has dtype f16; expected f32 or f64"));
  Tensor nonleaf = p * 2.0;
  CHECK_THAT(error_of([&] { optim::SGD({nonleaf}, {.lr = 0.1}); }), Catch::Contains("is not a leaf tensor"));
  optim::SGD opt({p}, {.lr = 0.1});
  CHECK_THAT(error_of([&] { opt.set_lr(-0.5); }), Catch::Contains("invalid learning rate -0.5"));
  CHECK_THAT(error_of([&] { opt.hyperparameter("beta1"); }), Catch::Contains("no hyperparameter 'beta1'"));
}
