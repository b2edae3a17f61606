// amp::GradScaler under DistributedDataParallel on 2 CPU processes (tcp): when rank 1 alone finds
// an inf in a gradient, parallel::found_inf_sync makes both ranks skip the step (parameters
// unchanged on both) and halve the scale; clean steps before and after step on both, and the
// parameters stay identical across the ranks throughout.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/optim/grad_scaler.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/found_inf.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"

using namespace ember;
using namespace ember::testing;  // ddp_check.h: small_cnn, global_batch, same_on_all_ranks, child_group

namespace {

std::vector<std::vector<double>> values_of(const std::vector<Tensor>& params) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : params) out.push_back(p.to_vector<double>());
  return out;
}

void grad_scaler_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  layers::ModulePtr local = small_cnn(100 + static_cast<uint64_t>(rank), false);
  parallel::DistributedDataParallel ddp(local, pg);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 100});
  scaler.set_found_inf_sync(parallel::found_inf_sync(pg));
  const std::vector<bool> poisoned = {false, true, false};  // steps where rank 1 injects an inf
  for (int step = 0; step < static_cast<int>(poisoned.size()); ++step) {
    INFO("rank " << rank << " step " << step);
    const Batch mine = global_batch(step, world * kBatch).rows(rank * kBatch, kBatch);
    opt.zero_grad();
    scaler.scale(layers::cross_entropy(ddp(mine.x), mine.y)).backward();
    const bool bad = poisoned[size_t(step)];
    if (bad && rank == 1) {
      Tensor g = local->parameters()[2].grad().flatten();
      g.narrow(0, 3, 1).fill_(std::numeric_limits<double>::infinity());
    }
    const auto before = values_of(local->parameters());
    CHECK(scaler.step(opt) == !bad);
    scaler.update();
    if (bad) {
      CHECK(values_of(local->parameters()) == before);
      CHECK(scaler.scale() == 512);
      CHECK(scaler.skipped_steps() == 1);
    } else {
      CHECK(values_of(local->parameters()) != before);
    }
    for (const Tensor& p : local->parameters()) CHECK(same_on_all_ranks(*pg, p));
  }
  CHECK(scaler.scale() == 512);
  CHECK(scaler.growth_tracker() == 1);
}

}  // namespace

TEST_CASE("grad scaler ddp child", "[.grad_scaler_child]") { grad_scaler_child(); }

TEST_CASE("GradScaler under DDP on 2 processes: an inf on one rank makes both skip",
          "[multiproc][parallel][grad_scaler]") {
  testing::Ranks job("[.grad_scaler_child]", 2, {});
  if (job.wait_all(120)) job.check_all_passed();
}
