// parallel::DataParallel on {cuda:0, cuda:0} (two replicas on one GPU, each on its own stream and
// thread) against the same model as one module on cuda:0: outputs, loss, every gradient, an SGD
// step, and BatchNorm's running statistics from replica 0's chunk; plus an input on the CPU and an
// output gathered on the CPU.
//
// Tolerance: f32 on both sides, but cuDNN may pick a different convolution algorithm for a chunk
// than for the whole batch, and weight gradients are summed in a different order over the two
// replicas; each differs from exact by a few loose_tol_sum(f32, K) of the largest magnitude, K at most
// the longest reduction here (N * H * W = 8 * 64 for the conv weight gradient), so kRel =
// 1e-4 bounds it with room to spare.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/device.h>
#include <ember/optim/sgd.h>
#include <ember/parallel/data_parallel.h>
#include "parallel/data_parallel_check.h"

using namespace ember;
using namespace ember::testing;
using ember::parallel::DataParallel;

namespace {
constexpr double kRel = 1e-4;
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("DataParallel cuda: two replicas on cuda:0 match one module", "[cuda][parallel][data_parallel]") {
  for (bool bn : {false, true}) {
    INFO("batchnorm " << bn);
    layers::ModulePtr ref = small_cnn(bn), model = small_cnn(bn);
    ref->to(kGpu);
    model->to(kGpu);
    if (bn) {  // eval: normalized by the running statistics, as one module would be
      ref->eval();
      model->eval();
    }
    auto dp = std::make_shared<DataParallel>(model, std::vector<Device>{kGpu, kGpu});
    optim::SGD opt_ref(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (uint64_t step = 0; step < 2; ++step) {
      const Tensor x = dp_batch(7, 20 + step, kGpu), t = dp_targets(7, kGpu);
      opt_ref.zero_grad();
      opt.zero_grad();
      const Tensor y = dp->forward(x);
      CHECK(y.device() == kGpu);
      check_step_near(y, ref->forward(x), t, *model, *ref, kRel);
      opt_ref.step();
      opt.step();
    }
    const auto p = model->named_parameters(), r = ref->named_parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      INFO(r[i].first);
      check_near(p[i].second, r[i].second, kRel);
    }
  }
}

TEST_CASE("DataParallel cuda: BatchNorm statistics from replica 0, CPU input and output",
          "[cuda][parallel][data_parallel]") {
  layers::ModulePtr chunk_ref = small_cnn(true), model = small_cnn(true);
  chunk_ref->to(kGpu);
  model->to(kGpu);
  auto dp = std::make_shared<DataParallel>(model, std::vector<Device>{kGpu, kGpu}, Device::cpu());
  const Tensor x = dp_batch(6, 30);  // on the CPU: scattered to cuda:0 in chunks of 3
  const Tensor y = dp->forward(x);
  CHECK(y.device() == Device::cpu());
  CHECK(y.sizes() == Shape{6, 5});
  chunk_ref->forward(x.narrow(0, 0, 3).to(kGpu));
  const auto b = model->named_buffers(), r = chunk_ref->named_buffers();
  REQUIRE(b.size() == r.size());
  for (size_t i = 0; i < b.size(); ++i) {
    INFO(r[i].first);
    check_near(b[i].second, r[i].second, kRel);
  }
  sum(y).backward();
  for (const Tensor& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().device() == kGpu);
  }
}
