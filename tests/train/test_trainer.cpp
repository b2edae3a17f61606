// train/trainer: whole runs on tiny synthetic data (cifar_cnn, CPU) and the run-directory pieces
// (train/run_dir.h, train/trainer_state.h).
//
// What is checked: the files of a run directory and their keys, keep_last rotation and best.ckpt,
// both early-stopping rules, a resume from an earlier epoch (later metrics dropped, epochs
// retrained bit for bit), and SIGTERM in the middle of an epoch in a child process followed by
// checkpoint.resume=auto, whose final metrics and parameters must equal an uninterrupted run's.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/build_info.h>
#include <ember/core/error.h>
#include <ember/core/thread_pool.h>
#include <ember/serialize/checkpoint.h>
#include <ember/train/config.h>
#include <ember/train/early_stop.h>
#include <ember/train/metrics.h>
#include <ember/train/run_dir.h>
#include <ember/train/trainer.h>
#include <ember/train/trainer_state.h>
#include "data/data_files.h"
#include "support/bitwise.h"
#include "support/spawn_self.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using namespace ember::serialize;
using ember::testing::read_text;
using ember::testing::require_identical;
namespace fs = std::filesystem;

namespace {

// A run small enough for the CPU tests: cifar_cnn on synthetic CIFAR-shaped images, `steps`
// batches of 16 per epoch, 16 test images, no progress lines.
ExperimentConfig tiny_config(const std::string& run_dir, int64_t epochs, int64_t steps) {
  ExperimentConfig c;
  c.name = "tiny";
  c.device = "cpu";
  c.seed = 3;
  c.epochs = epochs;
  c.model.name = ModelKind::cifar_cnn;
  c.model.dropout = 0.25;  // draws from the default generator: the checkpoint must carry it
  c.data.dataset = DatasetKind::synthetic;
  c.data.limit_train = 16 * steps;
  c.data.limit_test = 16;
  c.data.batch_size = 16;
  c.data.test_batch_size = 16;
  c.data.workers = 1;
  c.optim.name = OptimizerKind::sgd;
  c.optim.lr = 0.02;
  c.optim.momentum = 0.9;
  c.output.run_dir = run_dir;
  c.output.log_interval = 1e6;
  return c;
}

// The training state of two checkpoints is the same, bit for bit.
void require_same_checkpoint(const std::string& a_path, const std::string& b_path) {
  const Checkpoint a = load_checkpoint(a_path), b = load_checkpoint(b_path);
  CHECK(a.epoch == b.epoch);
  CHECK(a.global_step == b.global_step);
  CHECK(a.sampler_position == b.sampler_position);
  CHECK(a.rng == b.rng);
  require_identical(a.model, b.model, "model");
  require_identical(a.optimizer, b.optimizer, "optimizer");
  require_identical(a.scheduler, b.scheduler, "scheduler");
  require_identical(a.sampler, b.sampler, "sampler");
}

// Everything of the metrics that does not measure time is equal (doubles read back exactly).
void require_same_metrics(const std::vector<EpochMetrics>& a, const std::vector<EpochMetrics>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("metrics line " << i + 1);
    CHECK(a[i].epoch == b[i].epoch);
    CHECK(a[i].train_loss == b[i].train_loss);
    CHECK(a[i].test_loss == b[i].test_loss);
    CHECK(a[i].test_acc == b[i].test_acc);
    CHECK(a[i].lr == b[i].lr);
  }
}

// Feeds the recorded accuracies to a fresh EarlyStopping: the epoch it stops at (0: never) and why.
std::pair<int64_t, std::string> replay_early_stop(const EarlyStopConfig& cfg, const std::vector<EpochMetrics>& ms) {
  EarlyStopping s(cfg);
  for (const auto& m : ms)
    if (s.update(m.epoch, m.test_acc)) return {m.epoch, s.reason()};
  return {0, ""};
}

RunSummary read_summary(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "summary.json").string();
  return parse_run_summary(read_text(path), path);
}

std::vector<EpochMetrics> read_metrics(const std::string& run_dir) {
  return read_metrics_file((fs::path(run_dir) / "metrics.jsonl").string());
}

}  // namespace

