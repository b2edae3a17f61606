#pragma once
// DistributedDataParallel against one process (tests/parallel/test_ddp.cpp on the CPU,
// tests/parallel/cuda/test_ddp_cuda.cpp on a GPU): a small CNN, the global batches, and the check
// that after every SGD-momentum step every rank's parameters equal those of one process trained on
// the concatenated batch. Each function runs inside one rank of a testing::Ranks job.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>

namespace ember::testing {

inline constexpr int64_t kBatch = 4;  // per rank and micro-batch
inline constexpr int kSteps = 5;

// Conv2d(1, 4, 3) ReLU [BatchNorm2d(4)] MaxPool2d(2) Flatten Linear(36, 5): x (N, 1, 8, 8).
inline layers::ModulePtr small_cnn(uint64_t seed, bool batchnorm, int64_t classes = 5) {
  Generator gen(seed);
  auto m = std::make_shared<layers::Sequential>();
  m->push_back(std::make_shared<layers::Conv2d>(1, 4, 3, layers::Conv2dOptions{}, gen));
  m->push_back(std::make_shared<layers::ReLU>());
  if (batchnorm) m->push_back(std::make_shared<layers::BatchNorm2d>(4));
  m->push_back(std::make_shared<layers::MaxPool2d>(2));
  m->push_back(std::make_shared<layers::Flatten>());
  m->push_back(std::make_shared<layers::Linear>(36, classes, true, gen));
  return m;
}

// Two heads; forward uses only the first (head2 gets no gradient).
class TwoHeads : public layers::Module {
 public:
  explicit TwoHeads(uint64_t seed) {
    Generator gen(seed);
    body_ = register_module("body", small_cnn(seed, false));
    head2_ = register_module("head2", std::make_shared<layers::Linear>(5, 5, true, gen));
  }
  Tensor forward(const Tensor& x) override { return body_->forward(x); }
  std::string name() const override { return "TwoHeads"; }

 private:
  layers::ModulePtr body_, head2_;
};

// The global batch of one step: (world * n, 1, 8, 8) inputs and targets in [0, 5).
struct Batch {
  Tensor x, y;
  Batch rows(int64_t start, int64_t n) const { return {x.narrow(0, start, n), y.narrow(0, start, n)}; }
};
inline Batch global_batch(int step, int64_t n, Device device = Device::cpu()) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({n, 1, 8, 8}, {}, gen).to(device);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back((i * 7 + step) % 5);
  return {x, from_vector(y, {n}).to(device)};
}

// One SGD step of `m` on `b`: zero_grad, cross-entropy backward, step.
inline void train_step(optim::Optimizer& opt, layers::Module& m, const Batch& b) {
  opt.zero_grad();
  layers::cross_entropy(m.forward(b.x), b.y).backward();
  opt.step();
}

// Largest |a - b| relative to 1 + |b| over two parameter lists.
inline double max_rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]) / (1 + std::abs(vb[k])));
  }
  return worst;
}

// f32 results that differ only in the order of a reduction over a few hundred terms, carried
// through five optimizer steps.
inline const double kTol = 256 * std::numeric_limits<float>::epsilon();

// True when `t` is the same on every rank (bitwise: max and min over the ranks agree).
inline bool same_on_all_ranks(parallel::ProcessGroup& pg, const Tensor& t) {
  Tensor hi = t.detach().clone(), lo = t.detach().clone();
  pg.all_reduce(hi, parallel::ReduceOp::max)->wait();
  pg.all_reduce(lo, parallel::ReduceOp::min)->wait();
  return hi.to_vector<double>() == lo.to_vector<double>();
}

/// This rank's group (rank etc. from the variables testing::Ranks sets).
inline std::shared_ptr<parallel::ProcessGroup> child_group(const std::string& backend = "tcp",
                                                           Device device = Device::cpu()) {
  parallel::InitOptions o;
  o.backend = backend;
  o.device = device;
  o.timeout_s = 60;
  return parallel::init_process_group(o);
}

// Training against the single-process reference on `device` over `backend`. accumulation > 1:
// no_sync on all micro-batches but the last, each loss scaled by 1 / accumulation.
inline void train_and_compare(int accumulation, bool find_unused, const std::string& backend = "tcp",
                              Device device = Device::cpu()) {
  auto pg = child_group(backend, device);
  const int rank = pg->rank(), world = pg->world_size();
  // Ranks start from different values: the constructor must hand them all rank 0's.
  layers::ModulePtr local = find_unused ? layers::ModulePtr(std::make_shared<TwoHeads>(100 + rank))
                                        : small_cnn(100 + static_cast<uint64_t>(rank), false);
  layers::ModulePtr ref = find_unused ? layers::ModulePtr(std::make_shared<TwoHeads>(100)) : small_cnn(100, false);
  local->to(device);
  ref->to(device);
  parallel::DistributedDataParallel ddp(local, pg, {.bucket_cap_mb = 0.0005, .find_unused_parameters = find_unused});
  CHECK(ddp.buckets().size() > 1);  // several buckets: tests the launch order
  CHECK(max_rel_diff(local->parameters(), ref->parameters()) == 0);

  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < kSteps; ++step) {
    const Batch all = global_batch(step, world * accumulation * kBatch, device);
    opt.zero_grad();
    for (int m = 0; m < accumulation; ++m) {
      // Micro-batch m of this rank: rows of the global batch no other rank or micro-batch uses.
      const Batch mine = all.rows((m * world + rank) * kBatch, kBatch);
      auto step_loss = [&] { return layers::cross_entropy(ddp(mine.x), mine.y) * (1.0 / accumulation); };
      if (m + 1 < accumulation) {
        auto guard = ddp.no_sync();
        step_loss().backward();
      } else {
        step_loss().backward();
      }
    }
    opt.step();
    train_step(ref_opt, *ref, all);
    INFO("rank " << rank << " step " << step);
    CHECK(max_rel_diff(local->parameters(), ref->parameters()) <= kTol);
    for (const Tensor& p : local->parameters()) CHECK(same_on_all_ranks(*pg, p));
  }
  const parallel::CommStats s = ddp.take_comm_stats();
  CHECK(s.syncs == kSteps);
  CHECK(s.all_reduces == kSteps * static_cast<int64_t>(ddp.buckets().size()));
  CHECK(s.comm_seconds > 0);
  // The first bucket went out while backward still ran (with an unused parameter in it, it can
  // only go when backward ends).
  if (!find_unused) CHECK(s.grads_after_first_launch > 0);
  if (find_unused) {
    const Tensor g = static_cast<TwoHeads&>(*local).named_parameters().back().second.grad();
    REQUIRE(g.defined());
    for (double v : g.to_vector<double>()) CHECK(v == 0);
  }
}

}  // namespace ember::testing
