// train/ on a GPU: phase timers measured with CUDA events, and a whole ember-train run on cuda:0
// with the device-resident loader against the same run on the CPU.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>

#include "autograd/ops.h"
#include "core/stream.h"
#include "kernels/factory.h"
#include "support/temp_dir.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/phase_timer.h"
#include "train/trainer.h"

using namespace ember;
using namespace ember::train;

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

}  // namespace

TEST_CASE("cuda phase timers: event-timed forward lies between zero and the synchronized wall time",
          "[cuda][train]") {
  PhaseTimers timers(kGpu);
  Tensor a = randn({1024, 1024}, DType::f32, kGpu), b = randn({1024, 1024}, DType::f32, kGpu);
  synchronize(kGpu);
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < 3; ++step) {
    timers.begin(Phase::Forward);
    Tensor c = a;
    for (int i = 0; i < 8; ++i) c = matmul(c, b);  // ~17 GFLOP per step: milliseconds on any GPU
    timers.end(Phase::Forward);
    timers.step_done();
  }
  synchronize(kGpu);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const PhaseTotals t = timers.finish_epoch();
  CHECK(t.steps == 3);
  CHECK(t[Phase::Forward] > 0.0);
  CHECK(t[Phase::Forward] <= wall);
  CHECK(t[Phase::Backward] == 0.0);
  // finish_epoch resets.
  CHECK(timers.finish_epoch().steps == 0);
}

TEST_CASE("cuda trainer: a resident run on cuda:0 trains like the same run on the CPU", "[cuda][train]") {
  ember::testing::TempDir dir;
  const TrainOutcome gpu = Trainer(small_run("cuda:0", dir.file("gpu"), true)).run();
  const TrainOutcome cpu = Trainer(small_run("cpu", dir.file("cpu"), false)).run();
  REQUIRE(gpu.exit_code == 0);
  REQUIRE(cpu.exit_code == 0);
  CHECK(gpu.summary.device == "cuda:0");

  const auto g = read_metrics_file(dir.file("gpu") + "/metrics.jsonl");
  const auto c = read_metrics_file(dir.file("cpu") + "/metrics.jsonl");
  REQUIRE(g.size() == 1);
  REQUIRE(c.size() == 1);
  CHECK(g[0].forward_seconds > 0.0);
  CHECK(g[0].backward_seconds > 0.0);
  CHECK(g[0].optimizer_seconds > 0.0);
  // Same seed, same batches (the resident loader gives the host loader's batches up to f32
  // rounding), same initial parameters: the two runs differ only in f32 summation order (cuDNN
  // vs im2col + GEMM), ~1e-6 relative per op, carried through four small SGD steps (lr 0.02).
  // 1e-3 relative leaves that a wide margin, while a wrong GPU kernel moves the loss by far more.
  CHECK(std::isfinite(g[0].train_loss));
  CHECK(std::fabs(g[0].train_loss - c[0].train_loss) <= 1e-3 * std::fabs(c[0].train_loss));
}
