// ZeroRedundancyOptimizer (ZeRO-1): the size-balanced partition; on 2 and 3 CPU processes over
// tcp, DDP + ZeRO(SGD with momentum, Adam) gives bitwise the parameters of DDP + the plain
// optimizer after every step, with a StepLR schedule changing the lr; each rank holds its shard's
// state only; the consolidated state dict is bitwise the plain optimizer's, and one written by a
// 2-process run resumes a 3-process ZeRO run and a plain one identically. Plus a group of one:
// the errors of checkpoints and factories.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/zero.h>
#include <ember/serialize/checkpoint.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::bytes_of;
using ember::testing::error_of;

namespace {

constexpr int kZeroSteps = 4;  // per phase
constexpr int64_t kRows = 3;  // rows per rank and step

// Linear(16, 24) ReLU Linear(24, 16) ReLU Linear(16, 4): parameters of 384, 24, 384, 16, 64 and
// 4 floats, so shards are uneven at 3 ranks (384, 384, 108) and the partition has work to do.
layers::ModulePtr mlp(uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<layers::Sequential>();
  m->push_back(std::make_shared<layers::Linear>(16, 24, true, gen));
  m->push_back(std::make_shared<layers::ReLU>());
  m->push_back(std::make_shared<layers::Linear>(24, 16, true, gen));
  m->push_back(std::make_shared<layers::ReLU>());
  m->push_back(std::make_shared<layers::Linear>(16, 4, true, gen));
  return m;
}

// This rank's rows of step `step`'s global batch: x (kRows, 16), targets in [0, 4).
testing::Batch rank_batch(int step, int rank, int world) {
  Generator gen(2000 + static_cast<uint64_t>(step));
  const int64_t n = world * kRows;
  Tensor x = randn({n, 16}, {}, gen);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back((i * 7 + step) % 4);
  return testing::Batch{x, from_vector(y, {n})}.rows(rank * kRows, kRows);
}

// The inner optimizer the EMBER_ZERO_OPT variable names: "sgd" (momentum, weight decay) or "adam".
OptimizerFactory factory() {
  const std::string kind = std::getenv("EMBER_ZERO_OPT") ? std::getenv("EMBER_ZERO_OPT") : "sgd";
  if (kind == "adam")
    return [](std::vector<Tensor> ps) {
      return std::make_unique<optim::Adam>(std::move(ps), optim::AdamOptions{.lr = 0.01});
    };
  return [](std::vector<Tensor> ps) {
    return std::make_unique<optim::SGD>(std::move(ps),
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  };
}

// One training setup: a model under DDP, an optimizer and a StepLR (lr halves every 2 steps).
struct Run {
  layers::ModulePtr model;
  std::shared_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::StepLR> schedule;

  Run(const std::shared_ptr<ProcessGroup>& pg, bool zero) : model(mlp(100 + static_cast<uint64_t>(pg->rank()))) {
    ddp = std::make_shared<DistributedDataParallel>(model, pg);  // every rank takes rank 0's values
    if (zero) opt = std::make_unique<ZeroRedundancyOptimizer>(ddp->parameters(), pg, factory());
    else opt = factory()(ddp->parameters());
    schedule = std::make_unique<optim::StepLR>(*opt, optim::StepLROptions{.step_size = 2, .gamma = 0.5});
  }
  ZeroRedundancyOptimizer& zero() { return dynamic_cast<ZeroRedundancyOptimizer&>(*opt); }
  void train_step(int step, int rank, int world) {
    const testing::Batch b = rank_batch(step, rank, world);
    opt->zero_grad();
    layers::cross_entropy((*ddp)(b.x), b.y).backward();
    opt->step();
    schedule->step();
  }
};

// Steps both runs and checks, after every step, that their parameters are bitwise equal (and the
// same on every rank).
void train_both(Run& zero, Run& plain, ProcessGroup& pg, int first_step) {
  for (int step = first_step; step < first_step + kZeroSteps; ++step) {
    zero.train_step(step, pg.rank(), pg.world_size());
    plain.train_step(step, pg.rank(), pg.world_size());
    INFO("rank " << pg.rank() << " of " << pg.world_size() << ", step " << step);
    CHECK(zero.opt->lr() == plain.opt->lr());
    const auto a = zero.model->parameters(), b = plain.model->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("parameter " << i << " " << a[i].shape_str());
      const bool same = bytes_of(a[i]) == bytes_of(b[i]);
      CHECK(same);
      CHECK(testing::same_on_all_ranks(pg, a[i]));
    }
  }
}

// Each rank holds exactly the plain optimizer's state of the parameters it owns, and that is
// within the largest parameter's state of an even 1/N share (the greedy partition's bound).
void check_state_bytes(Run& zero, Run& plain, const ProcessGroup& pg) {
  const ZeroRedundancyOptimizer& z = zero.zero();
  int64_t total = 0, largest = 0, owned = 0;
  for (size_t i = 0; i < plain.opt->params().size(); ++i) {
    const int64_t b = state_bytes(*plain.opt, i);
    REQUIRE(b > 0);  // every parameter has been updated
    total += b, largest = std::max(largest, b);
    if (z.owner(i) == pg.rank()) owned += b;
  }
  const int64_t mine = z.local_state_bytes();
  const double even = static_cast<double>(total) / pg.world_size();
  INFO("rank " << pg.rank() << ": " << mine << " of " << total << " state bytes (even share " << even << ", largest "
               << largest << ")");
  CHECK(mine == owned);
  CHECK(std::abs(static_cast<double>(mine) - even) <= static_cast<double>(largest));
  CHECK(mine < total);
  // What docs/parallel.md quotes.
  std::printf("zero state bytes: world %d rank %d %s: %lld of %lld\n", pg.world_size(), pg.rank(),
              zero.opt->name().c_str(), static_cast<long long>(mine), static_cast<long long>(total));
}

// The consolidated dict, on rank `to` only, is bitwise the plain optimizer's.
void check_consolidated(Run& zero, Run& plain, const ProcessGroup& pg, int to) {
  INFO("consolidated on rank " << to << ", this is rank " << pg.rank());
  const StateDict full = zero.zero().consolidate_state_dict(to);
  if (pg.rank() == to) testing::require_identical(full, plain.opt->state_dict(), "optimizer");
  else CHECK(full.empty());
}

std::string dir_file(const char* name) { return std::string(std::getenv("EMBER_ZERO_DIR")) + "/" + name; }

// Trains ZeRO and plain side by side; rank 0 leaves the model, the consolidated optimizer state
// and the schedule in EMBER_ZERO_DIR for the resume scenario.
void match_child() {
  auto pg = testing::child_group();
  Run zero(pg, true), plain(pg, false);
  CHECK(zero.opt->name() == "ZeroRedundancyOptimizer(" + plain.opt->name() + ")");
  train_both(zero, plain, *pg, 0);
  check_state_bytes(zero, plain, *pg);
  check_consolidated(zero, plain, *pg, 0);
  check_consolidated(zero, plain, *pg, pg->world_size() - 1);
  CHECK_THAT(error_of([&] { zero.opt->state_dict(); }), Catch::Contains("consolidate_state_dict"));
  const StateDict full = zero.zero().consolidate_state_dict(0);
  if (pg->rank() == 0 && std::getenv("EMBER_ZERO_DIR")) {
    serialize::save_tensors(zero.model->state_dict(), dir_file("model.ckpt"));
    serialize::save_tensors(full, dir_file("optim.ckpt"));
    serialize::save_tensors(zero.schedule->state_dict(), dir_file("schedule.ckpt"));
  }
}

// Loads what a run of another world size left into ZeRO and into the plain optimizer, checks the
// round trip through this world's shards, and continues both side by side.
void resume_child() {
  auto pg = testing::child_group();
  Run zero(pg, true), plain(pg, false);
  const StateDict model = serialize::load_tensors(dir_file("model.ckpt"));
  const StateDict optim = serialize::load_tensors(dir_file("optim.ckpt"));
  const StateDict schedule = serialize::load_tensors(dir_file("schedule.ckpt"));
  for (Run* r : {&zero, &plain}) {
    r->model->load_state_dict(model);
    r->opt->load_state_dict(optim);
    r->schedule->load_state_dict(schedule);
  }
  // The schedule's lr after the first run's steps (halved every 2), on both.
  CHECK(zero.opt->lr() == plain.opt->lr());
  CHECK(zero.opt->lr() == zero.schedule->lr_at(kZeroSteps));
  const StateDict again = zero.zero().consolidate_state_dict(0);
  if (pg->rank() == 0) testing::require_identical(again, optim, "optimizer after the round trip");
  train_both(zero, plain, *pg, kZeroSteps);
  check_consolidated(zero, plain, *pg, 0);
}

}  // namespace

