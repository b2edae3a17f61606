// amp::Autocast (autograd/autocast.h): which dtype each op class computes in inside the guard, that
// nothing changes outside it, nesting and thread-locality, the per-guard cast cache, and that
// gradients computed under autocast reach the f32 parameters in f32, close to an f32 run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include <ember/autograd/autocast.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/autograd/ops_norm.h>
#include <ember/kernels/factory.h>
#include <ember/layers/conv.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>
#include <ember/models/mnist_cnn.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using amp::Autocast;
using testing::to_f64;

namespace {

constexpr DeviceType kCpu = DeviceType::CPU;

// Unit roundoff of the low dtypes: bf16 keeps 8 significant bits, f16 11.
double unit_roundoff(DType dt) { return dt == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

std::vector<float> values(const Tensor& t) { return t.detach().to(DType::f32).contiguous().to_vector<float>(); }

// max |a - b| over two tensors of one shape, and max |b|.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(static_cast<double>(va[i]) - vb[i]));
  return m;
}
double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : values(t)) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

Tensor class_targets(int64_t n, int64_t classes) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * 7 + 3) % classes);
  return from_vector(t, {n});
}

}  // namespace

TEST_CASE("autocast: Linear and matmul inside the guard give the low dtype", "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  Generator gen(1);
  layers::Linear lin(6, 4, true, gen);
  Tensor x = randn({3, 6}, {}, gen);
  Tensor y = lin.forward(x);
  CHECK(y.dtype() == DType::f32);
  {
    Autocast guard(kCpu, low);
    CHECK(amp::autocast_enabled(kCpu));
    CHECK(amp::autocast_dtype(kCpu) == low);
    Tensor ya = lin.forward(x);
    CHECK(ya.dtype() == low);
    CHECK(ya.sizes() == y.sizes());
    CHECK(max_abs_diff(ya, y) <= 8 * unit_roundoff(low) * std::max(1.0, max_abs(y)));  // measured: 0.9
    CHECK(matmul(x, randn({6, 2}, {}, gen)).dtype() == low);
    CHECK(matmul(x, randn({6}, {}, gen)).dtype() == low);  // 1-D operand path
    for (const Tensor& p : lin.parameters()) CHECK(p.dtype() == DType::f32);  // master weights stay f32
  }
  CHECK_FALSE(amp::autocast_enabled(kCpu));
  CHECK(lin.forward(x).dtype() == DType::f32);
}

TEST_CASE("autocast: conv2d inside the guard gives the low dtype", "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  Generator gen(2);
  layers::Conv2d conv(2, 3, 3, {.padding = 1}, gen);
  Tensor x = randn({2, 2, 5, 5}, {}, gen);
  Tensor y = conv.forward(x);
  CHECK(y.dtype() == DType::f32);
  Autocast guard(kCpu, low);
  Tensor ya = conv.forward(x);
  CHECK(ya.dtype() == low);
  CHECK(max_abs_diff(ya, y) <= 8 * unit_roundoff(low) * std::max(1.0, max_abs(y)));  // measured: 0.9
  // The functional form, without a bias.
  CHECK(conv2d(x, randn({3, 2, 3, 3}, {}, gen)).dtype() == low);
}

TEST_CASE("autocast: softmax, losses, sums and means run in f32", "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  Generator gen(3);
  Tensor x = randn({4, 5}, {}, gen).to(low);
  Autocast guard(kCpu, low);
  CHECK(softmax(x, 1).dtype() == DType::f32);
  CHECK(log_softmax(x, -1).dtype() == DType::f32);
  CHECK(cross_entropy(x, class_targets(4, 5)).dtype() == DType::f32);
  CHECK(layers::cross_entropy(x, class_targets(4, 5)).dtype() == DType::f32);
  CHECK(sum(x).dtype() == DType::f32);
  CHECK(sum(x, {1}).dtype() == DType::f32);
  CHECK(mean(x).dtype() == DType::f32);
  CHECK(mean(x, {0}, true).dtype() == DType::f32);
  // The softmax of a Linear's low-precision output is f32 too.
  layers::Linear lin(5, 3, true, gen);
  CHECK(softmax(lin.forward(randn({2, 5}, {}, gen)), 1).dtype() == DType::f32);
}

TEST_CASE("autocast: batch_norm keeps a low-precision input's dtype, f32 statistics and f32 parameter gradients",
          "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  Generator gen(5);
  const Tensor img = randn({2, 3, 4, 4}, {}, gen).to(low);
  const Tensor w0 = randn({3}, {}, gen), b0 = randn({3}, {}, gen);
  auto run = [&](bool autocast, Tensor& w, Tensor& b, Tensor& rm) {
    w = w0.clone();
    b = b0.clone();
    w.requires_grad_();
    b.requires_grad_();
    rm = zeros({3});
    Tensor rv = ones({3});
    Tensor y;
    {
      Autocast guard(kCpu, low, autocast);
      y = batch_norm(img, w, b, rm, rv, true);
    }
    sum(y.to(DType::f32) * y.to(DType::f32)).backward();
    return y;
  };
  Tensor w, b, rm, w2, b2, rm2;
  const Tensor y = run(true, w, b, rm);
  CHECK(y.dtype() == low);
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  CHECK(rm.dtype() == DType::f32);
  // The same kernels as without autocast, on the same input: the same results.
  const Tensor y2 = run(false, w2, b2, rm2);
  CHECK(to_f64(y) == to_f64(y2));
  CHECK(to_f64(w.grad()) == to_f64(w2.grad()));
  CHECK(to_f64(rm) == to_f64(rm2));
  // An f32 input stays f32.
  Autocast guard(kCpu, low);
  CHECK(batch_norm(img.to(DType::f32), w0, b0, zeros({3}), ones({3}), true).dtype() == DType::f32);
}

