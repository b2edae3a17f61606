// amp::GradScaler: an inf or NaN in one gradient skips the step (parameters and optimizer state
// unchanged) and halves the scale; growth_interval clean steps double it; unscaling is exact for
// power-of-two scales (f32, f64, f16, bf16 and strided gradients, tensors of several blocks); the
// fused pass finds a bad value in any block; scale() is differentiable; a disabled scaler is a
// pass-through; the sync hook decides; state round-trips through a checkpoint file; misuse and
// bad options are errors naming the problem. (f16/bf16 gradients go through the kernel directly:
// optimizers take f32/f64 parameters, whose gradients have their dtype.)
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/amp.h>
#include <ember/kernels/factory.h>
#include <ember/optim/grad_scaler.h>
#include <ember/optim/sgd.h>
#include <ember/serialize/checkpoint.h>
#include "optim/grad_scaler_check.h"
#include "support/error_of.h"
#include "support/reference.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::testing;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Values U[-1, 1) (random_tensor(shape, dt, seed)) times `scale`, laid out as `layout`; exact for
/// a power-of-two scale that keeps them inside dt's normal range.
Tensor scaled_values(const Shape& shape, DType dt, uint64_t seed, double scale, Layout layout) {
  Tensor g = random_tensor(shape, dt, seed, -1, 1, layout);
  g.copy_(g.to(DType::f64) * scale);
  return g;
}

/// A leaf parameter of `shape` and the gradient's dtype (f32 or f64) whose gradient is
/// scaled_values(shape, dt, seed, scale, layout).
Tensor param_with_grad(const Shape& shape, DType dt, uint64_t seed, double scale, Layout layout) {
  Tensor p = zeros(shape, {.dtype = dt}).requires_grad_();
  p.set_grad(scaled_values(shape, dt, seed, scale, layout));
  return p;
}

}  // namespace

TEST_CASE("GradScaler: an inf or a NaN in one gradient skips the step and halves the scale",
          "[cpu][optim][grad_scaler]") {
  check_skip_on(Device::cpu(), kInf);
  check_skip_on(Device::cpu(), -kInf);
  check_skip_on(Device::cpu(), kNaN);
}