TEST_CASE("trainer: a run directory holds config, metrics, summary, log and rotated checkpoints", "[cpu][train]") {
  testing::TempDir tmp;
  const std::string run_dir = tmp.file("run");
  ExperimentConfig c = tiny_config(run_dir, 3, 4);
  c.schedule.name = ScheduleKind::step;  // lr halves every epoch: the metrics show the per-step conversion
  c.schedule.step_size = 1;
  c.schedule.gamma = 0.5;
  c.checkpoint.keep_last = 2;
  c.early_stop.target_accuracy = 1.0;
  c.early_stop.patience = 1;
  // lr 0.01 for batches of 8, linear scaling: the run trains at 0.02 (batch 16).
  c.optim.lr = 0.01;
  c.optim.lr_scaling = LrScaling::linear;
  c.optim.reference_batch_size = 8;
  const std::vector<std::string> overrides = {"checkpoint.keep_last=2"};
  const TrainOutcome out = Trainer(c, overrides).run();
  CHECK(out.exit_code == 0);
  CHECK(out.run_dir == run_dir);

  // config.json: the resolved config, runnable again (in a new directory: output.run_dir is left
  // empty), plus provenance.
  const std::string config_text = read_text(run_dir + "/config.json");
  ExperimentConfig rerun = c;
  rerun.output.run_dir = "";
  CHECK(parse_config(config_text, {}, "config.json") == rerun);
  const auto j = nlohmann::json::parse(config_text);
  CHECK(j["provenance"]["git_commit"] == build_git_commit());
  CHECK(j["provenance"]["overrides"] == overrides);
  CHECK(j["provenance"]["started"].get<std::string>().size() == std::string("2024-01-01T00:00:00+0000").size());
  CHECK(!j["provenance"]["host"].get<std::string>().empty());
  CHECK(j["resolved"] == nlohmann::json{{"processes", 1},
                                        {"batch_size_per_process", 16},
                                        {"accumulation_steps", 1},
                                        {"global_batch_size", 16},
                                        {"lr", 0.02}});

  // metrics.jsonl: one line per epoch with every key (read_metrics_file requires them).
  const std::vector<EpochMetrics> ms = read_metrics(run_dir);
  const auto replay = replay_early_stop(c.early_stop, ms);
  const int64_t expected_epochs = replay.first > 0 ? replay.first : 3;
  REQUIRE(static_cast<int64_t>(ms.size()) == expected_epochs);
  double train_seconds = 0, best = -1;
  int64_t best_epoch = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    const EpochMetrics& m = ms[i];
    CHECK(m.epoch == static_cast<int64_t>(i) + 1);
    CHECK(std::isfinite(m.train_loss));
    CHECK(m.test_loss > 0);
    CHECK(m.test_acc >= 0);
    CHECK(m.test_acc <= 1);
    CHECK(m.lr == Approx(0.02 * std::pow(0.5, static_cast<double>(i))));
    CHECK(m.epoch_seconds > 0);
    CHECK(m.images_per_second == Approx(64.0 / m.epoch_seconds));
    const double phases =
        m.data_wait_seconds + m.h2d_seconds + m.forward_seconds + m.backward_seconds + m.optimizer_seconds;
    CHECK(phases > 0);
    CHECK(phases <= m.epoch_seconds);
    CHECK(m.forward_seconds > 0);
    CHECK(m.backward_seconds > 0);
    CHECK_FALSE(m.h2d_copied);  // batches arrive on the device: no h2d_seconds key in the line
    // Where the CPU went: the process used some; the loader's one worker made the batches (this
    // config is not resident), inside the process's total; callers waited no longer than the pass.
    CHECK(m.cpu_seconds > 0);
    CHECK(m.loader_cpu_seconds > 0);
    CHECK(m.loader_cpu_seconds <= m.cpu_seconds);
    CHECK(m.pool_wait_seconds >= 0);
    CHECK(m.pool_wait_seconds <= m.epoch_seconds);
    train_seconds += m.epoch_seconds;
    if (m.test_acc > best) {
      best = m.test_acc;
      best_epoch = m.epoch;
    }
  }

  // summary.json agrees with the metrics.
  const RunSummary s = read_summary(run_dir);
  CHECK(s == out.summary);
  CHECK(s.name == "tiny");
  CHECK(s.device == "cpu");
  CHECK(s.world_size == 1);
  CHECK(s.global_batch_size == 16);
  CHECK(s.lr == 0.02);
  CHECK(s.epochs_run == expected_epochs);
  CHECK(s.best_test_acc == best);
  CHECK(s.best_epoch == best_epoch);
  CHECK(s.stop_reason == (replay.first > 0 ? "target_accuracy" : "completed"));
  CHECK(s.stopped_early == (replay.first > 0));
  CHECK(s.images_per_second == Approx(64.0 * static_cast<double>(expected_epochs) / train_seconds));
  CHECK(s.total_seconds >= train_seconds);
  CHECK(s.target_accuracy == std::optional<double>(1.0));
  CHECK(s.time_to_target_seconds.has_value() == (replay.first > 0));

  // checkpoints: last and best, and only the newest keep_last = 2 epoch checkpoints.
  CHECK(epoch_checkpoints(run_dir + "/checkpoints") == std::vector<int64_t>({expected_epochs - 1, expected_epochs}));
  const Checkpoint last = load_checkpoint(run_dir + "/checkpoints/last.ckpt");
  CHECK(last.epoch == expected_epochs);
  CHECK(last.global_step == 4 * expected_epochs);
  CHECK(last.sampler_position == 0);
  CHECK(last.metadata.at("model") == "cifar_cnn");
  require_same_checkpoint(run_dir + "/checkpoints/last.ckpt",
                          run_dir + "/checkpoints/epoch_" + std::to_string(expected_epochs) + ".ckpt");
  const Checkpoint best_ck = load_checkpoint(run_dir + "/checkpoints/best.ckpt");
  CHECK(best_ck.epoch == best_epoch);

  // log.txt: every epoch's line and the final summary.
  const std::string log = read_text(run_dir + "/log.txt");
  for (int64_t e = 1; e <= expected_epochs; ++e)
    CHECK_THAT(log, Catch::Contains("epoch " + std::to_string(e) + "/3  train_loss"));
  CHECK_THAT(log, Catch::Contains("total time") && Catch::Contains("best test_acc"));

  // Starting afresh in the same directory is refused and leaves the run intact.
  const std::string metrics_before = read_text(run_dir + "/metrics.jsonl");
  const std::string config_before = read_text(run_dir + "/config.json");
  CHECK_THROWS_WITH(Trainer(c).run(), Catch::Contains(run_dir) && Catch::Contains("checkpoint.resume=auto") &&
                                          Catch::Contains("output.run_dir=NEW_DIR"));
  // Resuming with another model is an error naming both (and changes nothing either).
  ExperimentConfig other = c;
  other.checkpoint.resume = "auto";
  other.model.name = ModelKind::wide_resnet;
  other.model.depth = 10;
  other.model.widen = 1;
  CHECK_THROWS_WITH(Trainer(other).run(), Catch::Contains("cifar_cnn") && Catch::Contains("wide_resnet"));
  // A resume path that does not exist is an error naming it.
  other = c;
  other.checkpoint.resume = tmp.file("nope.ckpt");
  CHECK_THROWS_WITH(Trainer(other).run(), Catch::Contains(tmp.file("nope.ckpt")));
  CHECK(read_text(run_dir + "/metrics.jsonl") == metrics_before);
  CHECK(read_text(run_dir + "/config.json") == config_before);
  CHECK(read_summary(run_dir) == s);
}