TEST_CASE("zero child", "[.zero_child]") {
  testing::run_scenario("EMBER_ZERO_SCENARIO", {{"match", match_child}, {"resume", resume_child}});
}

TEST_CASE("zero: the partition is balanced by size and deterministic", "[cpu][parallel][zero]") {
  // Largest first onto the least-loaded rank, ties to the lower rank (loads after each step):
  // 10 -> 0 (10, 0), 7 -> 1 (10, 7), the first 3 -> 1 (10, 10), the second 3 -> 0 (13, 10),
  // 1 -> 1 (13, 11). Index order or round robin would give other owners.
  CHECK(ZeroRedundancyOptimizer::partition({10, 1, 7, 3, 3}, 2) == std::vector<int>{0, 1, 1, 1, 0});
  CHECK(ZeroRedundancyOptimizer::partition({5}, 3) == std::vector<int>{0});
  CHECK(ZeroRedundancyOptimizer::partition({}, 2).empty());
  CHECK_THAT(error_of([] { ZeroRedundancyOptimizer::partition({1}, 0); }), Catch::Contains("world size"));

  Generator gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int world = 1 + trial % 5;
    std::vector<int64_t> sizes;
    for (double u : rand({12 + trial}, {}, gen).to_vector<double>())
      sizes.push_back(1 + static_cast<int64_t>(u * 5000));
    const std::vector<int> owners = ZeroRedundancyOptimizer::partition(sizes, world);
    CHECK(owners == ZeroRedundancyOptimizer::partition(sizes, world));
    std::vector<int64_t> load(static_cast<size_t>(world), 0);
    for (size_t i = 0; i < sizes.size(); ++i) {
      REQUIRE(owners[i] >= 0);
      REQUIRE(owners[i] < world);
      load[static_cast<size_t>(owners[i])] += sizes[i];
    }
    const double mean = static_cast<double>(std::accumulate(sizes.begin(), sizes.end(), int64_t{0})) / world;
    const auto largest = static_cast<double>(*std::max_element(sizes.begin(), sizes.end()));
    INFO("trial " << trial << ", world " << world);
    for (int64_t l : load) CHECK(std::abs(static_cast<double>(l) - mean) <= largest);
  }
}

