// The CIFAR residual models on cuda:0 against the same models on the CPU: ResNet-18 and
// WRN-10-2 (with dropout, whose GPU masks equal the CPU's for the same seed and offset) built
// from one state dict, one training-mode forward and backward on one batch; logits, loss,
// BatchNorm running statistics and every parameter's gradient must agree.
//
// Bounds (f32 on both devices, no TF32: conv.cu and matmul.cu keep f32 in FMA math): each layer
// on the longest path adds at most loose_tol_sum(f32, K) of the magnitudes it combines, K the longest
// reduction in the network (a conv's cin * kh * kw, the fc's inputs, or BatchNorm's and the
// weight gradients' N * H * W); BatchNorm rescales values and their errors alike, so relative
// errors add along the path. With L the number of weighted layers (an upper bound on the path
// length) and two devices erring independently, the forward agrees within
// 2 * L * loose_tol_sum(f32, K) of the largest magnitude, and the backward, whose path runs through
// the forward activations and back (2 L layers), within 2 * 2L * loose_tol_sum(f32, K) per tensor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include <ember/layers/module.h>
#include <ember/models/resnet.h>
#include <ember/models/wide_resnet.h>
#include "cuda/expect.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

/// Every element of `got` within rel * max|ref| of `ref` (ref on the CPU, got anywhere).
void check_within(const Tensor& got, const Tensor& ref, double rel) {
  Expect e;
  e.val = to_f64(ref);
  double scale = 0.0;
  for (double v : e.val) scale = std::max(scale, std::fabs(v));
  e.bound.assign(e.val.size(), rel * scale);
  INFO("relative bound " << rel << " of max |ref| = " << scale);
  check_expect(got, e);
}

/// Weighted layers (convs, BatchNorms, linears: one "weight" each) and the longest reduction.
struct Depth {
  int64_t layers = 0, k = 0;
};
Depth depth_of(const layers::Module& m, const Shape& x) {
  Depth d;
  d.k = x[0] * x[2] * x[3];  // BatchNorm statistics and weight gradients of the first stage
  for (const auto& [name, p] : m.named_parameters()) {
    if (name.size() < 7 || name.substr(name.size() - 7) != ".weight") continue;
    ++d.layers;
    int64_t fan_in = 1;
    for (int64_t i = 1; i < p.dim(); ++i) fan_in *= p.sizes()[static_cast<size_t>(i)];
    d.k = std::max(d.k, fan_in);
  }
  return d;
}

void compare_devices(const std::function<std::shared_ptr<layers::Module>(Generator&)>& make, const Shape& x_shape,
                     int64_t classes) {
  // Both models from the same seed (so the generators stand at the same offset for dropout), and
  // the GPU one loaded from the CPU one's state dict besides.
  Generator gen_cpu(2024), gen_gpu(2024);
  auto cpu = make(gen_cpu);
  auto gpu = make(gen_gpu);
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(kGpu);
  cpu->train();
  gpu->train();

  const Depth d = depth_of(*cpu, x_shape);
  const double fwd = 2.0 * static_cast<double>(d.layers) * loose_tol_sum(DType::f32, d.k);
  const double bwd = 2.0 * fwd;
  INFO(d.layers << " weighted layers, longest reduction " << d.k << ": forward bound " << fwd << ", backward " << bwd);

  const Tensor x = random_tensor(x_shape, DType::f32, 77, -1, 1);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < x_shape[0]; ++i) labels.push_back((i * 7 + 3) % classes);
  const Tensor t = from_vector(labels, {x_shape[0]});

  const Tensor y_cpu = cpu->forward(x);
  const Tensor y_gpu = gpu->forward(x.to(kGpu));
  REQUIRE(y_gpu.device() == kGpu);
  REQUIRE(y_gpu.sizes() == y_cpu.sizes());
  {
    INFO("logits");
    check_within(y_gpu, y_cpu, fwd);
  }
  Tensor loss_cpu = layers::cross_entropy(y_cpu, t);
  Tensor loss_gpu = layers::cross_entropy(y_gpu, t.to(kGpu));
  {
    INFO("loss");
    check_within(loss_gpu, loss_cpu, fwd);
  }
  loss_cpu.backward();
  loss_gpu.backward();

  // Running statistics were updated by the forward (the counter exactly, the rest in f32).
  const StateDict sc = cpu->state_dict(), sg = gpu->state_dict();
  for (const auto& [name, b] : cpu->named_buffers()) {
    INFO("buffer " << name);
    const Tensor& g = sg.at(name);
    CHECK(g.device() == kGpu);
    if (name.find("num_batches_tracked") != std::string::npos) CHECK(to_f64(g) == to_f64(b));
    else check_within(g, b, fwd);
  }
  const auto pg = gpu->named_parameters();
  const auto pc = cpu->named_parameters();
  REQUIRE(pg.size() == pc.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO("gradient of " << pc[i].first << " " << pc[i].second.shape_str());
    REQUIRE(pg[i].first == pc[i].first);
    REQUIRE(pg[i].second.grad().defined());
    CHECK(pg[i].second.grad().device() == kGpu);
    check_within(pg[i].second.grad(), pc[i].second.grad(), bwd);
  }
}

}  // namespace

TEST_CASE("resnet18 on cuda:0 matches the CPU: forward, loss, running stats, gradients", "[cuda][models]") {
  compare_devices([](Generator& g) { return models::resnet18(10, g); }, {4, 3, 32, 32}, 10);
}

TEST_CASE("wide_resnet(10, 2) with dropout on cuda:0 matches the CPU: forward, loss, running stats, gradients",
          "[cuda][models]") {
  compare_devices([](Generator& g) { return models::wide_resnet(10, 2, 100, 0.3, g); }, {4, 3, 32, 32}, 100);
}

TEST_CASE("cuda nll_loss: equals the CPU loss and rejects a bad target in a middle row", "[cuda][layers]") {
  const Tensor logp = log_softmax(random_tensor({5, 4}, DType::f32, 31), 1);
  const Tensor good = from_vector({0, 3, 1, 2, 3}, {5}, {.dtype = DType::i64});
  const double cpu = layers::nll_loss(logp, good).item<float>();
  const double gpu = layers::nll_loss(logp.to(kGpu), good.to(kGpu)).item<float>();
  CHECK(gpu == Approx(cpu).epsilon(4 * loose_tol(DType::f32)));
  // Row 2's target 4 == C would read row 3's first entry of the flattened tensor if unchecked.
  const Tensor bad = from_vector({0, 3, 4, 2, 3}, {5}, {.dtype = DType::i64}).to(kGpu);
  CHECK_THROWS_WITH(layers::nll_loss(logp.to(kGpu), bad), Catch::Contains("target 4 at row 2"));
}