TEST_CASE("trainer: early stopping once the target is reached for patience epochs", "[cpu][train]") {
  testing::TempDir tmp;
  ExperimentConfig c = tiny_config(tmp.file("run"), 5, 2);
  // One right answer in 16 reaches it; every epoch of a 10-class model does (the replay checks).
  c.early_stop.target_accuracy = 1e-6;
  c.early_stop.patience = 2;
  const TrainOutcome out = Trainer(c).run();
  CHECK(out.exit_code == 0);
  const std::vector<EpochMetrics> ms = read_metrics(out.run_dir);
  const auto [stop_epoch, reason] = replay_early_stop(c.early_stop, ms);
  REQUIRE(stop_epoch == 2);
  REQUIRE(ms.size() == 2);
  const RunSummary s = read_summary(out.run_dir);
  CHECK(s.stopped_early);
  CHECK(s.stop_reason == "target_accuracy");
  CHECK(s.stop_detail == reason);
  CHECK(s.epochs_run == 2);
  // Training seconds until the end of epoch 1, the first at the target.
  REQUIRE(s.time_to_target_seconds.has_value());
  CHECK(*s.time_to_target_seconds == Approx(ms[0].epoch_seconds));
}

TEST_CASE("trainer: memory_format channels_last trains like contiguous", "[cpu][train][memory_format]") {
  // Dropout off: its mask is drawn in row-major order either way, but without it the two runs
  // differ only in the order of sums (batch norm's, the first convolution's im2col GEMM). Two SGD
  // steps in f32: unit roundoff 6e-8 along the ~10^3 terms of a value's longest sums bounds the
  // losses' difference by about 1e-4 relative (measured 1e-6, 2026-11-29). Not three: this tiny
  // run's third step overshoots (its loss goes from 2.30 to 3.3), which multiplied the layouts'
  // difference by 200 (to 2.5e-4 under clang's TSan build); that measures the dynamics, not the layout.
  testing::TempDir tmp;
  ExperimentConfig a = tiny_config(tmp.file("rm"), 1, 2);
  a.model.dropout = 0.0;
  ExperimentConfig b = a;
  b.output.run_dir = tmp.file("cl");
  b.memory_format = MemoryFormat::channels_last;
  const TrainOutcome ra = Trainer(a).run(), rb = Trainer(b).run();
  REQUIRE(ra.exit_code == 0);
  REQUIRE(rb.exit_code == 0);
  const std::vector<EpochMetrics> ma = read_metrics(ra.run_dir), mb = read_metrics(rb.run_dir);
  REQUIRE(ma.size() == 1);
  REQUIRE(mb.size() == 1);
  CHECK(std::fabs(mb[0].train_loss - ma[0].train_loss) <= 1e-4 * std::fabs(ma[0].train_loss));
  CHECK(std::fabs(mb[0].test_loss - ma[0].test_loss) <= 1e-4 * std::fabs(ma[0].test_loss));
  CHECK(read_text(rb.run_dir + "/config.json").find("\"memory_format\": \"channels_last\"") != std::string::npos);
}

