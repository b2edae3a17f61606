#pragma once
// Trainer: trains a model in a run directory, from a user's own parts (model, optimizer,
// schedule, loaders; TrainerParts + TrainerOptions) or from an ExperimentConfig (ember-train),
// which builds those parts (make_trainer_parts, trainer_options) and takes the same path.
//
//   auto par = train::start_parallel("auto", {});             // device; under a launcher, DDP
//   train::TrainerParts parts;
//   parts.parallel = par;
//   parts.model = my_model;
//   parts.optimizer = std::make_unique<optim::SGD>(my_model->parameters(), optim::SGDOptions{.lr = 0.05});
//   parts.train_loader = ...; parts.test_loader = ...;        // batches on par.device
//   train::TrainerOptions opts;
//   opts.epochs = 5;
//   opts.output.run_dir = "runs/mine";
//   train::Trainer(std::move(parts), opts).run();                // docs/training.md
//
//   <run_dir>/config.json     the resolved config + "provenance" (git commit, overrides, start time, host)
//   <run_dir>/metrics.jsonl   one EpochMetrics per epoch (train/metrics.h)
//   <run_dir>/summary.json    a RunSummary, rewritten after every epoch and at the end
//   <run_dir>/log.txt         everything printed, plus progress lines at output.log_interval
//   <run_dir>/checkpoints/    last.ckpt (every epoch), best.ckpt (each new best, with keep_best),
//                             epoch_N.ckpt (every_epochs, the newest keep_last kept)
//
// The loop per epoch: train (phase timers around data wait, copy, forward, backward, optimizer
// step; progress bar), evaluate on the test split, append metrics, checkpoint, early-stop check.
// SIGTERM/SIGINT: the current step finishes, last.ckpt is written (mid-epoch: the sampler position
// is saved, so resume continues that epoch), and run() returns with stop_reason "signal".
//
// parallel.mode (train/parallel_setup.h): dp wraps the model in DataParallel; ddp runs one process
// per device under a launcher, each on its DistributedSampler share, with gradients averaged by
// DistributedDataParallel. Under ddp rank 0 alone writes the run directory (the others learn of a
// failed write at once), every rank resumes from its checkpoints, train loss, images/s and test
// accuracy are over all ranks, and a stop signal to any rank stops all after the same step.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/data/dataloader.h>
#include <ember/layers/module.h>
#include <ember/optim/optimizer.h>
#include <ember/optim/schedule.h>
#include <ember/train/config.h>
#include <ember/train/metrics.h>
#include <ember/train/parallel_setup.h>

