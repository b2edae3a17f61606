#pragma once
// Trainer: runs one experiment described by an ExperimentConfig in a run directory.
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
#include <string>
#include <vector>

#include <ember/train/config.h>
#include <ember/train/metrics.h>

namespace ember::train {

struct TrainOutcome {
  std::string run_dir;
  RunSummary summary;
  /// 0: finished (all epochs or an early stop); 128 + signal number after SIGTERM/SIGINT.
  int exit_code = 0;
};

class Trainer {
 public:
  /// `overrides`: the command-line overrides already applied to `config`, recorded in config.json.
  explicit Trainer(ExperimentConfig config, std::vector<std::string> overrides = {});
  /// Creates (or, for resume, reopens) the run directory, trains, writes the summary. Errors
  /// (unreadable data, unwritable directory, bad checkpoint) throw ember::Error; earlier
  /// checkpoints and metrics are left intact.
  TrainOutcome run();

 private:
  ExperimentConfig config_;
  std::vector<std::string> overrides_;
};

/// output.run_dir, or output.dir/<name>-<YYYYmmdd-HHMMSS> (local time; "-2", "-3", ... appended
/// when that directory already exists).
std::string resolve_run_dir(const ExperimentConfig& config);

}  // namespace ember::train