TEST_CASE("trainer: early stopping without a target after patience epochs without improvement", "[cpu][train]") {
  testing::TempDir tmp;
  ExperimentConfig c = tiny_config(tmp.file("run"), 4, 2);
  c.early_stop.patience = 1;
  c.early_stop.min_delta = 1.0;  // no accuracy can beat the first epoch's by more than 1
  const TrainOutcome out = Trainer(c).run();
  CHECK(out.exit_code == 0);
  const RunSummary s = read_summary(out.run_dir);
  CHECK(s.epochs_run == 2);
  CHECK(s.stopped_early);
  CHECK(s.stop_reason == "patience");
  CHECK(s.time_to_target_seconds == std::nullopt);
  const std::vector<EpochMetrics> ms = read_metrics(out.run_dir);
  REQUIRE(ms.size() == 2);
  CHECK(s.stop_detail == replay_early_stop(c.early_stop, ms).second);

  // Resuming a run that stopped early trains nothing and keeps its record.
  c.checkpoint.resume = "auto";
  const TrainOutcome again = Trainer(c).run();
  CHECK(again.exit_code == 0);
  CHECK(again.summary.epochs_run == 2);
  CHECK(again.summary.stop_reason == "patience");
  CHECK(read_metrics(out.run_dir).size() == 2);
}