TEST_CASE("zero: 2 and 3 processes step like the plain optimizer, bitwise", "[multiproc][parallel][zero]") {
  for (const char* opt : {"sgd", "adam"}) {
    for (int world : {2, 3}) {
      INFO(opt << " on " << world << " processes");
      testing::Ranks job("[.zero_child]", world, {"EMBER_ZERO_SCENARIO=match", std::string("EMBER_ZERO_OPT=") + opt});
      if (job.wait_all(120)) job.check_all_passed();
    }
  }
}

TEST_CASE("zero: a consolidated state dict of 2 processes resumes 3, bitwise like the plain optimizer",
          "[multiproc][parallel][zero]") {
  for (const char* opt : {"sgd", "adam"}) {
    INFO(opt);
    testing::TempDir dir;
    const std::vector<std::string> env = {std::string("EMBER_ZERO_OPT=") + opt,
                                          "EMBER_ZERO_DIR=" + dir.path().string()};
    auto with = [&](const char* scenario) {
      std::vector<std::string> e = env;
      e.push_back(std::string("EMBER_ZERO_SCENARIO=") + scenario);
      return e;
    };
    testing::Ranks first("[.zero_child]", 2, with("match"));
    if (!first.wait_all(120)) continue;
    first.check_all_passed();
    testing::Ranks second("[.zero_child]", 3, with("resume"));
    if (second.wait_all(120)) second.check_all_passed();
  }
}

