// train/ on a GPU: phase timers measured with CUDA events, whole ember-train runs on cuda:0 (the
// device-resident loader and the host loader with pinned buffers and side-stream copies) against
// the same run on the CPU, and a GPU run resumed from an epoch checkpoint against the
// uninterrupted one.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/stream.h>
#include <ember/kernels/factory.h>
#include <ember/serialize/checkpoint.h>
#include <ember/train/config.h>
#include <ember/train/metrics.h>
#include <ember/train/phase_timer.h>
#include <ember/train/trainer.h>
#include "support/bitwise.h"
#include "support/reference.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using namespace ember::serialize;

namespace {

const Device kGpu = Device::cuda(0);

// cifar_cnn on 256 synthetic training images (4 steps of 64), 128 test images, one epoch.
ExperimentConfig small_run(const std::string& device, const std::string& run_dir, bool resident) {
  ExperimentConfig c;
  c.name = "cuda-small";
  c.device = device;
  c.seed = 5;
  c.epochs = 1;
  c.model.name = "cifar_cnn";
  c.data.dataset = "synthetic";
  c.data.limit_train = 256;
  c.data.limit_test = 128;
  c.data.batch_size = 64;
  c.data.test_batch_size = 64;
  c.data.workers = 1;
  c.data.resident = resident;
  c.optim.name = "sgd";
  c.optim.lr = 0.02;
  c.optim.momentum = 0.9;
  c.output.run_dir = run_dir;
  c.output.log_interval = 1e6;
  return c;
}

// Every entry of two state dicts: bit for bit when `bitwise`, else within rtol (plus atol).
void check_state(const StateDict& a, const StateDict& b, bool bitwise, double rtol, double atol, const char* what) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(what << " entry " << name << (bitwise ? " (bitwise)" : " (close)"));
    REQUIRE(b.count(name) == 1);
    if (bitwise) {
      const bool same = ember::testing::bytes_of(t) == ember::testing::bytes_of(b.at(name));
      CHECK(same);
    } else {
      ember::testing::check_close(b.at(name), ember::testing::to_f64(t), rtol, atol);
    }
  }
}

}  // namespace

TEST_CASE("cuda phase timers: events time the GPU's work and finish_epoch waits for them", "[cuda][train]") {
  // 4096^2 f32 matmuls: ~0.14 TFLOP each, so every step queues milliseconds of GPU work that the
  // host launches in microseconds. Event timing thus reports most of the wall time, while timing
  // the same scopes on the host (the launches only) would report a few percent of it. b is
  // scaled by 1/sqrt(4096) so the chained products stay of order one.
  constexpr int64_t n = 4096;
  PhaseTimers timers(kGpu);
  const Tensor a = randn({n, n}, {.dtype = DType::f32, .device = kGpu}),
               b = randn({n, n}, {.dtype = DType::f32, .device = kGpu}) * (1.0 / 64.0);
  auto chain = [&] {
    Tensor c = a;
    for (int i = 0; i < 4; ++i) c = matmul(c, b);
    return c;
  };
  chain();  // warm-up: cuBLAS handle, workspace and the allocator's blocks exist before timing
  synchronize(kGpu);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < 3; ++step) {
    timers.begin(Phase::Forward);
    chain();
    timers.end(Phase::Forward);
    {
      auto scope = timers.scope(Phase::Backward);
      matmul(a, b);
    }
    timers.step_done();
  }
  // No synchronize before finish_epoch: most of the work is still queued, so it must wait for the
  // events itself (reading an incomplete one fails with cudaErrorNotReady).
  const PhaseTotals t = timers.finish_epoch();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(t.steps == 3);
  CHECK(t[Phase::Forward] > 0.0);
  CHECK(t[Phase::Backward] > 0.0);
  CHECK(t[Phase::Forward] + t[Phase::Backward] <= wall);
  CHECK(t[Phase::Forward] + t[Phase::Backward] >= 0.5 * wall);
  CHECK(t[Phase::OptimizerStep] == 0.0);
  // finish_epoch resets.
  CHECK(timers.finish_epoch().steps == 0);
}