TEST_CASE("trainer: resuming from an earlier epoch drops later metrics and retrains them bit for bit", "[cpu][train]") {
  testing::TempDir tmp;
  ExperimentConfig c = tiny_config(tmp.file("run"), 3, 2);
  c.checkpoint.keep_last = 0;  // keep every epoch checkpoint
  c.schedule.name = ScheduleKind::cosine;
  const TrainOutcome first = Trainer(c).run();
  REQUIRE(first.exit_code == 0);
  const std::vector<EpochMetrics> before = read_metrics(first.run_dir);
  REQUIRE(before.size() == 3);
  fs::copy_file(first.run_dir + "/checkpoints/last.ckpt", tmp.file("straight_last.ckpt"));
  fs::copy_file(first.run_dir + "/checkpoints/epoch_1.ckpt", tmp.file("epoch_1.ckpt"));

  c.checkpoint.resume = tmp.file("epoch_1.ckpt");
  const TrainOutcome second = Trainer(c).run();
  REQUIRE(second.exit_code == 0);
  const std::vector<EpochMetrics> after = read_metrics(second.run_dir);
  require_same_metrics(before, after);  // three lines, not five
  require_same_checkpoint(tmp.file("straight_last.ckpt"), second.run_dir + "/checkpoints/last.ckpt");
  CHECK(epoch_checkpoints(second.run_dir + "/checkpoints") == std::vector<int64_t>({1, 2, 3}));
  CHECK_THAT(read_text(second.run_dir + "/log.txt"), Catch::Contains("deleted 2 epoch checkpoints after epoch 1"));
  CHECK(read_summary(second.run_dir).epochs_run == 3);
}

// The child half of the SIGTERM test: runs the config named by EMBER_TRAINER_CHILD_CONFIG and
// exits with the run's exit code (143 after SIGTERM). Hidden: run only by the test below.
TEST_CASE("trainer: child process running one config", "[.trainer_child]") {
  const char* path = std::getenv("EMBER_TRAINER_CHILD_CONFIG");
  REQUIRE(path != nullptr);
  const TrainOutcome out = Trainer(load_config(path)).run();
  std::fflush(nullptr);
  std::_Exit(out.exit_code);
}

TEST_CASE("trainer: SIGTERM mid-epoch writes last.ckpt and resume=auto ends like an uninterrupted run",
          "[cpu][train][slow]") {
  testing::TempDir tmp;
  const std::string run_dir = tmp.file("interrupted");
  ExperimentConfig c = tiny_config(run_dir, 2, 6);
  c.data.augment = true;  // per-example random streams keyed by the epoch
  c.optim.nesterov = true;
  c.optim.weight_decay = 5e-4;
  c.schedule.name = ScheduleKind::cosine;
  c.schedule.warmup_epochs = 1;
  c.output.log_interval = 1e-3;  // a progress line in log.txt after every step: the parent watches it
  const std::string config_path = tmp.file("config.json");
  {
    std::ofstream f(config_path);
    f << to_json(c);
  }

  // The child: this binary, the same thread count (so the same arithmetic), output to a file.
  const std::string child_out = tmp.file("child.out");
  const pid_t pid = testing::spawn_self(
      "[.trainer_child]",
      {"EMBER_TRAINER_CHILD_CONFIG=" + config_path, "EMBER_NUM_THREADS=" + std::to_string(num_threads())}, child_out);

  // SIGTERM as soon as epoch 2 has made its first step: the child is then inside epoch 2.
  const std::regex epoch2_progress(R"(epoch 2/2 .*steps)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  bool signalled = false, exited = false;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    const std::string log = run_dir + "/log.txt";  // appears once the child has started the run
    if (fs::exists(log) && std::regex_search(read_text(log), epoch2_progress)) {
      ::kill(pid, SIGTERM);
      signalled = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!exited) {
    if (!signalled) ::kill(pid, SIGKILL);
    REQUIRE(::waitpid(pid, &status, 0) == pid);
  }
  INFO("child output:\n" << read_text(child_out));
  REQUIRE(signalled);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 128 + SIGTERM);

  // Stopped inside epoch 2: last.ckpt holds epoch 1 done and the sampler's position in epoch 2.
  const Checkpoint ck = load_checkpoint(run_dir + "/checkpoints/last.ckpt");
  CHECK(ck.epoch == 1);
  CHECK(ck.sampler_position > 0);
  CHECK(ck.sampler_position < 96);
  CHECK(ck.global_step == 6 + ck.sampler_position / 16);
  CHECK(read_metrics(run_dir).size() == 1);
  const RunSummary stopped = read_summary(run_dir);
  CHECK(stopped.stop_reason == "signal");
  CHECK(stopped.epochs_run == 1);
  CHECK_THAT(read_text(run_dir + "/log.txt"),
             Catch::Contains("received SIGTERM: wrote checkpoints/last.ckpt at epoch 2 step " +
                             std::to_string(ck.sampler_position / 16) + "; resume with checkpoint.resume=auto"));

  c.checkpoint.resume = "auto";
  const TrainOutcome resumed = Trainer(c).run();
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.summary.epochs_run == 2);
  CHECK(resumed.summary.stop_reason == "completed");

  ExperimentConfig straight = c;
  straight.checkpoint.resume = "";
  straight.output.run_dir = tmp.file("straight");
  straight.output.log_interval = 1e6;
  REQUIRE(Trainer(straight).run().exit_code == 0);

  require_same_metrics(read_metrics(straight.output.run_dir), read_metrics(run_dir));
  require_same_checkpoint(straight.output.run_dir + "/checkpoints/last.ckpt", run_dir + "/checkpoints/last.ckpt");
  CHECK(read_summary(run_dir).best_test_acc == read_summary(straight.output.run_dir).best_test_acc);
}