TEST_CASE("GradScaler: growth_interval clean steps double the scale", "[cpu][optim][grad_scaler]") {
  TinyModel m(Device::cpu(), 1);
  optim::SGD opt(m.params(), {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  const std::vector<double> scales = {8, 8, 16, 16, 16, 32};
  const std::vector<int64_t> trackers = {1, 2, 0, 1, 2, 0};
  for (size_t i = 0; i < scales.size(); ++i) {
    INFO("step " << i);
    opt.zero_grad();
    scaler.scale(m.loss()).backward();
    CHECK(scaler.step(opt));
    scaler.update();
    CHECK(scaler.scale() == scales[i]);
    CHECK(scaler.growth_tracker() == trackers[i]);
  }
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("GradScaler: a clean step applies the unscaled gradients", "[cpu][optim][grad_scaler]") {
  for (const DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor a = param_with_grad({4, 3}, dt, 1, 1024, Layout::Contiguous);
    Tensor b = param_with_grad({5}, dt, 2, 1024, Layout::Transposed);
    const std::vector<double> ga = to_f64(a.grad()), gb = to_f64(b.grad());
    optim::SGD opt({a, b}, {.lr = 0.5});
    amp::GradScaler scaler({.init_scale = 1024});
    CHECK(scaler.step(opt));
    for (size_t i = 0; i < ga.size(); ++i) CHECK(a.to_vector<double>()[i] == -0.5 * ga[i] / 1024);
    for (size_t i = 0; i < gb.size(); ++i) CHECK(b.to_vector<double>()[i] == -0.5 * gb[i] / 1024);
    scaler.update();
  }
}

TEST_CASE("GradScaler: unscale is exact for power-of-two scales (f32, f64, f16, bf16)", "[cpu][optim][grad_scaler]") {
  // (40000): three CPU blocks; (33, 17) and (1): odd sizes. Every layout.
  const std::vector<Shape> shapes = {{40000}, {33, 17}, {1}};
  for (const DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const double scale : {1.0, 2.0, 1024.0, 65536.0, std::ldexp(1.0, -3)}) {
      // f16: |g| * scale must stay below 65504, and above the subnormals (which would round).
      if (dt == DType::f16 && (scale > 1024 || scale < 1)) continue;
      for (const Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        INFO(dtype_name(dt) << " scale " << scale << " layout " << static_cast<int>(layout));
        std::vector<Tensor> grads;
        for (size_t i = 0; i < shapes.size(); ++i) grads.push_back(scaled_values(shapes[i], dt, 3 + i, scale, layout));
        Tensor flag = zeros({1});
        kernels::non_finite_check_and_unscale_(grads, flag, 1.0 / scale);
        CHECK(flag.item<float>() == 0);
        for (size_t i = 0; i < shapes.size(); ++i)
          CHECK(to_f64(grads[i]) == to_f64(random_tensor(shapes[i], dt, 3 + i, -1, 1)));
        if (dt != DType::f32 && dt != DType::f64) continue;
        // The same through the scaler and an optimizer's parameters.
        std::vector<Tensor> params;
        for (size_t i = 0; i < shapes.size(); ++i)
          params.push_back(param_with_grad(shapes[i], dt, 3 + i, scale, layout));
        optim::SGD opt(params, {.lr = 0.1});
        amp::GradScaler scaler({.init_scale = scale});
        scaler.unscale_(opt);
        for (size_t i = 0; i < shapes.size(); ++i)
          CHECK(to_f64(params[i].grad()) == to_f64(random_tensor(shapes[i], dt, 3 + i, -1, 1)));
        CHECK(scaler.step(opt));  // no non-finite value was found
        scaler.update();
      }
    }
  }
}

TEST_CASE("GradScaler: the fused pass finds a bad value in any block and leaves the flag set",
          "[cpu][optim][grad_scaler]") {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(dt));
    std::vector<Tensor> ts = {zeros({40000}, {.dtype = dt}), ones({3}, {.dtype = dt})};
    Tensor flag = zeros({1});
    kernels::non_finite_check_and_unscale_(ts, flag, 0.5);
    CHECK(flag.item<float>() == 0);
    CHECK(ts[1].to_vector<double>() == std::vector<double>{0.5, 0.5, 0.5});
    ts[0].narrow(0, 39999, 1).fill_(kNaN);  // last element of the last block
    kernels::non_finite_check_and_unscale_(ts, flag, 0.5);
    CHECK(flag.item<float>() == 1);
    // A clean call afterwards leaves the flag as it was.
    std::vector<Tensor> clean = {ones({2}, {.dtype = dt})};
    kernels::non_finite_check_and_unscale_(clean, flag, 1.0);
    CHECK(flag.item<float>() == 1);
  }
  Tensor flag = zeros({1});
  CHECK_THAT(error_of([&] { kernels::non_finite_check_and_unscale_({ones({2}, {.dtype = DType::i64})}, flag, 1); }),
             Catch::Contains("tensor 0") && Catch::Contains("i64"));
  CHECK_THAT(error_of([&] { kernels::non_finite_check_and_unscale_({ones({2})}, zeros({2}), 1); }),
             Catch::Contains("found_inf"));
}

TEST_CASE("GradScaler: scale() is differentiable", "[cpu][optim][grad_scaler]") {
  Tensor x = from_vector(std::vector<double>{1, -2, 3}, {3}).requires_grad_();
  amp::GradScaler scaler({.init_scale = 256});
  Tensor loss = sum(x * x);
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.item<double>() == 14 * 256);
  scaled.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{512, -1024, 1536});
}