TEST_CASE("autocast: binary ops promote to the widest input", "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  Tensor a = ones({3}).to(low), b = ones({3});
  Autocast guard(kCpu, low);
  CHECK((a + b).dtype() == DType::f32);
  CHECK((a * b).dtype() == DType::f32);
  CHECK((a - a).dtype() == low);
  CHECK((a / 2.0).dtype() == low);
  CHECK(relu(a).dtype() == low);  // other ops keep their input's dtype
  CHECK((a + ones({3}, {.dtype = DType::f64})).dtype() == DType::f64);
}

TEST_CASE("autocast: nothing changes outside the guard or on f64", "[cpu][autograd][autocast]") {
  Generator gen(4);
  Tensor x = randn({3, 4}, {}, gen), w = randn({4, 2}, {}, gen);
  Tensor xb = x.to(DType::bf16);
  {
    Autocast guard(kCpu, DType::bf16);
    // f64 is never cast, to a low dtype or to f32.
    Tensor x64 = x.to(DType::f64);
    CHECK(matmul(x64, w.to(DType::f64)).dtype() == DType::f64);
    CHECK(softmax(x64, 1).dtype() == DType::f64);
    // Integer tensors are left alone.
    CHECK(sum(ones({3}, {.dtype = DType::i64})).dtype() == DType::i64);
  }
  CHECK(amp::autocast_cache_size() == 0);
  CHECK(matmul(x, w).dtype() == DType::f32);
  CHECK(softmax(xb, 1).dtype() == DType::bf16);  // no f32 cast outside the guard
  CHECK(sum(xb).dtype() == DType::bf16);
  CHECK(matmul(xb, w.to(DType::bf16)).dtype() == DType::bf16);
  // A guard for another device type does not touch CPU tensors.
  Autocast cuda_guard(DeviceType::CUDA, DType::f16);
  CHECK(amp::autocast_enabled(DeviceType::CUDA));
  CHECK_FALSE(amp::autocast_enabled(kCpu));
  CHECK(matmul(x, w).dtype() == DType::f32);
}

TEST_CASE("autocast: nested guards restore the previous state", "[cpu][autograd][autocast]") {
  Tensor x = ones({2, 2}), w = ones({2, 2});
  CHECK_FALSE(amp::autocast_enabled(kCpu));
  {
    Autocast outer(kCpu, DType::bf16);
    {
      Autocast inner(kCpu, DType::f16);
      CHECK(amp::autocast_dtype(kCpu) == DType::f16);
      CHECK(matmul(x, w).dtype() == DType::f16);
      {
        Autocast off(kCpu, DType::bf16, false);
        CHECK_FALSE(amp::autocast_enabled(kCpu));
        CHECK(matmul(x, w).dtype() == DType::f32);
      }
      CHECK(amp::autocast_enabled(kCpu));
    }
    CHECK(amp::autocast_dtype(kCpu) == DType::bf16);
    CHECK(matmul(x, w).dtype() == DType::bf16);
  }
  CHECK_FALSE(amp::autocast_enabled(kCpu));
  CHECK(matmul(x, w).dtype() == DType::f32);
}

TEST_CASE("autocast: a guard with a dtype other than f16 or bf16 is an error naming it", "[cpu][autograd][autocast]") {
  using Catch::Contains;
  CHECK_THAT(testing::error_of([] { Autocast g(kCpu, DType::f32); }), Contains("f32") && Contains("bf16"));
  CHECK_THAT(testing::error_of([] { Autocast g(kCpu, DType::f64); }), Contains("f64"));
  CHECK_THAT(testing::error_of([] { Autocast g(kCpu, DType::i64); }), Contains("i64"));
  CHECK_FALSE(amp::autocast_enabled(kCpu));  // a failed guard changes nothing
}