// ---- the pieces ----

TEST_CASE("trainer: resolve_run_dir uses output.run_dir, else a fresh timestamped directory", "[cpu][train]") {
  testing::TempDir tmp;
  ExperimentConfig c;
  c.name = "exp_1";
  c.output.run_dir = tmp.file("explicit");
  CHECK(resolve_run_dir(c) == tmp.file("explicit"));
  c.output.run_dir = "";
  c.output.dir = tmp.str();
  const std::string a = resolve_run_dir(c);
  CHECK(fs::path(a).parent_path() == fs::path(tmp.str()));
  CHECK(std::regex_match(fs::path(a).filename().string(), std::regex(R"(exp_1-\d{8}-\d{6})")));
  fs::create_directories(a);
  fs::create_directories(a + "-2");
  // The same second again: the next free suffix (unless the clock moved on meanwhile).
  const std::string b = resolve_run_dir(c);
  CHECK(b != a);
  CHECK(!fs::exists(b));
  if (fs::path(b).filename().string().substr(0, fs::path(a).filename().string().size()) ==
      fs::path(a).filename().string())
    CHECK(b == a + "-3");
}

TEST_CASE("trainer: config.json with provenance parses back to the same config", "[cpu][train]") {
  ExperimentConfig c;
  c.name = "prov";
  c.optim.lr = 0.123;
  c.early_stop.target_accuracy = 0.9;
  c.output.run_dir = "runs/prov-1";
  const std::string text = config_json_with_provenance(c, {"optim.lr=0.123"}, "/x/last.ckpt");
  ExperimentConfig rerun = c;
  rerun.output.run_dir = "";  // running the file again starts a new run, not refused by this one
  CHECK(parse_config(text) == rerun);
  const auto j = nlohmann::json::parse(text);
  CHECK(j["provenance"]["resumed_from"] == "/x/last.ckpt");
  CHECK(j["provenance"]["overrides"][0] == "optim.lr=0.123");
}

TEST_CASE("trainer: metrics lines up to an epoch survive a resume, a torn last line is dropped", "[cpu][train]") {
  testing::TempDir tmp;
  const std::string path = tmp.file("metrics.jsonl");
  std::string note;
  CHECK(metrics_lines_up_to(path, 5, note).empty());  // no file yet
  {
    std::ofstream f(path);
    f << "{\"epoch\":1,\"x\":1}\n\n{\"epoch\":2,\"x\":2}\n{\"epoch\":3,\"x\":3}\n{\"epoch\":4,\"tra";
  }
  const auto kept = metrics_lines_up_to(path, 2, note);
  CHECK(kept == std::vector<std::string>({"{\"epoch\":1,\"x\":1}", "{\"epoch\":2,\"x\":2}"}));
  CHECK_THAT(note, Catch::Contains("line 5"));
  {
    std::ofstream f(path);
    f << "{\"epoch\":1}\nnot json\n{\"epoch\":2}\n";
  }
  CHECK_THROWS_WITH(metrics_lines_up_to(path, 9, note), Catch::Contains(path) && Catch::Contains("line 2"));
}

