// SyncBatchNorm (parallel/sync_batchnorm.h) on 2 and 3 CPU processes over the tcp backend: each
// rank normalizes its rows of a global batch (per-rank batch sizes unequal, one of them empty),
// and its output, its input's gradient, the weight and bias gradients summed over the ranks and
// the running statistics equal those of one plain BatchNorm2d on the whole batch, in f64 and f32;
// eval mode communicates nothing. DDP with convert_sync_batchnorm trains like one process on the
// concatenated batch, where DDP with plain BatchNorm does not. In-process: a group of one changes
// nothing, and conversion reaches every BatchNorm2d of a model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/sync_batchnorm.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing;  // ddp_check.h: child_group, small_cnn, global_batch, max_rel_diff, ...

namespace {

constexpr int64_t kChannels = 3, kSide = 4;

// |a - b| over all elements, against a bound for results that differ in the order and the
// grouping of sums over `terms` values of about unit size: a few roundings per term of the
// dtype's epsilon, scaled by the largest magnitude involved.
void check_close(const Tensor& a, const Tensor& b, int64_t terms, const char* what) {
  const double eps = a.dtype() == DType::f64 ? std::numeric_limits<double>::epsilon()
                                             : static_cast<double>(std::numeric_limits<float>::epsilon());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double scale = 1, worst = 0;
  for (double v : vb) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  INFO(what << ": worst difference " << worst << ", bound " << 8 * terms * eps * scale);
  CHECK(worst <= 8 * static_cast<double>(terms) * eps * scale);
}

// Rows each rank holds: unequal, and an empty one on the last rank of 3.
std::vector<int64_t> rows_per_rank(int world) {
  return world == 2 ? std::vector<int64_t>{2, 5} : std::vector<int64_t>{3, 4, 0};
}

void set_affine(layers::BatchNorm2d& bn) {
  NoGradGuard no_grad;
  bn.weight().copy_(from_vector(std::vector<double>{1.0, 0.5, 2.0}, {kChannels}).to(bn.weight().dtype()));
  bn.bias().copy_(from_vector(std::vector<double>{0.1, -0.2, 0.3}, {kChannels}).to(bn.bias().dtype()));
}

// One rank's SyncBatchNorm2d against a plain BatchNorm2d on the whole batch, over two training
// steps (the running statistics after both), then an eval forward.
void match_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  const std::vector<int64_t> rows = rows_per_rank(world);
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const int64_t first = std::accumulate(rows.begin(), rows.begin() + rank, int64_t{0});
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO("rank " << rank << " of " << world << ", " << dtype_name(dtype));
    SyncBatchNorm2d bn(kChannels, pg);
    layers::BatchNorm2d ref(kChannels);
    bn.to(dtype);
    ref.to(dtype);
    set_affine(bn);
    set_affine(ref);
    const int64_t terms = total * kSide * kSide;
    for (int step = 0; step < 2; ++step) {
      Generator gen(50 + static_cast<uint64_t>(step));
      // A mean far from 0 beside a unit spread: the statistics must not cancel.
      const Tensor all_x = (randn({total, kChannels, kSide, kSide}, {}, gen) + 3.0).to(dtype);
      const Tensor all_g = randn({total, kChannels, kSide, kSide}, {}, gen).to(dtype);
      Tensor x = all_x.narrow(0, first, rows[static_cast<size_t>(rank)]).clone();
      Tensor xr = all_x.clone();
      x.requires_grad_();
      xr.requires_grad_();
      bn.zero_grad();
      ref.zero_grad();
      const Tensor y = bn(x), yr = ref(xr);
      sum(y * all_g.narrow(0, first, rows[static_cast<size_t>(rank)])).backward();
      sum(yr * all_g).backward();
      const Tensor mine_ref = yr.narrow(0, first, rows[static_cast<size_t>(rank)]).detach();
      check_close(y.detach(), mine_ref, terms, "output");
      check_close(x.grad(), xr.grad().narrow(0, first, rows[static_cast<size_t>(rank)]), terms, "input gradient");
      // Each rank's weight and bias gradients are its own rows' part: summed, the whole batch's.
      for (auto [p, pr] : {std::pair{bn.weight(), ref.weight()}, std::pair{bn.bias(), ref.bias()}}) {
        Tensor g = p.grad().clone();
        pg->all_reduce(g, ReduceOp::sum)->wait();
        check_close(g, pr.grad(), terms, "weight or bias gradient summed over the ranks");
      }
      check_close(bn.running_mean(), ref.running_mean(), terms, "running_mean");
      check_close(bn.running_var(), ref.running_var(), terms, "running_var");
    }
    // Eval: the running statistics, and no collective.
    const uint64_t before = pg->sequence_number();
    bn.eval();
    ref.eval();
    NoGradGuard no_grad;
    Generator gen(77);
    const Tensor x = randn({2, kChannels, kSide, kSide}, {}, gen).to(dtype);
    check_close(bn(x), ref(x), terms, "eval output");
    CHECK(pg->sequence_number() == before);
  }
}

