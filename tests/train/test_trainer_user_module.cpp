// train/trainer: a model a user writes (a Module that is not in the zoo), with the user's own
// optimizer, schedule, loaders and loss, trained by Trainer(TrainerParts, TrainerOptions).
//
// What is checked: the run directory (metrics, checkpoints, config.json naming the user's model),
// that the step and epoch callbacks see every batch and every epoch and that the user's loss is
// the one trained and evaluated; a resume from epoch 1 ends bit for bit like an uninterrupted run;
// a resume from another model's checkpoint is an error; and the same program on 2 processes under
// DDP (tcp on 127.0.0.1): each rank reads half of the data, the ranks end with identical
// parameters, rank 0 writes the run directory, and a second job resumes it. Without a run
// directory (the examples' way) only checkpoint_dir is written; a schedule can step per epoch;
// restore_sampler moves a checkpoint to another number of processes at an epoch's end.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/data/dataloader.h>
#include <ember/data/dataset.h>
#include <ember/data/distributed_sampler.h>
#include <ember/data/synthetic.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>
#include <ember/optim/schedule.h>
#include <ember/optim/sgd.h>
#include <ember/serialize/checkpoint.h>
#include <ember/train/metrics.h>
#include <ember/train/trainer.h>
#include <ember/train/trainer_state.h>
#include "parallel/multiproc.h"
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::require_identical;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// The user's model: flatten, Linear, ReLU, Dropout (draws from the default generator, so an exact
// resume needs the checkpoint's RNG state), Linear.
class TwoLayerNet : public layers::Module {
 public:
  TwoLayerNet(int64_t in, int64_t hidden, int64_t classes)
      : fc1_(register_module("fc1", std::make_shared<layers::Linear>(in, hidden))),
        drop_(register_module("drop", std::make_shared<layers::Dropout>(0.2))),
        fc2_(register_module("fc2", std::make_shared<layers::Linear>(hidden, classes))) {}
  Tensor forward(const Tensor& x) override { return fc2_->forward(drop_->forward(relu(fc1_->forward(x.flatten(1))))); }
  std::string name() const override { return "TwoLayerNet"; }

 private:
  std::shared_ptr<layers::Linear> fc1_;
  std::shared_ptr<layers::Dropout> drop_;
  std::shared_ptr<layers::Linear> fc2_;
};

constexpr int64_t kTrain = 64, kTest = 24, kBatch = 8, kClasses = 4;

// Counts what the callbacks and the loss saw.
struct Seen {
  int64_t steps = 0, optimizer_steps = 0, loss_calls = 0, last_global_step = 0;
  std::vector<EpochMetrics> epochs;
};

// The parts a user's program builds: its own data (synthetic 1x6x6 images), loaders (under ddp
// over this rank's DistributedSampler share), model, SGD with momentum, a step schedule and a loss
// that counts its calls.
TrainerParts user_parts(const ParallelRun& par, Seen& seen) {
  manual_seed(7);
  auto all = std::make_shared<data::Synthetic>(kTrain + kTest, Shape{1, 6, 6}, kClasses, 11);
  std::vector<int64_t> train_idx, test_idx;
  for (int64_t i = 0; i < kTrain + kTest; ++i) (i < kTrain ? train_idx : test_idx).push_back(i);
  auto train_set = std::make_shared<data::Subset>(all, train_idx);
  auto test_set = std::make_shared<data::Subset>(all, test_idx);
  std::shared_ptr<data::Sampler> train_shard, test_shard;
  if (par.mode == ParallelMode::ddp) {
    train_shard = std::make_shared<data::DistributedSampler>(kTrain, par.rank, par.world_size,
                                                             data::DistributedSamplerOptions{.seed = 5});
    test_shard = std::make_shared<data::DistributedSampler>(kTest, par.rank, par.world_size,
                                                            data::DistributedSamplerOptions{.shuffle = false});
  }
  TrainerParts parts;
  parts.parallel = par;
  parts.train_loader =
      std::make_unique<data::DataLoader>(train_set, data::DataLoaderOptions{.batch_size = kBatch,
                                                                            .shuffle = train_shard == nullptr,
                                                                            .device = par.device,
                                                                            .seed = 5,
                                                                            .sampler = train_shard});
  parts.test_loader = std::make_unique<data::DataLoader>(
      test_set, data::DataLoaderOptions{.batch_size = kBatch, .device = par.device, .sampler = test_shard});
  parts.model = std::make_shared<TwoLayerNet>(36, 16, kClasses);
  parts.optimizer =
      std::make_unique<optim::SGD>(parts.model->parameters(), optim::SGDOptions{.lr = 0.2, .momentum = 0.9});
  parts.schedule =
      std::make_unique<optim::StepLR>(*parts.optimizer, optim::StepLROptions{.step_size = 8, .gamma = 0.5});
  parts.loss = [&seen](const Tensor& out, const Tensor& target) {
    ++seen.loss_calls;
    return layers::cross_entropy(out, target);
  };
  return parts;
}