TEST_CASE("cuda trainer: resident and host-loader runs on cuda:0 train like the same run on the CPU", "[cuda][train]") {
  ember::testing::TempDir dir;
  const TrainOutcome cpu = Trainer(small_run("cpu", dir.file("cpu"), false)).run();
  REQUIRE(cpu.exit_code == 0);
  const auto c = read_metrics_file(dir.file("cpu") + "/metrics.jsonl");
  REQUIRE(c.size() == 1);
  for (const bool resident : {true, false}) {
    INFO((resident ? "resident loader" : "host loader (pinned buffers, copies on a side stream)"));
    const std::string run = dir.file(resident ? "gpu-resident" : "gpu-host");
    const TrainOutcome gpu = Trainer(small_run("cuda:0", run, resident)).run();
    REQUIRE(gpu.exit_code == 0);
    CHECK(gpu.summary.device == "cuda:0");
    const auto g = read_metrics_file(run + "/metrics.jsonl");
    REQUIRE(g.size() == 1);
    CHECK(g[0].forward_seconds > 0.0);
    CHECK(g[0].backward_seconds > 0.0);
    CHECK(g[0].optimizer_seconds > 0.0);
    // Same seed, same batches (the resident loader gives the host loader's batches up to f32
    // rounding), same initial parameters: the runs differ only in f32 summation order (cuDNN
    // vs im2col + GEMM), ~1e-6 relative per op, carried through four small SGD steps (lr 0.02).
    // 1e-3 relative leaves that a wide margin, while a wrong GPU kernel, a batch read before its
    // copy landed or a stale pinned buffer moves the losses by far more. The accuracy may differ
    // by one of the 128 test images whose two best logits tie within that rounding.
    CHECK(std::isfinite(g[0].train_loss));
    CHECK(std::fabs(g[0].train_loss - c[0].train_loss) <= 1e-3 * std::fabs(c[0].train_loss));
    CHECK(std::fabs(g[0].test_loss - c[0].test_loss) <= 1e-3 * std::fabs(c[0].test_loss));
    CHECK(std::fabs(g[0].test_acc - c[0].test_acc) <= 1.0 / 128 + 1e-12);
  }
}

TEST_CASE("cuda trainer: a run on cuda:0 resumed from an epoch checkpoint ends like the uninterrupted run",
          "[cuda][train]") {
  // The checkpoint carries GPU parameters, momentum buffers and BatchNorm statistics (device ->
  // host on save, host -> device on resume), the default generator's offset (dropout draws on
  // the GPU), the schedule and the host loader's sampler position.
  ember::testing::TempDir dir;
  auto config = [&](const std::string& run) {
    ExperimentConfig c = small_run("cuda:0", dir.file(run), false);
    c.epochs = 3;
    c.model.dropout = 0.25;
    c.schedule.name = "cosine";
    c.checkpoint.keep_last = 0;
    return c;
  };
  REQUIRE(Trainer(config("a")).run().exit_code == 0);
  REQUIRE(Trainer(config("b")).run().exit_code == 0);
  std::filesystem::copy_file(dir.file("a") + "/checkpoints/epoch_1.ckpt", dir.file("epoch_1.ckpt"));
  std::filesystem::copy_file(dir.file("a") + "/checkpoints/last.ckpt", dir.file("straight_last.ckpt"));
  ExperimentConfig r = config("a");
  r.checkpoint.resume = dir.file("epoch_1.ckpt");
  REQUIRE(Trainer(r).run().exit_code == 0);

  const Checkpoint a = load_checkpoint(dir.file("straight_last.ckpt"));
  const Checkpoint b = load_checkpoint(dir.file("b") + "/checkpoints/last.ckpt");
  const Checkpoint resumed = load_checkpoint(dir.file("a") + "/checkpoints/last.ckpt");
  CHECK(resumed.epoch == 3);
  CHECK(resumed.global_step == a.global_step);
  CHECK(resumed.sampler_position == a.sampler_position);
  CHECK(resumed.rng == a.rng);
  check_state(a.scheduler, resumed.scheduler, true, 0, 0, "scheduler");
  check_state(a.sampler, resumed.sampler, true, 0, 0, "sampler");
  // cuDNN may pick non-deterministic (atomic) backward algorithms: when two uninterrupted runs
  // agree bit for bit, the resumed run must too; otherwise as closely as f32 rounding carried
  // through 12 SGD steps of lr <= 0.02 allows (the CPU twin of this test is bitwise).
  bool deterministic = true;
  for (const auto& [name, t] : a.model)
    deterministic = deterministic && ember::testing::bytes_of(t) == ember::testing::bytes_of(b.model.at(name));
  check_state(a.model, resumed.model, deterministic, 1e-4, 1e-6, "model");
  check_state(a.optimizer, resumed.optimizer, deterministic, 1e-4, 1e-6, "optimizer");
}
