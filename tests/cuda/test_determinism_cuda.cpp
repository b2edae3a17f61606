// ember::set_deterministic on CUDA (docs/determinism.md): under the switch, convolutions (cuDNN
// engines not noted NONDETERMINISTIC, legacy algorithms reported CUDNN_DETERMINISTIC), index_add
// and max_pool2d's backward (the sorted scatter-add of kernels/cuda/det_scatter.cuh) give bitwise
// the same results when run twice on the same inputs; index_add adds in the CPU's order with its
// rounding, so it equals the CPU bitwise; the plan cache keeps plans per setting; a convolution
// with no deterministic candidate is an error naming it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/core/determinism.h>
#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/kernels/cuda/conv_testing.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/index.h>
#include <ember/layers/loss.h>
#include <ember/models/mnist_cnn.h>
#include <ember/optim/sgd.h>
#include "support/bitwise.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_same;
using ember::testing::Layout;
using ember::testing::Outputs;
using ember::testing::random_tensor;
using ember::testing::seeded_indices;

namespace {

const Device kGpu = Device::cuda(0);

Tensor gpu_index_of(int64_t n, int64_t d, uint64_t seed) { return seeded_indices(n, d, seed).to(kGpu); }

Tensor gpu_random(const Shape& s, DType dt, uint64_t seed) {
  return random_tensor(s, dt, seed, -1.0, 1.0, Layout::Contiguous, kGpu);
}

/// Forward, grad_x, grad_w and grad_b of one convolution: sum(conv(x, w, b) * r).backward().
Outputs conv_run(const Shape& xs, const Shape& ws, const Conv2dFuncOptions& opt, DType dt, MemoryFormat f,
                 uint64_t seed) {
  Tensor x = gpu_random(xs, dt, seed).contiguous(f), w = gpu_random(ws, dt, seed + 1).contiguous(f);
  Tensor b = gpu_random({ws[0]}, dt, seed + 2);
  x.requires_grad_(true);
  w.requires_grad_(true);
  b.requires_grad_(true);
  const Tensor y = conv2d(x, w, b, opt);
  sum(mul(y, gpu_random(y.sizes(), dt, seed + 3).contiguous(f))).backward();
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("determinism (cuda): conv2d forward and both backwards are bitwise reproducible under the switch",
          "[cuda][determinism]") {
  // Shapes whose filter gradient sums over many (n, h, w): the problems where cuDNN offers split
  // reductions with atomics. Each run makes fresh tensors of the same values (other addresses).
  DeterministicGuard on(true);
  struct Case {
    Shape x, w;
    Conv2dFuncOptions opt;
  };
  const Case cases[] = {{{32, 64, 28, 28}, {64, 64, 3, 3}, {.padding = 1}},
                        {{16, 32, 56, 56}, {64, 32, 3, 3}, {.stride = 2, .padding = 1}},
                        {{64, 128, 7, 7}, {128, 128, 1, 1}, {}}};
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        seed += 10;
        const std::string what =
            "conv2d x " + shape_str(c.x) + " w " + shape_str(c.w) + " " + dtype_name(dt) + " " + memory_format_name(f);
        check_same(conv_run(c.x, c.w, c.opt, dt, f, seed), conv_run(c.x, c.w, c.opt, dt, f, seed), what);
      }
}

TEST_CASE("determinism (cuda): conv plans are kept per setting of the switch", "[cuda][determinism]") {
  // A shape no other test uses: planned without the switch, then with it; the second setting must
  // search again (a plan chosen among nondeterministic engines is never reused), then reuse its own.
  const Shape xs{5, 7, 13, 11}, ws{9, 7, 3, 3};
  const Conv2dFuncOptions opt{.padding = 1};
  (void)conv_run(xs, ws, opt, DType::f32, MemoryFormat::contiguous, 1);
  const auto before = kernels::cuda::conv_plan_counts();
  {
    DeterministicGuard on(true);
    (void)conv_run(xs, ws, opt, DType::f32, MemoryFormat::contiguous, 1);
    const auto after = kernels::cuda::conv_plan_counts();
    CHECK(after.searches == before.searches + 3);  // forward, backward-data, backward-filter
    (void)conv_run(xs, ws, opt, DType::f32, MemoryFormat::contiguous, 1);
    CHECK(kernels::cuda::conv_plan_counts().searches == after.searches);
  }
}

TEST_CASE("determinism (cuda): the legacy fallback takes deterministic algorithms", "[cuda][determinism]") {
  struct Disabled {
    Disabled() { kernels::cuda::detail::set_conv_graph_search_disabled_for_testing(true); }
    ~Disabled() { kernels::cuda::detail::set_conv_graph_search_disabled_for_testing(false); }
  } disabled;
  DeterministicGuard on(true);
  const Shape xs{24, 48, 19, 17}, ws{40, 48, 3, 3};
  const auto before = kernels::cuda::conv_plan_counts();
  const Outputs a = conv_run(xs, ws, {.padding = 1}, DType::f32, MemoryFormat::contiguous, 7);
  CHECK(kernels::cuda::conv_plan_counts().legacy == before.legacy + 3);
  check_same(a, conv_run(xs, ws, {.padding = 1}, DType::f32, MemoryFormat::contiguous, 7), "legacy conv2d");
}

TEST_CASE("determinism (cuda): a convolution with no deterministic candidate is an error naming it",
          "[cuda][determinism]") {
  struct NondeterministicOnly {
    NondeterministicOnly() { kernels::cuda::detail::set_conv_nondeterministic_only_for_testing(true); }
    ~NondeterministicOnly() { kernels::cuda::detail::set_conv_nondeterministic_only_for_testing(false); }
  } hook;
  const Tensor x = gpu_random({3, 5, 11, 10}, DType::f32, 300), w = gpu_random({4, 5, 3, 3}, DType::f32, 301);
  {
    DeterministicGuard on(true);
    CHECK_THROWS_WITH(conv2d(x, w).to(Device::cpu()),
                      Catch::Contains("conv2d forward (cuda) has no deterministic implementation") &&
                          Catch::Contains("set_deterministic(false)"));
  }
  // The switch off: the hook changes nothing, and the problem runs.
  CHECK_NOTHROW(conv2d(x, w).to(Device::cpu()));
}

TEST_CASE("determinism (cuda): index_add under the switch is reproducible and equals the CPU bitwise",
          "[cuda][determinism]") {
  // 200000 additions into 8 rows of 64: thousands of duplicates per element. The sorted
  // scatter-add adds in ascending k with one rounding per addition, as the CPU does.
  DeterministicGuard on(true);
  const Tensor index = gpu_index_of(200000, 8, 5);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor src = gpu_random({2, 200000, 64}, dt, 400);
    const Tensor out0 = gpu_random({2, 8, 64}, dt, 401);
    auto run = [&] {
      const Tensor out = out0.clone();
      kernels::index_add(out, 1, index, src);
      return out;
    };
    const Tensor a = run();
    check_same({a}, {run()}, "index_add twice");
    const Tensor cpu = out0.to(Device::cpu()).clone();
    kernels::index_add(cpu, 1, index.to(Device::cpu()), src.to(Device::cpu()));
    check_same({a}, {cpu}, "index_add cuda against cpu");
  }
  // Integers keep the atomics (exact in any order): still equal to the CPU.
  const Tensor isrc = mul(gpu_random({1, 200000, 4}, DType::f32, 402), 100.0).to(DType::i64);
  const Tensor iout = zeros({1, 8, 4}, {.dtype = DType::i64, .device = kGpu});
  kernels::index_add(iout, 1, index, isrc);
  const Tensor icpu = zeros({1, 8, 4}, {.dtype = DType::i64});
  kernels::index_add(icpu, 1, index.to(Device::cpu()), isrc.to(Device::cpu()));
  check_same({iout}, {icpu}, "i64 index_add");
}