TrainerOptions user_options(const std::string& run_dir, int64_t epochs, Seen& seen) {
  TrainerOptions o;
  o.name = "user";
  o.epochs = epochs;
  o.output.run_dir = run_dir;
  o.output.log_interval = 1e6;
  o.checkpoint.resume = "auto";
  o.model_name = "two_layer_net";
  o.dataset_name = "synthetic_6x6";
  o.on_step = [&seen](const StepInfo& s) {
    ++seen.steps;
    if (s.optimizer_stepped) ++seen.optimizer_steps;
    CHECK(s.batch_size == kBatch);
    CHECK(s.loss != nullptr);
    CHECK(s.global_step >= seen.last_global_step);
    seen.last_global_step = s.global_step;
  };
  o.on_epoch = [&seen](const EpochMetrics& m) { seen.epochs.push_back(m); };
  return o;
}

ParallelRun one_cpu() {
  ParallelRun par;
  par.device = Device::cpu();
  return par;
}

std::string param_sum_text(const layers::Module& m) {
  double total = 0;
  for (const auto& [name, t] : m.state_dict()) total += ember::sum(t.to(DType::f64)).item<double>();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", total);
  return buf;
}

}  // namespace

TEST_CASE("trainer: a user's own Module trains with its loaders, loss, callbacks and checkpoints",
          "[cpu][train][user_module]") {
  TempDir tmp;
  const std::string dir = (tmp.path() / "run").string();
  Seen seen;
  TrainerParts parts = user_parts(one_cpu(), seen);
  std::shared_ptr<layers::Module> model = parts.model;
  Trainer trainer(std::move(parts), user_options(dir, 3, seen));
  const TrainOutcome out = trainer.run();
  CHECK(out.exit_code == 0);
  CHECK(out.run_dir == dir);
  CHECK(out.summary.epochs_run == 3);
  CHECK(out.summary.stop_reason == "completed");

  // Every batch reached the step callback, each one an optimizer step; the loss counted both the
  // training batches and the test batches of each evaluation.
  const int64_t batches = kTrain / kBatch, test_batches = kTest / kBatch;
  CHECK(seen.steps == 3 * batches);
  CHECK(seen.optimizer_steps == 3 * batches);
  CHECK(seen.last_global_step == 3 * batches);
  CHECK(seen.loss_calls == 3 * (batches + test_batches));

  const std::vector<EpochMetrics> lines = read_metrics_file(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 3);
  REQUIRE(seen.epochs.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(seen.epochs[i] == lines[i]);
  CHECK(lines[2].train_loss < lines[0].train_loss);  // it learns
  CHECK(lines[0].lr == Approx(0.2));
  CHECK(lines[1].lr == Approx(0.1));  // the user's StepLR: halved every 8 optimizer steps
  CHECK_FALSE(lines[0].h2d_copied);  // the loaders deliver on the CPU, where the model is

  const serialize::Checkpoint ck = serialize::load_checkpoint(dir + "/checkpoints/last.ckpt");
  CHECK(ck.epoch == 3);
  CHECK(ck.global_step == 3 * batches);
  CHECK(ck.metadata.at("model") == "two_layer_net");
  CHECK(ck.metadata.at("dataset") == "synthetic_6x6");
  require_identical(ck.model, model->state_dict(), "last.ckpt vs the trained model");
  CHECK(fs::exists(dir + "/checkpoints/best.ckpt"));
  const auto config = nlohmann::json::parse(read_text(dir + "/config.json"));
  CHECK(config["model"]["name"] == "two_layer_net");
  CHECK(config["epochs"] == 3);
  CHECK(read_text(dir + "/log.txt").find("two_layer_net (") != std::string::npos);

  // A Trainer runs once: its optimizer and loaders have moved on.
  CHECK(error_of([&] { trainer.run(); }).find("a Trainer runs once") != std::string::npos);
}

TEST_CASE("trainer: a user's Module resumed from epoch 1 ends bit for bit like an uninterrupted run",
          "[cpu][train][user_module]") {
  TempDir tmp;
  const std::string whole = (tmp.path() / "whole").string(), parts_dir = (tmp.path() / "resumed").string();
  Seen a, b1, b2;
  Trainer(user_parts(one_cpu(), a), user_options(whole, 3, a)).run();
  Trainer(user_parts(one_cpu(), b1), user_options(parts_dir, 1, b1)).run();
  // A new process would build fresh parts the same way; the checkpoint overwrites their state.
  const TrainOutcome out = Trainer(user_parts(one_cpu(), b2), user_options(parts_dir, 3, b2)).run();
  CHECK(out.exit_code == 0);
  CHECK(b2.epochs.size() == 2);  // epochs 2 and 3 only
  CHECK(b2.steps == 2 * kTrain / kBatch);

  const serialize::Checkpoint x = serialize::load_checkpoint(whole + "/checkpoints/last.ckpt");
  const serialize::Checkpoint y = serialize::load_checkpoint(parts_dir + "/checkpoints/last.ckpt");
  CHECK(x.global_step == y.global_step);
  CHECK(x.rng == y.rng);
  require_identical(x.model, y.model, "model");
  require_identical(x.optimizer, y.optimizer, "optimizer");
  const auto mx = read_metrics_file(whole + "/metrics.jsonl"), my = read_metrics_file(parts_dir + "/metrics.jsonl");
  REQUIRE(mx.size() == 3);
  REQUIRE(my.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(mx[i].train_loss == my[i].train_loss);
    CHECK(mx[i].test_loss == my[i].test_loss);
    CHECK(mx[i].test_acc == my[i].test_acc);
  }

  // Another model's checkpoint is refused before anything is loaded.
  Seen c;
  TrainerOptions other = user_options(parts_dir, 4, c);
  other.model_name = "another_net";
  const std::string msg = error_of([&] { Trainer(user_parts(one_cpu(), c), other).run(); });
  CHECK(msg.find("holds model \"two_layer_net\"") != std::string::npos);
  CHECK(msg.find("\"another_net\"") != std::string::npos);
}

TEST_CASE("trainer: user module ddp child", "[.user_module_ddp_child]") {
  const char* dir = std::getenv("EMBER_USER_DDP_DIR");
  const char* epochs = std::getenv("EMBER_USER_DDP_EPOCHS");
  REQUIRE(dir != nullptr);
  REQUIRE(epochs != nullptr);
  ParallelConfig ddp;
  ddp.mode = ParallelMode::ddp;
  ddp.backend = "tcp";
  ddp.timeout_s = 60;
  const ParallelRun par = start_parallel("cpu", ddp);
  REQUIRE(par.mode == ParallelMode::ddp);
  CHECK(par.world_size == 2);
  Seen seen;
  TrainerParts parts = user_parts(par, seen);
  CHECK(parts.train_loader->len() == kTrain / kBatch / 2);  // this rank's half
  std::shared_ptr<layers::Module> model = parts.model;
  const int64_t n = std::atoll(epochs);
  const TrainOutcome out = Trainer(std::move(parts), user_options(dir, n, seen)).run();
  CHECK(out.exit_code == 0);
  CHECK(out.summary.world_size == 2);
  CHECK(out.summary.epochs_run == n);
  CHECK(seen.epochs.size() >= 1);
  for (const EpochMetrics& m : seen.epochs) CHECK(std::isfinite(m.train_loss));
  // The parent compares the ranks' parameters: DDP keeps the replicas identical.
  std::printf("PARAMS %s\n", param_sum_text(*model).c_str());
}

TEST_CASE("trainer: a user's Module under DDP on 2 processes, checkpointed and resumed",
          "[cpu][train][user_module][multiproc]") {
  TempDir tmp;
  const std::string dir = (tmp.path() / "ddp").string();
  auto params_of = [](const std::string& output) {
    const size_t at = output.find("PARAMS ");
    return at == std::string::npos ? std::string() : output.substr(at + 7, output.find('\n', at) - at - 7);
  };
  {
    testing::Ranks job("[.user_module_ddp_child]", 2, {"EMBER_USER_DDP_DIR=" + dir, "EMBER_USER_DDP_EPOCHS=2"});
    REQUIRE(job.wait_all(120));
    job.check_all_passed();
    const std::string p0 = params_of(job.output(0)), p1 = params_of(job.output(1));
    CHECK_FALSE(p0.empty());
    CHECK(p0 == p1);
  }
  CHECK(read_metrics_file(dir + "/metrics.jsonl").size() == 2);
  const RunSummary s = parse_run_summary(read_text(dir + "/summary.json"), "summary.json");
  CHECK(s.world_size == 2);
  CHECK(serialize::load_checkpoint(dir + "/checkpoints/last.ckpt").epoch == 2);
  {
    // Both ranks resume from rank 0's last.ckpt and train epoch 3.
    testing::Ranks job("[.user_module_ddp_child]", 2, {"EMBER_USER_DDP_DIR=" + dir, "EMBER_USER_DDP_EPOCHS=3"});
    REQUIRE(job.wait_all(120));
    job.check_all_passed();
    CHECK(params_of(job.output(0)) == params_of(job.output(1)));
  }
  const std::vector<EpochMetrics> lines = read_metrics_file(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 3);
  CHECK(lines[2].epoch == 3);
  CHECK(read_text(dir + "/log.txt").find("resumed from") != std::string::npos);
  const serialize::Checkpoint ck = serialize::load_checkpoint(dir + "/checkpoints/last.ckpt");
  CHECK(ck.epoch == 3);
  CHECK(ck.global_step == 3 * kTrain / kBatch / 2);
}

TEST_CASE("trainer: without a run directory only checkpoint_dir is written, and a schedule can step per epoch",
          "[cpu][train][user_module]") {
  TempDir tmp;
  const std::string ck_dir = (tmp.path() / "ck").string();
  auto options = [&](int64_t epochs, Seen& seen) {
    TrainerOptions o = user_options("", epochs, seen);
    o.program = "myprog";
    o.write_run_dir = false;
    o.output.dir = (tmp.path() / "runs").string();  // must stay absent
    o.checkpoint.resume = "";
    o.checkpoint.keep_last = 0;  // every epoch_N.ckpt
    o.checkpoint.keep_best = false;
    return o;
  };
  auto parts_per_epoch = [](Seen& seen) {
    TrainerParts p = user_parts(one_cpu(), seen);
    p.schedule = std::make_unique<optim::StepLR>(*p.optimizer, optim::StepLROptions{.step_size = 1, .gamma = 0.5});
    p.schedule_interval = ScheduleInterval::epoch;
    return p;
  };
  Seen a;
  TrainerOptions o = options(3, a);
  o.checkpoint_dir = ck_dir;
  const TrainOutcome out = Trainer(parts_per_epoch(a), o).run();
  CHECK(out.exit_code == 0);
  REQUIRE(a.epochs.size() == 3);
  CHECK(a.epochs[0].lr == Approx(0.2));  // halved after each epoch, not after each step
  CHECK(a.epochs[1].lr == Approx(0.1));
  CHECK(a.epochs[2].lr == Approx(0.05));
  for (const char* f : {"epoch_1.ckpt", "epoch_2.ckpt", "epoch_3.ckpt", "last.ckpt"})
    CHECK(fs::exists(fs::path(ck_dir) / f));
  CHECK_FALSE(fs::exists(fs::path(ck_dir) / "best.ckpt"));
  CHECK_FALSE(fs::exists(tmp.path() / "runs"));
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 1);  // ck alone

  // Resumed from epoch 1's checkpoint, with no checkpoint_dir: epochs 2 and 3 as before, and
  // nothing written anywhere.
  Seen b;
  TrainerOptions r = options(3, b);
  r.checkpoint.resume = ck_dir + "/epoch_1.ckpt";
  CHECK(Trainer(parts_per_epoch(b), r).run().exit_code == 0);
  REQUIRE(b.epochs.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(b.epochs[i].lr == a.epochs[i + 1].lr);
    CHECK(b.epochs[i].train_loss == a.epochs[i + 1].train_loss);
    CHECK(b.epochs[i].test_acc == a.epochs[i + 1].test_acc);
  }
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 1);
  CHECK(fs::exists(fs::path(ck_dir) / "epoch_3.ckpt"));  // the first run's, untouched
}