TEST_CASE("zero: a group of one - checkpoints and errors", "[cpu][parallel][zero]") {
  auto pg = init_process_group(testing::group_of_one_options(10));
  layers::ModulePtr a = mlp(5), b = mlp(5);
  auto sgd = [](std::vector<Tensor> ps) {
    return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1, .momentum = 0.5});
  };
  ZeroRedundancyOptimizer zero(a->parameters(), pg, sgd);
  optim::SGD plain(b->parameters(), {.lr = 0.1, .momentum = 0.5});
  CHECK(zero.shard().size() == a->parameters().size());
  CHECK(zero.hyperparameter("momentum") == 0.5);
  CHECK(zero.local_state_bytes() == 0);
  for (int step = 0; step < 2; ++step) {
    const testing::Batch x = rank_batch(step, 0, 1);
    for (auto [m, o] : {std::pair<layers::Module*, optim::Optimizer*>{a.get(), &zero}, {b.get(), &plain}}) {
      o->zero_grad();
      layers::cross_entropy(m->forward(x.x), x.y).backward();
      o->set_lr(0.1 / (step + 1));
      o->step();
    }
  }
  testing::require_identical(a->state_dict(), b->state_dict(), "model");
  const StateDict full = zero.consolidate_state_dict();
  testing::require_identical(full, plain.state_dict(), "optimizer");
  CHECK_THAT(error_of([&] { zero.consolidate_state_dict(1); }), Catch::Contains("rank 1 is not in the group of 1"));

  // Through an Optimizer&, the sharded optimizer still refuses to save only its shard.
  const optim::Optimizer& base = zero;
  CHECK_THAT(error_of([&] { base.state_dict(); }),
             Catch::Contains("ZeroRedundancyOptimizer(SGD)::state_dict") && Catch::Contains("consolidate_state_dict"));

  StateDict wrong_count = full;
  wrong_count["param_count"] = scalar_tensor(3, {.dtype = DType::i64});
  CHECK_THAT(error_of([&] { zero.load_state_dict(wrong_count); }), Catch::Contains("had 3 parameters, this one has 6"));
  StateDict wrong_shape = full;
  wrong_shape["state.2.momentum_buffer"] = zeros({3, 3});
  CHECK_THAT(error_of([&] { zero.load_state_dict(wrong_shape); }),
             Catch::Contains("'state.2.momentum_buffer' has shape [3, 3] but parameter 2 has shape [16, 24]"));
  StateDict adam_state = full;
  adam_state["state.1.exp_avg"] = zeros({24});
  CHECK_THAT(error_of([&] { zero.load_state_dict(adam_state); }),
             Catch::Contains("does not fit SGD") && Catch::Contains("keeps no state named 'exp_avg'"));
  StateDict out_of_range = full;
  out_of_range["state.6.momentum_buffer"] = zeros({4});
  CHECK_THAT(error_of([&] { zero.load_state_dict(out_of_range); }),
             Catch::Contains("'state.6.momentum_buffer' names parameter 6 but this optimizer has 6 parameters"));
  // Nothing changed: the state still equals the plain optimizer's.
  testing::require_identical(zero.consolidate_state_dict(), plain.state_dict(), "optimizer after failed loads");

  auto careless = [](std::vector<Tensor> ps) {
    ps.pop_back();
    return std::make_unique<optim::SGD>(std::move(ps));
  };
  CHECK_THAT(error_of([&] { ZeroRedundancyOptimizer z(a->parameters(), pg, careless); }),
             Catch::Contains("optimizes 5 tensors, not the 6 parameters of rank 0's shard"));
  destroy_process_group();
}
