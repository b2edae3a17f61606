// Kill-and-resume: a run interrupted after step k and resumed from its checkpoint in a fresh model,
// optimizer, schedule and loader must end with exactly the parameters, buffers, optimizer state and
// RNG state of an uninterrupted run (bit for bit).
//
// The setup exercises everything a resume has to restore: Conv2d + BatchNorm2d (running-stat
// buffers) + Dropout (the default generator), random crops and flips (per-example streams), a
// shuffled loader with worker threads stopped mid-epoch, momentum / Adam state, and per-iteration
// LR schedules. The last test kills a real process (SIGKILL) while it writes a checkpoint every
// step and resumes from whatever last.ckpt holds.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ember/ember.h>

#include "support/bitwise.h"
#include "support/spawn_self.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::bytes_of;
using ember::testing::require_identical;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kDataSeed = 11, kInitSeed = 5;
constexpr int64_t kExamples = 45, kBatch = 8;  // 6 batches per epoch, the last one of 5

enum class Opt { SGD, AdamW };

struct Run {
  std::shared_ptr<layers::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  std::unique_ptr<data::DataLoader> loader;
  int64_t step = 0;
};

// A fresh run. init_seed seeds the parameter initialisation (a resumed run uses a different one:
// loading must overwrite everything); the data order depends on kDataSeed only.
Run make_run(Opt kind, uint64_t init_seed, int workers = 2) {
  Run r;
  manual_seed(init_seed);
  r.model = std::make_shared<layers::Sequential>(std::initializer_list<layers::ModulePtr>{
      std::make_shared<layers::Conv2d>(1, 4, 3),  // (B, 4, 10, 10)
      std::make_shared<layers::BatchNorm2d>(4),
      std::make_shared<layers::ReLU>(),
      std::make_shared<layers::MaxPool2d>(2),  // (B, 4, 5, 5)
      std::make_shared<layers::Dropout>(0.3),
      std::make_shared<layers::Flatten>(),
      std::make_shared<layers::Linear>(100, 4),
  });
  if (kind == Opt::SGD) {
    r.opt = std::make_unique<optim::SGD>(
        r.model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    r.sched = std::make_unique<optim::LinearWarmup>(
        *r.opt, 3, std::make_unique<optim::CosineAnnealingLR>(*r.opt, optim::CosineAnnealingOptions{.T_max = 10}));
  } else {
    r.opt = std::make_unique<optim::AdamW>(r.model->parameters(), optim::AdamWOptions{.lr = 3e-3});
    r.sched = std::make_unique<optim::OneCycleLR>(*r.opt, optim::OneCycleOptions{.max_lr = 1e-2, .total_steps = 1000});
  }
  auto ds = std::make_shared<data::Synthetic>(kExamples, Shape{1, 12, 12}, 4, kDataSeed);
  r.loader = std::make_unique<data::DataLoader>(
      ds, data::DataLoaderOptions{.batch_size = kBatch,
                                  .shuffle = true,
                                  .workers = workers,
                                  .seed = kDataSeed,
                                  .transform = data::Compose(data::RandomCrop(12, 1), data::RandomHorizontalFlip(),
                                                             data::Normalize({0.5f}, {0.25f}))});
  return r;
}

serialize::Checkpoint capture(Run& r) {
  serialize::Checkpoint ck;
  ck.model = r.model->state_dict();
  ck.optimizer = r.opt->state_dict();
  ck.scheduler = r.sched->state_dict();
  ck.sampler = r.loader->state_dict();
  serialize::capture_rng(ck);
  ck.global_step = r.step;
  ck.epoch = r.loader->epoch();
  ck.sampler_position = r.loader->sampler().position();
  return ck;
}

void resume(Run& r, const serialize::Checkpoint& ck) {
  r.model->load_state_dict(ck.model);
  r.opt->load_state_dict(ck.optimizer);
  r.sched->load_state_dict(ck.scheduler);
  r.loader->load_state_dict(ck.sampler);
  serialize::restore_rng(ck);
  r.step = ck.global_step;
}

// Trains until r.step == until; on_step(r) runs after every step (inside the loader loop).
template <typename F> void train_until(Run& r, int64_t until, F&& on_step) {
  while (r.step < until) {
    for (auto& batch : *r.loader) {
      Tensor loss = layers::cross_entropy(r.model->forward(batch.input), batch.target);
      r.opt->zero_grad();
      loss.backward();
      r.opt->step();
      r.sched->step();
      ++r.step;
      on_step(r);
      if (r.step == until) break;  // leaves the sampler after this batch
    }
  }
}
void train_until(Run& r, int64_t until) {
  train_until(r, until, [](Run&) {});
}

void require_same_state(Run& a, Run& b) {
  require_identical(a.model->state_dict(), b.model->state_dict(), "model");
  require_identical(a.opt->state_dict(), b.opt->state_dict(), "optimizer");
  require_identical(a.sched->state_dict(), b.sched->state_dict(), "scheduler");
  require_identical(a.loader->state_dict(), b.loader->state_dict(), "sampler");
  CHECK(a.opt->lr() == b.opt->lr());
  CHECK(a.step == b.step);
}

}  // namespace

TEST_CASE("resume: two uninterrupted runs agree bit for bit (the baseline is deterministic)", "[cpu][resume]") {
  for (Opt kind : {Opt::SGD, Opt::AdamW}) {
    Run a = make_run(kind, kInitSeed, 2);
    train_until(a, 14);
    const uint64_t offset_a = default_generator().offset();
    Run b = make_run(kind, kInitSeed, 0);  // worker count must not matter either
    train_until(b, 14);
    CHECK(default_generator().offset() == offset_a);
    require_same_state(a, b);
  }
}