TEST_CASE("autocast: a weight used twice in one guard is cast once", "[cpu][autograd][autocast]") {
  Generator gen(5);
  layers::Linear lin(4, 4, true, gen);
  Tensor x = randn({2, 4}, {}, gen);
  {
    Autocast guard(kCpu, DType::bf16);
    Tensor y = lin.forward(lin.forward(x));  // the same weight and bias, twice
    CHECK(y.dtype() == DType::bf16);
    CHECK(amp::autocast_cache_size() == 2);  // weight and bias, once each
    const Tensor w = lin.parameters()[0];
    Tensor c1 = amp::cast_for(amp::OpClass::LowPrecision, w);
    Tensor c2 = amp::cast_for(amp::OpClass::LowPrecision, w);
    CHECK(c1.is_same(c2));
    CHECK(c1.requires_grad());
    // Activations (not leaves that require grad) are cast afresh and not cached.
    amp::cast_for(amp::OpClass::LowPrecision, x);
    CHECK(amp::autocast_cache_size() == 2);
    {
      Autocast nested(kCpu, DType::bf16);
      CHECK(amp::cast_for(amp::OpClass::LowPrecision, w).is_same(c1));  // shared with nested guards
    }
    CHECK(amp::autocast_cache_size() == 2);  // only the outermost guard clears the cache
    {
      // A cast made without grad recording is cached apart: it must not serve a forward that needs a graph.
      NoGradGuard no_grad;
      Tensor cn = amp::cast_for(amp::OpClass::LowPrecision, w);
      CHECK_FALSE(cn.requires_grad());
      CHECK(amp::cast_for(amp::OpClass::LowPrecision, w).is_same(cn));
    }
    CHECK(amp::cast_for(amp::OpClass::LowPrecision, w).is_same(c1));
    CHECK(amp::autocast_cache_size() == 3);
  }
  CHECK(amp::autocast_cache_size() == 0);
}

TEST_CASE("autocast: gradients reach the f32 parameters in f32, close to the f32 run", "[cpu][autograd][autocast]") {
  const DType low = GENERATE(DType::bf16, DType::f16);
  const bool backward_inside = GENERATE(false, true);
  Generator gen(6);
  layers::Linear l1(12, 16, true, gen), l2(16, 5, true, gen);
  Tensor x = randn({8, 12}, {}, gen);
  Tensor target = class_targets(8, 5);
  auto loss_of = [&] { return cross_entropy(relu(l2.forward(relu(l1.forward(x)))), target); };
  std::vector<Tensor> params = l1.parameters();
  for (const Tensor& p : l2.parameters()) params.push_back(p);

  Tensor ref_loss = loss_of();
  ref_loss.backward();
  std::vector<Tensor> ref_grads;
  for (Tensor& p : params) {
    ref_grads.push_back(p.grad().clone());
    p.grad().zero_();
  }

  Tensor loss;
  {
    Autocast guard(kCpu, low);
    loss = loss_of();
    CHECK(loss.dtype() == DType::f32);
    if (backward_inside) loss.backward();
  }
  if (!backward_inside) loss.backward();
  // Every tensor is rounded to the low dtype a few times along the way (inputs, outputs, the
  // gradient entering each matmul): allow 8 unit roundoffs relative to the largest value (measured:
  // at most 1.3 for both dtypes).
  const double factor = 8 * unit_roundoff(low);
  CHECK(std::abs(loss.item<float>() - ref_loss.item<float>()) <=
        factor * std::max(1.0, std::abs(ref_loss.item<double>())));
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i << " " << params[i].shape_str());
    CHECK(params[i].dtype() == DType::f32);
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().dtype() == DType::f32);
    CHECK(max_abs_diff(params[i].grad(), ref_grads[i]) <= factor * std::max(1e-3, max_abs(ref_grads[i])));
  }
}

TEST_CASE("autocast: mnist_cnn under bf16 gives a loss within bf16 tolerance of f32", "[cpu][autograd][autocast]") {
  Generator gen(7);
  auto model = models::mnist_cnn(gen);
  model->eval();  // dropout off: both runs see the same network
  Tensor x = randn({2, 1, 28, 28}, {}, gen);
  Tensor target = class_targets(2, 10);
  const float ref = layers::cross_entropy(model->forward(x), target).item<float>();
  Tensor loss;
  {
    Autocast guard(kCpu, DType::bf16);
    Tensor logits = model->forward(x);
    CHECK(logits.dtype() == DType::bf16);
    CHECK(amp::autocast_cache_size() == 8);  // 2 conv + 2 linear layers, weight and bias each
    loss = layers::cross_entropy(logits, target);
  }
  CHECK(loss.dtype() == DType::f32);
  // 8 unit roundoffs of bf16 (2^-8) relative to the loss: four layers each round their inputs
  // and their output once (measured: 0.01).
  CHECK(std::abs(loss.item<float>() - ref) <= 8 * unit_roundoff(DType::bf16) * std::max(1.0f, std::abs(ref)));
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == DType::f32);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
    const std::vector<float> g = values(p.grad());
    CHECK(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); }));
  }
}

TEST_CASE("autocast: the guard is thread-local", "[cpu][autograd][autocast]") {
  Tensor x = ones({2, 3}), w = ones({3, 2});
  Autocast guard(kCpu, DType::bf16);
  CHECK(matmul(x, w).dtype() == DType::bf16);
  bool other_enabled = true;
  DType other_dtype = DType::bf16;
  std::thread t([&] {
    other_enabled = amp::autocast_enabled(kCpu);
    other_dtype = matmul(x, w).dtype();
  });
  t.join();
  CHECK_FALSE(other_enabled);
  CHECK(other_dtype == DType::f32);
}
