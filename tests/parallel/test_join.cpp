// Join (parallel/join.h): DDP on 2 and 3 CPU processes whose ranks hold different numbers of
// batches. With Join every rank ends, with identical parameters equal to one process that steps,
// at each step, with the gradients of the ranks still training summed and divided by the world
// size; each rank shadows exactly the steps it had no batch for. With throw_on_early_termination
// every rank ends with an error naming the rank that ran out, at the first step it is missing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/join.h>
#include <ember/parallel/sync_batchnorm.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"
#include "support/error_of.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing;  // ddp_check.h: child_group, small_cnn, global_batch, train_step, ...

namespace {

// Rank r's batches: 2 + r, so rank 0 runs out first and the last rank trains longest.
int steps_of(int rank) { return 2 + rank; }

Batch batch_of(int step, int rank, int world) { return global_batch(step, world * kBatch).rows(rank * kBatch, kBatch); }

void shadow_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  layers::ModulePtr local = small_cnn(100, false), ref = small_cnn(100, false);
  auto ddp = std::make_shared<DistributedDataParallel>(local, pg);
  optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
  Join join(*ddp);
  for (int step = 0; step < steps_of(rank); ++step) train_step(opt, *ddp, batch_of(step, rank, world));
  CHECK(join.steps() == steps_of(rank));
  const int64_t shadowed = join.finish();
  CHECK(shadowed == steps_of(world - 1) - steps_of(rank));

  // One process: each step sums the gradients of the ranks that had a batch, divided by world.
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < steps_of(world - 1); ++step) {
    ref_opt.zero_grad();
    for (int r = 0; r < world; ++r) {
      if (step >= steps_of(r)) continue;
      const Batch b = batch_of(step, r, world);
      (layers::cross_entropy(ref->forward(b.x), b.y) * (1.0 / world)).backward();
    }
    ref_opt.step();
  }
  INFO("rank " << rank << " of " << world);
  CHECK(max_rel_diff(local->parameters(), ref->parameters()) <= kTol);
  for (const Tensor& p : local->parameters()) CHECK(same_on_all_ranks(*pg, p));
}

// small_cnn with BatchNorm: at each step the buffers come from a rank still training, so the ranks
// end with the step count of the rank that trained longest (a joined rank's stale buffers, taken
// as the root, kept resetting it), the same on every rank.
void batchnorm_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  layers::ModulePtr local = small_cnn(100, true);
  auto ddp = std::make_shared<DistributedDataParallel>(local, pg);
  optim::SGD opt(ddp->parameters(), {.lr = 0.05, .momentum = 0.9});
  Join join(*ddp);
  for (int step = 0; step < steps_of(rank); ++step) train_step(opt, *ddp, batch_of(step, rank, world));
  join.finish();
  INFO("rank " << rank << " of " << world);
  int64_t tracked = -1;
  for (const auto& [name, b] : local->named_buffers()) {
    INFO(name);
    CHECK(same_on_all_ranks(*pg, b));
    if (name.ends_with("num_batches_tracked")) tracked = b.item<int64_t>();
  }
  CHECK(tracked == steps_of(world - 1));
  for (const Tensor& p : local->parameters()) CHECK(same_on_all_ranks(*pg, p));
}

void throw_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  auto ddp = std::make_shared<DistributedDataParallel>(small_cnn(100, false), pg);
  optim::SGD opt(ddp->parameters(), {.lr = 0.05});
  Join join(*ddp, {.throw_on_early_termination = true});
  const std::string err = testing::error_of([&] {
    for (int step = 0; step < steps_of(rank); ++step) train_step(opt, *ddp, batch_of(step, rank, world));
    join.finish();
  });
  INFO("rank " << rank << ": " << err);
  CHECK_THAT(err, Catch::Contains("uneven inputs: rank 0 ran out of batches"));
  // Every rank stops at the step rank 0 no longer has: the others after 2 forwards of their own.
  CHECK(join.steps() == (rank == 0 ? 2 : 3));
}

}  // namespace

TEST_CASE("join child", "[.join_child]") {
  testing::run_scenario("EMBER_JOIN_SCENARIO",
                        {{"shadow", shadow_child}, {"batchnorm", batchnorm_child}, {"throw", throw_child}});
}

TEST_CASE("Join: ranks with 2, 3 and 4 batches all end, identical, as one process would step",
          "[multiproc][parallel][ddp][join]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    testing::Ranks job("[.join_child]", world, {"EMBER_JOIN_SCENARIO=shadow"});
    if (job.wait_all(120)) job.check_all_passed();
  }
}

TEST_CASE("Join: throw_on_early_termination ends every rank naming the rank that ran out",
          "[multiproc][parallel][ddp][join]") {
  testing::Ranks job("[.join_child]", 3, {"EMBER_JOIN_SCENARIO=throw"});
  if (job.wait_all(120)) job.check_all_passed();
}

TEST_CASE("Join: BatchNorm buffers follow a rank still training, the ranks end with the longest's step count",
          "[multiproc][parallel][ddp][join]") {
  testing::Ranks job("[.join_child]", 3, {"EMBER_JOIN_SCENARIO=batchnorm"});
  if (job.wait_all(120)) job.check_all_passed();
}

TEST_CASE("Join: a module with SyncBatchNorm is refused, naming the layers", "[cpu][parallel][ddp][join]") {
  auto pg = init_process_group(group_of_one_options(30));
  {
    auto ddp = std::make_shared<DistributedDataParallel>(convert_sync_batchnorm(small_cnn(100, true), pg), pg);
    CHECK_THAT(testing::error_of([&] { Join join(*ddp); }),
               Catch::Contains("1 SyncBatchNorm layer(s)") && Catch::Contains("cannot shadow"));
    auto plain = std::make_shared<DistributedDataParallel>(small_cnn(100, true), pg);
    CHECK_NOTHROW(Join(*plain));  // plain BatchNorm is accepted
  }
  destroy_process_group();
}