TEST_CASE("trainer: restore_sampler carries a checkpoint over to another number of processes at an epoch's end",
          "[cpu][train][user_module]") {
  auto set = std::make_shared<data::Synthetic>(12, Shape{1, 2, 2}, 2, 3);
  auto shard_loader = [&](int rank, int world) {
    return std::make_unique<data::DataLoader>(
        set, data::DataLoaderOptions{.batch_size = 2,
                                     .sampler = std::make_shared<data::DistributedSampler>(
                                         12, rank, world, data::DistributedSamplerOptions{.seed = 4})});
  };
  auto two = shard_loader(0, 2);
  for (auto& b : *two) (void)b;  // one epoch
  two->set_epoch(1);  // the next one's start, as a checkpoint at an epoch's end holds it
  const StateDict end_of_epoch = two->state_dict();

  // As many processes: the state loads as it is.
  auto same = shard_loader(1, 2);
  CHECK(restore_sampler(*same, end_of_epoch).empty());
  CHECK(same->sampler().position() == 0);

  // One process (a RandomSampler) or three ranks: the epoch carries over, and a note says so.
  data::DataLoader one(set, {.batch_size = 2, .shuffle = true, .seed = 4});
  const std::string note = restore_sampler(one, end_of_epoch);
  CHECK(note.find("a run of 2 process(es), this one has 1") != std::string::npos);
  auto three = shard_loader(2, 3);
  CHECK(restore_sampler(*three, end_of_epoch).find("this one has 3") != std::string::npos);
  CHECK(restore_sampler(*three, one.state_dict()).find("a run of 1 process(es), this one has 3") != std::string::npos);

  // Mid-epoch: only as many processes can continue it.
  auto mid = shard_loader(0, 2);
  auto it = mid->begin();
  ++it;
  const StateDict partway = mid->state_dict();
  REQUIRE(mid->sampler().position() > 0);
  const std::string msg = error_of([&] { restore_sampler(one, partway); });
  CHECK(msg.find("examples into an epoch of a run with 2 process(es)") != std::string::npos);
  CHECK(msg.find("can continue on 1") != std::string::npos);
}
