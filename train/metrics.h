#pragma once
// The records a run directory holds: metrics.jsonl (one EpochMetrics per line) and summary.json
// (one RunSummary). ember-train writes them, ember-report reads them.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ember::train {

/// One line of metrics.jsonl. Times in seconds; test_acc a fraction.
struct EpochMetrics {
  int64_t epoch = 0;
  double train_loss = 0, test_loss = 0, test_acc = 0;
  double epoch_seconds = 0;  // the training pass (not evaluation)
  double images_per_second = 0;  // training images / epoch_seconds
  double lr = 0;  // learning rate at the start of the epoch
  double eval_seconds = 0;
  // Phase times summed over the epoch (train/phase_timer.h).
  double data_wait_seconds = 0, h2d_seconds = 0, forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  // Whether the training loop copied batches to the device this epoch (a loader delivering them
  // elsewhere). ember's loaders deliver on the device (the copy overlapped inside the loader, its
  // wait part of data_wait_seconds), so there is no copy to time: the line then has no
  // h2d_seconds key rather than a 0 that looks measured. Reading: true when the key is present.
  bool h2d_copied = false;
  // Gradient all-reduce under DDP (parallel/reducer.h), rank 0's: time the backend spent in the
  // all-reduces, and the part of it the step waited for (not hidden behind backward). 0 otherwise.
  double comm_seconds = 0, comm_exposed_seconds = 0;
  // Mixed precision with fp16 (amp::GradScaler): the loss scale at the end of the epoch, and the
  // optimizer steps skipped in the epoch because a gradient was not finite. 0 otherwise.
  double loss_scale = 0, skipped_steps = 0;
  // train.on_nonfinite = "skip": optimizer steps not taken in the epoch because a training loss was
  // NaN or inf. 0 otherwise.
  double nonfinite_steps = 0;
  // Where the CPU went in the training pass (this process's part of it; docs/benchmarks.md, "CPU
  // training"): CPU time of the whole process, of it the data loader's worker threads, and the time
  // parallel_for callers waited for the thread pool's workers to finish their chunks.
  double cpu_seconds = 0, loader_cpu_seconds = 0, pool_wait_seconds = 0;
  // The GPU over the training pass, sampled by NVML at 10 Hz (train/gpu_monitor.h): mean
  // utilisation in percent (the share of time a kernel ran), the most memory in use (MB, 1e6
  // bytes; every process's), mean power in watts. Unset, and absent from the line, where nothing
  // measured them (a CPU run, a machine without NVML, a GPU that does not report power).
  std::optional<double> gpu_util_percent, gpu_memory_used_mb, gpu_power_watts;
  friend bool operator==(const EpochMetrics&, const EpochMetrics&) = default;
};

/// summary.json.
struct RunSummary {
  std::string name;
  std::string device;  // "cpu", "cuda:0", ...
  int64_t world_size = 1;  // devices (DataParallel) or processes (DDP) the run trained on
  /// Images per optimizer step over all processes (batch x processes x accumulation steps), and
  /// the learning rate the schedule starts from (optim.lr after optim.lr_scaling). 0 in a summary
  /// written before they were recorded.
  int64_t global_batch_size = 0;
  double lr = 0;
  /// Which restart of its job the run's latest session was (ember-run --max-restarts:
  /// EMBER_RESTART_COUNT); 0 for a first attempt, and in a summary written before it was recorded.
  int64_t restarts = 0;
  int64_t epochs_run = 0;  // epochs completed, including ones before a resume
  double best_test_acc = 0;
  int64_t best_epoch = 0;
  bool stopped_early = false;
  /// "completed" | "target_accuracy" | "patience" | "signal"
  std::string stop_reason = "completed";
  /// The early stopper's sentence, or "SIGTERM received: stopped after step N", or "".
  std::string stop_detail;
  double total_seconds = 0;  // wall time of training + evaluation, over all sessions of the run
  double images_per_second = 0;  // training images / training seconds, over the run
  /// Training seconds (cumulative) until the end of the first epoch with test_acc >= target.
  std::optional<double> time_to_target_seconds;
  std::optional<double> target_accuracy;
  friend bool operator==(const RunSummary&, const RunSummary&) = default;
};

/// One JSON object on one line (no newline), keys in the order of the struct.
std::string to_json_line(const EpochMetrics& m);
/// The numbers of that line after "epoch", as (key, value) in the line's order: what it holds, no
/// more (no h2d_seconds without h2d_copied, no unset gpu_* key).
std::vector<std::pair<const char*, double>> metric_values(const EpochMetrics& m);
/// Parses one metrics.jsonl line; errors name `source`, the line number, and the missing or
/// mistyped key. Unknown keys are ignored (newer writers may add some).
EpochMetrics parse_epoch_metrics(const std::string& line, const std::string& source, int64_t line_no);
/// Reads a whole metrics.jsonl (blank lines skipped).
std::vector<EpochMetrics> read_metrics_file(const std::string& path);

/// Pretty JSON (null for unset optionals).
std::string to_json(const RunSummary& s);
RunSummary parse_run_summary(const std::string& json_text, const std::string& source);

/// Writes `text` to `path` via "<path>.tmp" + rename, so readers never see half a file.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace ember::train