TEST_CASE("determinism (cuda): embedding and max-pool backwards are reproducible and equal the CPU's bits",
          "[cuda][determinism]") {
  // Under the switch both scatter their gradients in the CPU twin's order (index_add in source
  // order, max-pool in grad_out's memory order) and round as it does: bitwise equal to the CPU,
  // which a reproducible but wrongly ordered (or wrongly indexed) sum would not be.
  DeterministicGuard on(true);
  const Tensor index = gpu_index_of(50000, 100, 9);
  auto embedding = [&](Device d) {
    Tensor table = gpu_random({100, 32}, DType::f32, 500).to(d);
    table.requires_grad_(true);
    const Tensor y = index_select(table, 0, index.to(d));
    sum(mul(y, gpu_random(y.sizes(), DType::f32, 501).to(d))).backward();
    return Outputs{table.grad()};
  };
  const Outputs e = embedding(kGpu);
  check_same(e, embedding(kGpu), "index_select backward");
  check_same(e, embedding(Device::cpu()), "index_select backward, cuda against cpu");
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    auto pool = [&](Device d) {
      // 3x3 windows, stride 2: up to four windows pick one position (three or more additions).
      Tensor x = gpu_random({16, 32, 33, 33}, DType::f32, 502).to(d).contiguous(f);
      x.requires_grad_(true);
      const Tensor y = max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1});
      sum(mul(y, gpu_random(y.sizes(), DType::f32, 503).to(d).contiguous(f))).backward();
      return Outputs{y.detach(), x.grad()};
    };
    const Outputs g = pool(kGpu);
    check_same(g, pool(kGpu), std::string("max_pool2d backward ") + memory_format_name(f));
    check_same(g, pool(Device::cpu()), std::string("max_pool2d backward, cuda against cpu, ") + memory_format_name(f));
  }
}

TEST_CASE("determinism (cuda): mnist_cnn training steps are bitwise reproducible under the switch",
          "[cuda][determinism]") {
  DeterministicGuard on(true);
  const Tensor x = gpu_random({64, 1, 28, 28}, DType::f32, 600);
  const Tensor target = gpu_index_of(64, 10, 601);
  auto run = [&] {
    Generator init(7);
    auto model = models::mnist_cnn(init);
    model->to(kGpu);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    manual_seed(99);
    Outputs o;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      const Tensor loss = layers::cross_entropy(model->forward(x), target);
      loss.backward();
      opt.step();
      o.push_back(loss.detach());
    }
    for (const Tensor& p : model->parameters()) o.push_back(p.detach().clone());
    return o;
  };
  check_same(run(), run(), "mnist_cnn steps");
}