TEST_CASE("GradScaler: a disabled scaler is a pass-through", "[cpu][optim][grad_scaler]") {
  TinyModel m(Device::cpu(), 2), ref(Device::cpu(), 2);
  optim::SGD opt(m.params(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(ref.params(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  CHECK(scaler.scale() == 1);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = m.loss();
    Tensor scaled = scaler.scale(loss);
    CHECK(scaled.is_same(loss));
    scaled.backward();
    scaler.unscale_(opt);
    scaler.unscale_(opt);  // no error: nothing is tracked
    CHECK(scaler.step(opt));
    scaler.update();
    ref_opt.zero_grad();
    ref.loss().backward();
    ref_opt.step();
    CHECK(m.w.to_vector<double>() == ref.w.to_vector<double>());
    CHECK(m.b.to_vector<double>() == ref.b.to_vector<double>());
  }
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("GradScaler: the found-inf sync hook decides", "[cpu][optim][grad_scaler]") {
  TinyModel m(Device::cpu(), 3);
  optim::SGD opt(m.params(), {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 64});
  std::vector<bool> seen;
  scaler.set_found_inf_sync([&](bool found) {
    seen.push_back(found);
    return true;  // another rank found one
  });
  scaler.scale(m.loss()).backward();
  const auto before = snapshot(opt);
  CHECK_FALSE(scaler.step(opt));
  CHECK(snapshot(opt) == before);
  CHECK(seen == std::vector<bool>{false});
  scaler.update();
  CHECK(scaler.scale() == 32);
  scaler.set_found_inf_sync({});
  opt.zero_grad();
  scaler.scale(m.loss()).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(seen.size() == 1);
}

TEST_CASE("GradScaler: state round-trips through a checkpoint file", "[cpu][optim][grad_scaler]") {
  TinyModel m(Device::cpu(), 4);
  optim::SGD opt(m.params(), {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 4096, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 5});
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    scaler.scale(m.loss()).backward();
    if (step == 1) poison_grad(m.w, kInf);
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(scaler.scale() == 1024);
  REQUIRE(scaler.growth_tracker() == 2);
  REQUIRE(scaler.skipped_steps() == 1);

  TempDir dir;
  const std::string path = (dir.path() / "scaler.ckpt").string();
  serialize::save_tensors(scaler.state_dict(), path);
  amp::GradScaler loaded;
  loaded.load_state_dict(serialize::load_tensors(path));
  CHECK(loaded.scale() == 1024);
  CHECK(loaded.growth_tracker() == 2);
  CHECK(loaded.skipped_steps() == 1);
  CHECK(loaded.options().growth_factor == 4);
  CHECK(loaded.options().backoff_factor == 0.25);
  CHECK(loaded.options().growth_interval == 5);
  CHECK(loaded.is_enabled());
  // Both continue alike: three clean steps reach the growth interval.
  for (amp::GradScaler* s : {&scaler, &loaded}) {
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      s->scale(m.loss()).backward();
      s->step(opt);
      s->update();
    }
  }
  CHECK(scaler.scale() == 4096);
  CHECK(loaded.scale() == 4096);
  CHECK(loaded.state_dict().size() == 7);

  StateDict bad = scaler.state_dict();
  bad["extra"] = zeros({});
  CHECK_THAT(error_of([&] { loaded.load_state_dict(bad); }), Catch::Contains("unexpected entry 'extra'"));
  bad = scaler.state_dict();
  bad.erase("growth_tracker");
  CHECK_THAT(error_of([&] { loaded.load_state_dict(bad); }), Catch::Contains("'growth_tracker' is missing"));
  bad = scaler.state_dict();
  bad["growth_interval"] = zeros({});
  CHECK_THAT(error_of([&] { loaded.load_state_dict(bad); }), Catch::Contains("'growth_interval'"));
  bad = scaler.state_dict();
  bad["scale"] = zeros({2});
  CHECK_THAT(error_of([&] { loaded.load_state_dict(bad); }), Catch::Contains("'scale' must hold one value"));
  CHECK(loaded.scale() == 4096);  // unchanged by the failed loads
}

TEST_CASE("GradScaler: misuse and bad options are errors naming the problem", "[cpu][optim][grad_scaler]") {
  TinyModel m(Device::cpu(), 6);
  optim::SGD opt(m.params(), {.lr = 0.01});
  amp::GradScaler scaler;
  CHECK(scaler.scale() == 65536);
  CHECK_THAT(error_of([&] { scaler.update(); }), Catch::Contains("no step()"));
  scaler.scale(m.loss()).backward();
  scaler.unscale_(opt);
  CHECK_THAT(error_of([&] { scaler.unscale_(opt); }), Catch::Contains("unscale_: already called"));
  CHECK(scaler.step(opt));
  CHECK_THAT(error_of([&] { scaler.step(opt); }), Catch::Contains("step: already called"));
  CHECK_THAT(error_of([&] { scaler.unscale_(opt); }), Catch::Contains("step() already ran"));
  scaler.update();
  opt.zero_grad();
  scaler.scale(m.loss()).backward();
  scaler.unscale_(opt);  // allowed again after update()
  CHECK(scaler.step(opt));
  scaler.update();

  CHECK_THAT(error_of([] { amp::GradScaler s({.init_scale = 0}); }),
             Catch::Contains("init_scale") && Catch::Contains("got 0"));
  CHECK_THAT(error_of([] { amp::GradScaler s({.growth_factor = 1}); }), Catch::Contains("growth_factor"));
  CHECK_THAT(error_of([] { amp::GradScaler s({.backoff_factor = 1.5}); }),
             Catch::Contains("backoff_factor") && Catch::Contains("1.5"));
  CHECK_THAT(error_of([] { amp::GradScaler s({.growth_interval = 0}); }), Catch::Contains("growth_interval"));
}