namespace ember::train {

class StopSignalGuard;

struct TrainOutcome {
  std::string run_dir;
  RunSummary summary;
  /// 0: finished (all epochs or an early stop); 128 + signal number after SIGTERM/SIGINT.
  int exit_code = 0;
};

/// What TrainerOptions::on_step sees after each batch.
struct StepInfo {
  int64_t epoch = 0;  // 1-based
  int64_t batch = 0;  // 1-based, within the epoch
  int64_t global_step = 0;  // optimizer steps so far (including skipped ones)
  int64_t batch_size = 0;
  bool optimizer_stepped = false;  // this batch ended an optimizer step
  /// The batch's loss: 0-d, on the device. Reading it (item) synchronises the device.
  const Tensor* loss = nullptr;
};

/// When TrainerParts::schedule steps: after every optimizer step (the default, and what
/// ember-train's schedules expect), or once after every epoch's training pass (a schedule written
/// in epochs, as torch's StepLR(step_size=1) is usually stepped).
enum class ScheduleInterval { step, epoch };

/// The objects of a run. The trainer moves the model to parallel.device (and to channels-last
/// with TrainerOptions::channels_last) in place, so an optimizer built over its parameters before
/// stays valid, and wraps it per parallel.mode (DataParallel, DistributedDataParallel).
struct TrainerParts {
  /// From start_parallel(); the default is one process on the CPU.
  ParallelRun parallel;
  /// The plain model: what checkpoints hold and the optimizer steps.
  std::shared_ptr<layers::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  /// Stepped once per optimizer step, or per epoch (schedule_interval); nullptr: none.
  std::unique_ptr<optim::LRScheduler> schedule;
  ScheduleInterval schedule_interval = ScheduleInterval::step;
  /// Batches of (input, class index). Under ddp each loader should read this rank's share
  /// (data::DistributedSampler, for the test loader with shuffle = false: the trainer then counts
  /// every test image once). Batches on another device are copied (and timed as h2d).
  std::unique_ptr<data::DataLoader> train_loader, test_loader;
  /// The loss of a batch: (model output, target) -> 0-d. Empty: layers::cross_entropy. Test
  /// accuracy is argmax(output, 1) == target.
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss;
  /// Lines the trainer prints (and logs) after its first: what building the parts decided
  /// (make_trainer_parts: how optim.lr_scaling set the learning rate).
  std::vector<std::string> notes;
};

/// How the trainer runs the parts; each field means what its config key (docs/config.md) means.
struct TrainerOptions {
  std::string name = "run";  // names the run directory (output.dir/<name>-<time>) and the log
  /// Begins the trainer's lines ("ember-train: ...").
  std::string program = "ember-train";
  /// false: no run directory (no config.json, metrics.jsonl, summary.json or log.txt; the lines
  /// go to stdout only), and checkpoints only where checkpoint_dir says (none when it is "").
  bool write_run_dir = true;
  /// The checkpoints' folder; "": <run directory>/checkpoints. checkpoint.resume "auto" looks
  /// for last.ckpt here.
  std::string checkpoint_dir;
  int64_t epochs = 10;
  Precision precision = Precision::fp32;
  bool channels_last = false;  // memory_format channels_last
  int64_t accumulation_steps = 1;  // train.accumulation_steps
  NonFinitePolicy on_nonfinite = NonFinitePolicy::stop;  // train.on_nonfinite
  double clip_grad_norm = 0;  // optim.clip_grad_norm
  /// train.cuda_graphs: capture one training step as a CUDA graph and replay it for every later
  /// batch of the same shape (docs/cuda_graphs.md); checked when the Trainer starts.
  bool cuda_graphs = false;
  EarlyStopConfig early_stop;
  CheckpointConfig checkpoint;
  OutputConfig output;
  /// bucket_cap_mb under ddp (the mode and devices are in TrainerParts::parallel).
  ParallelConfig parallel;
  /// With enabled and a run directory: profile/trace.json and profile/ops.md (docs/profiling.md).
  ProfileConfig profile;
  /// Recorded in checkpoints; a resume from a checkpoint of another model or dataset is an error.
  std::string model_name = "model", dataset_name = "data";
  /// What config.json holds, given the checkpoint the run resumes from ("" when none). Empty:
  /// these options in the config's form (model.name and data.dataset the names above).
  std::function<std::string(const std::string& resumed_from)> config_json;
  /// Called on every rank after each batch (after its optimizer step, if it ended one).
  std::function<void(const StepInfo&)> on_step;
  /// Called on every rank after each epoch's metrics line and checkpoints (metrics over all ranks).
  std::function<void(const EpochMetrics&)> on_epoch;
};

class Trainer {
 public:
  /// A user's parts. Checked here: model, optimizer and both loaders are set.
  Trainer(TrainerParts parts, TrainerOptions options);
  /// An experiment: builds the parts from `config` (make_trainer_parts: data files checked,
  /// device chosen, under ddp the process group joined, data read, model initialised) and its
  /// options (trainer_options). `overrides`: the command-line overrides already applied to
  /// `config`, recorded in config.json. SIGTERM/SIGINT are caught from here on.
  explicit Trainer(const ExperimentConfig& config, std::vector<std::string> overrides = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  /// Creates (or, for resume, reopens) the run directory, trains, writes the summary. Errors
  /// (unreadable data, unwritable directory, bad checkpoint) throw ember::Error; earlier
  /// checkpoints and metrics are left intact. Once per Trainer.
  TrainOutcome run();

 private:
  Trainer(std::unique_ptr<StopSignalGuard> guard, const ExperimentConfig& config,
          const std::vector<std::string>& overrides);
  std::unique_ptr<StopSignalGuard> guard_;
  TrainerParts parts_;
  TrainerOptions options_;
  bool ran_ = false;
};

/// The parts an experiment describes, seeded with config.seed (see Trainer(const ExperimentConfig&)).
TrainerParts make_trainer_parts(const ExperimentConfig& config);
/// The options an experiment describes; config.json records `config` with `overrides`.
TrainerOptions trainer_options(const ExperimentConfig& config, const std::vector<std::string>& overrides = {});

/// output.run_dir, or output.dir/<name>-<YYYYmmdd-HHMMSS> (local time; "-2", "-3", ... appended
/// when that directory already exists).
std::string resolve_run_dir(const std::string& name, const OutputConfig& output);
std::string resolve_run_dir(const ExperimentConfig& config);

}  // namespace ember::train