TEST_CASE("trainer: epoch checkpoints are pruned to keep_last and to the resumed epoch", "[cpu][train]") {
  testing::TempDir tmp;
  for (int e : {1, 2, 3, 5, 10}) testing::write_file(tmp.file("epoch_" + std::to_string(e) + ".ckpt"), {1});
  testing::write_file(tmp.file("epoch_x.ckpt"), {1});  // not ours: never touched
  testing::write_file(tmp.file("last.ckpt"), {1});
  CHECK(epoch_checkpoints(tmp.str()) == std::vector<int64_t>({1, 2, 3, 5, 10}));
  CHECK(prune_epoch_checkpoints(tmp.str(), 0, 100).empty());
  CHECK(prune_epoch_checkpoints(tmp.str(), 0, 5) == std::vector<int64_t>({10}));
  CHECK(prune_epoch_checkpoints(tmp.str(), 2, 5) == std::vector<int64_t>({1, 2}));
  CHECK(epoch_checkpoints(tmp.str()) == std::vector<int64_t>({3, 5}));
  CHECK(fs::exists(tmp.file("epoch_x.ckpt")));
  CHECK(fs::exists(tmp.file("last.ckpt")));
}

TEST_CASE("trainer: run state round-trips through checkpoint metadata exactly", "[cpu][train]") {
  RunState s;
  s.train_seconds = 0.1 + 0.2;  // not representable in few digits
  s.train_images = 123456789012;
  s.total_seconds = 1.0 / 3.0;
  s.time_to_target = 2.0 / 7.0;
  s.best_acc = 0.9312;
  s.best_epoch = 7;
  s.stopper = {0.9312, 7, 2, 1, 5};
  s.early_stop_rule = "target";
  s.early_stop_reason = "target_accuracy 0.9000 reached for 2 consecutive epochs (epochs 6-7)";
  s.partial.loss_sum = 1234.5678901234567;
  s.partial.images = 96;
  s.partial.steps = 3;
  s.partial.seconds = 0.7;
  s.partial.lr = 0.0123456789;
  s.partial.phases.seconds = {0.01, 0.0, 0.2, 0.3, 0.04};
  s.partial.phases.steps = 3;
  const auto meta = s.to_metadata();
  const RunState r = RunState::from_metadata(meta, "x.ckpt");
  CHECK(r.train_seconds == s.train_seconds);
  CHECK(r.train_images == s.train_images);
  CHECK(r.total_seconds == s.total_seconds);
  CHECK(r.time_to_target == s.time_to_target);
  CHECK(r.best_acc == s.best_acc);
  CHECK(r.best_epoch == s.best_epoch);
  CHECK(r.stopper == s.stopper);
  CHECK(r.early_stop_rule == s.early_stop_rule);
  CHECK(r.early_stop_reason == s.early_stop_reason);
  CHECK(r.partial.loss_sum == s.partial.loss_sum);
  CHECK(r.partial.images == 96);
  CHECK(r.partial.steps == 3);
  CHECK(r.partial.lr == s.partial.lr);
  CHECK(r.partial.phases.seconds == s.partial.phases.seconds);
  CHECK(r.partial.phases.steps == 3);

  RunState none;
  CHECK_FALSE(RunState::from_metadata(none.to_metadata(), "y").time_to_target.has_value());
  auto broken = meta;
  broken.erase("epoch_loss_sum");
  CHECK_THROWS_WITH(RunState::from_metadata(broken, "z.ckpt"),
                    Catch::Contains("z.ckpt") && Catch::Contains("epoch_loss_sum"));
  broken = meta;
  broken["train_images"] = "12x";
  CHECK_THROWS_WITH(RunState::from_metadata(broken, "z.ckpt"), Catch::Contains("train_images"));
}