// DDP over small_cnn with BatchNorm: with convert_sync_batchnorm the parameters follow one
// process on the concatenated batch step for step; without it they drift from it.
void ddp_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  layers::ModulePtr local = small_cnn(100, true), ref = small_cnn(100, true), plain = small_cnn(100, true);
  CHECK(count_sync_batchnorm(*convert_sync_batchnorm(local, pg)) == 1);
  DistributedDataParallel ddp(local, pg), plain_ddp(plain, pg);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD plain_opt(plain_ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < kSteps; ++step) {
    const Batch all = global_batch(step, world * kBatch);
    const Batch mine = all.rows(rank * kBatch, kBatch);
    train_step(opt, ddp, mine);
    train_step(plain_opt, plain_ddp, mine);
    train_step(ref_opt, *ref, all);
    INFO("rank " << rank << " step " << step);
    CHECK(max_rel_diff(local->parameters(), ref->parameters()) <= kTol);
    for (const Tensor& p : local->parameters()) CHECK(same_on_all_ranks(*pg, p));
    CHECK(max_rel_diff({local->named_buffers()[0].second}, {ref->named_buffers()[0].second}) <= kTol);  // running_mean
  }
  // The control: plain BatchNorm normalizes each rank's 4 images alone, and drifts.
  CHECK(max_rel_diff(plain->parameters(), ref->parameters()) > 100 * kTol);
}

}  // namespace

TEST_CASE("sync batchnorm child", "[.sync_bn_child]") {
  testing::run_scenario("EMBER_SYNC_BN_SCENARIO", {{"match", match_child}, {"ddp", ddp_child}});
}

TEST_CASE("SyncBatchNorm: 2 and 3 ranks with unequal batches compute what one BatchNorm2d does on the whole batch",
          "[multiproc][parallel][sync_bn]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    testing::Ranks job("[.sync_bn_child]", world, {"EMBER_SYNC_BN_SCENARIO=match"});
    if (job.wait_all(120)) job.check_all_passed();
  }
}

TEST_CASE("SyncBatchNorm: DDP with convert_sync_batchnorm trains like one process on the whole batch",
          "[multiproc][parallel][sync_bn]") {
  testing::Ranks job("[.sync_bn_child]", 2, {"EMBER_SYNC_BN_SCENARIO=ddp"});
  if (job.wait_all(120)) job.check_all_passed();
}

TEST_CASE("SyncBatchNorm: convert reaches every BatchNorm2d, a group of one computes plain BatchNorm",
          "[cpu][parallel][sync_bn]") {
  auto pg = init_process_group(group_of_one_options(30));
  auto model = models::resnet18(10);
  int64_t batchnorms = 0;
  for (const auto& [name, t] : model->named_buffers()) batchnorms += name.ends_with("running_mean") ? 1 : 0;
  REQUIRE(batchnorms > 10);
  CHECK(count_sync_batchnorm(*model) == 0);
  CHECK(convert_sync_batchnorm(model, pg) == model);
  CHECK(count_sync_batchnorm(*model) == batchnorms);

  SyncBatchNorm2d bn(kChannels, pg);
  layers::BatchNorm2d ref(kChannels);
  CHECK(bn.name() == "SyncBatchNorm2d");
  Generator gen(3);
  const Tensor x = randn({4, kChannels, kSide, kSide}, {}, gen);
  CHECK(bn(x).to_vector<float>() == ref(x).to_vector<float>());  // one replica: BatchNorm2d's own path
  CHECK(bn.running_mean().to_vector<float>() == ref.running_mean().to_vector<float>());
  destroy_process_group();
}