TEST_CASE("resume: continuing from a checkpoint equals the uninterrupted run", "[cpu][resume]") {
  TempDir dir;
  constexpr int64_t kTotal = 20;
  for (Opt kind : {Opt::SGD, Opt::AdamW}) {
    // k = 2 and 7: mid-epoch; 6: exactly at the end of the first epoch.
    for (int64_t k : {int64_t{2}, int64_t{6}, int64_t{7}}) {
      INFO((kind == Opt::SGD ? "SGD" : "AdamW") << ", checkpoint after step " << k);
      const std::string path = (dir.path() / "ck.ckpt").string();
      Run a = make_run(kind, kInitSeed);
      train_until(a, kTotal, [&](Run& r) {
        if (r.step == k) serialize::save_checkpoint(capture(r), path);
      });
      const uint64_t rng_offset_a = default_generator().offset();

      manual_seed(12345);  // scramble the generator: the checkpoint must restore it
      Run b = make_run(kind, kInitSeed + 100);
      const serialize::Checkpoint ck = serialize::load_checkpoint(path);
      CHECK(ck.global_step == k);
      resume(b, ck);
      train_until(b, kTotal);
      CHECK(default_generator().offset() == rng_offset_a);
      require_same_state(a, b);
    }
  }
}

TEST_CASE("resume: without restoring the RNG or the sampler the runs differ (the test can fail)", "[cpu][resume]") {
  TempDir dir;
  const std::string path = (dir.path() / "ck.ckpt").string();
  Run a = make_run(Opt::SGD, kInitSeed);
  train_until(a, 12, [&](Run& r) {
    if (r.step == 7) serialize::save_checkpoint(capture(r), path);
  });
  const serialize::Checkpoint ck = serialize::load_checkpoint(path);

  SECTION("RNG not restored") {
    Run b = make_run(Opt::SGD, kInitSeed + 100);
    b.model->load_state_dict(ck.model);
    b.opt->load_state_dict(ck.optimizer);
    b.sched->load_state_dict(ck.scheduler);
    b.loader->load_state_dict(ck.sampler);
    b.step = ck.global_step;
    train_until(b, 12);
    CHECK(bytes_of(a.model->state_dict().at("6.weight")) != bytes_of(b.model->state_dict().at("6.weight")));
  }
  SECTION("sampler not restored") {
    Run b = make_run(Opt::SGD, kInitSeed + 100);
    b.model->load_state_dict(ck.model);
    b.opt->load_state_dict(ck.optimizer);
    b.sched->load_state_dict(ck.scheduler);
    serialize::restore_rng(ck);
    b.step = ck.global_step;
    train_until(b, 12);
    CHECK(bytes_of(a.model->state_dict().at("6.weight")) != bytes_of(b.model->state_dict().at("6.weight")));
  }
}

// The child half of the kill test: trains with a checkpoint after every step until killed (or a
// cap of steps, so a lost parent cannot leave it running). Hidden: run only by the test below.
TEST_CASE("resume: child process that checkpoints every step", "[.resume_child]") {
  const char* dir = std::getenv("EMBER_RESUME_DIR");
  REQUIRE(dir != nullptr);
  Run r = make_run(Opt::SGD, kInitSeed);
  const std::string path = (fs::path(dir) / "last.ckpt").string();
  train_until(r, 3000, [&](Run& run) { serialize::save_checkpoint(capture(run), path); });
}

TEST_CASE("resume: a process killed with SIGKILL while checkpointing resumes exactly", "[cpu][resume][slow]") {
  TempDir dir;
  const std::string last = (dir.path() / "last.ckpt").string();
  // Same binary, same thread count: the child's numbers are this process's numbers.
  const pid_t pid = testing::spawn_self(
      "[.resume_child]", {"EMBER_RESUME_DIR=" + dir.str(), "EMBER_NUM_THREADS=" + std::to_string(num_threads())});

  // Kill it once it is past step 5: it is then most likely in the middle of another save.
  int64_t seen_step = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  bool exited = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::error_code ec;
    if (fs::exists(last, ec)) {
      try {
        seen_step = serialize::load_checkpoint(last).global_step;
      } catch (const Error&) {
        FAIL("last.ckpt was readable but invalid while the child was writing checkpoints");
      }
      if (seen_step >= 5) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    REQUIRE(::waitpid(pid, &status, 0) == pid);
  }
  INFO("child status " << status);
  REQUIRE_FALSE(exited);  // the child must have been killed, not have finished or crashed
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(seen_step >= 5);

  // Whatever the kill interrupted, last.ckpt is a complete checkpoint of some step >= seen_step.
  const serialize::Checkpoint ck = serialize::load_checkpoint(last);
  REQUIRE(ck.global_step >= seen_step);
  const int64_t total = ck.global_step + 9;

  Run resumed = make_run(Opt::SGD, kInitSeed + 100);
  resume(resumed, ck);
  train_until(resumed, total);
  const uint64_t offset_resumed = default_generator().offset();
  Run straight = make_run(Opt::SGD, kInitSeed);
  train_until(straight, total);
  CHECK(default_generator().offset() == offset_resumed);
  require_same_state(straight, resumed);
}
