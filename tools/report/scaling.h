#pragma once
// ember-report --scaling: runs of one experiment on different world sizes (1, 2, 4 ... processes
// or devices) side by side: epoch time, throughput, speedup, parallel efficiency, gradient
// communication (total and exposed), accuracy, and a verdict per run. docs/scaling.md explains how
// to read it.
#include <cstdint>
#include <string>
#include <vector>

#include "report/report.h"

namespace ember::report {

/// A run has its first epoch left out of the means (warm-up: allocator and cache growth, first
/// connections, autotuning) when it has at least this many epochs.
inline constexpr size_t kWarmupMinEpochs = 3;
/// A run is called communication-bound when exposed all-reduce time exceeds this share of its
/// epoch time (the same fifth as the input-bound verdict of train/phase_timer.h).
inline constexpr double kCommBoundShare = 0.2;

/// One row of the scaling table. Means are per epoch, over epochs first_epoch..last_epoch (the
/// epoch numbers of metrics.jsonl); NaN where a value does not exist (no epochs, no baseline).
struct ScalingRow {
  std::string label, device;
  int64_t world_size = 1;
  size_t epochs_trained = 0;  // epochs in metrics.jsonl
  std::string stop_reason;  // the summary's ("completed", "patience", "target", ...)
  int64_t first_epoch = 0, last_epoch = 0;
  size_t epochs_averaged = 0;  // 0: no epochs, the means are NaN
  double epoch_seconds = 0;  // mean epoch_seconds
  /// Training images / training seconds over the averaged epochs (each epoch's images =
  /// images_per_second * epoch_seconds); the summary's figure when there are no epochs.
  double images_per_second = 0;
  double images_per_epoch = 0;  // mean images per averaged epoch
  double speedup = 0;  // images_per_second / that of the first row (the smallest world)
  double efficiency = 0;  // speedup / (world_size / the first row's world_size)
  double comm_seconds = 0, comm_exposed_seconds = 0;  // means per epoch
  double exposed_share = 0;  // comm_exposed_seconds / epoch_seconds
  double hidden_fraction = 0;  // 1 - comm_exposed_seconds / comm_seconds; NaN when comm_seconds is 0
  double final_test_acc = 0;  // test_acc of the last epoch
  double best_test_acc = 0;  // the summary's
  /// Data-wait share of the step (sum of phases) over the averaged epochs, from the phase times.
  double data_wait_share = 0;
  /// "communication-bound: ...", the input-bound verdict of train/phase_timer.h, both ("; "), or
  /// "not communication- or input-bound (...)".
  std::string verdict;
};

/// The rows, sorted by world size (runs of one world size keep the order given). Errors: fewer
/// than two runs; a run without summary.json (its world size is unknown); all runs of one world
/// size (the message says which).
std::vector<ScalingRow> scaling_rows(const std::vector<RunRecord>& runs);

/// | run | world | device | epochs | epoch time (s) | images/s | speedup | efficiency | comm/epoch (s) |
/// exposed/epoch (s) | exposed share | hidden | final acc | best acc |
std::string scaling_table(const std::vector<ScalingRow>& rows);

/// What ember-report --scaling prints: the table, a warning first when the runs trained different
/// numbers of epochs or stopped for different reasons (their accuracies do not compare), the notes
/// under it (what the means cover, the baseline, a warning when the runs saw different numbers of
/// images per epoch) and a verdict per run.
std::string scaling_text(const std::vector<ScalingRow>& rows);

/// Writes out_dir/scaling.md (scaling_text, the plots linked), scaling.svg (speedup and the ideal
/// line over world size) and scaling-efficiency.svg (parallel efficiency in % and the ideal 100%);
/// creates out_dir. Returns scaling_text.
std::string write_scaling_report(const std::vector<RunRecord>& runs, const std::string& out_dir);

}  // namespace ember::report
