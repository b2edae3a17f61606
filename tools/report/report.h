#pragma once
// ember-report's library (not part of libember): reads run directories and writes a Markdown table
// and SVG plots.
#include <map>
#include <string>
#include <vector>

#include <ember/train/metrics.h>

namespace ember::report {

using train::EpochMetrics;
using train::RunSummary;

/// A run directory as ember-report sees it.
struct RunRecord {
  std::string dir;  // as given
  std::string label;  // summary.name, made unique with the directory's name when two runs share it
  RunSummary summary;
  std::vector<EpochMetrics> epochs;
  /// dir/config.json flattened ("optim.lr" -> "0.1", "precision" -> "bf16"; provenance left out),
  /// empty when the run has none.
  std::map<std::string, std::string> config;
};

/// Reads dir/summary.json, dir/metrics.jsonl and, when present, dir/config.json. A missing or malformed file is an
/// error naming it (and the line for metrics). A run without summary.json (still running, or killed) is read from
/// metrics.jsonl alone, its summary derived and stop_reason "incomplete".
RunRecord read_run(const std::string& dir);
/// read_run for each directory, in order, then labels made unique: a label two runs share gets
/// " (<directory name>)" appended (or " (<dir as given>)", then " #k", when that does not separate them).
std::vector<RunRecord> read_runs(const std::vector<std::string>& dirs);

/// The run's value of config key `key` ("precision", "optim.lr", "resolved.global_batch_size"), or
/// "?" when its config.json has none.
std::string config_value(const RunRecord& r, const std::string& key);

/// Runs grouped by their value of config key `key` (--by), groups in the order of the values
/// (numerically when every value is a number), runs in the order given within a group. Unless
/// some run's config has the key, an error naming it and the keys there are.
struct RunGroup {
  std::string value;
  std::vector<const RunRecord*> runs;
};
std::vector<RunGroup> group_runs(const std::vector<RunRecord>& runs, const std::string& key);
/// The table of --by KEY: | KEY | runs | best acc (mean) | best acc (min-max) | images/s (mean) |
/// epoch time (s, mean) | GPU busy (mean, when measured) |, one row per group.
std::string group_table(const std::vector<RunRecord>& runs, const std::string& key);

/// The mean of the run's epochs' gpu_util_percent over the epochs that have it; NaN when none has.
double mean_gpu_util(const RunRecord& r);

/// True unless the run has no summary.json (its device count, world_size, is then unknown).
bool device_count_known(const RunRecord& r);

/// `v` with `decimals` decimals; "-" for NaN and infinities.
std::string fixed(double v, int decimals);
/// `s` fit for a Markdown table cell: '|' escaped, newlines turned into spaces.
std::string cell_text(const std::string& s);
/// A Markdown table, every column padded to its widest cell (so it reads on a terminal too);
/// right_aligned columns get "---:" in the separator row. Every row has header.size() cells.
std::string render_table(const std::vector<std::string>& header, const std::vector<bool>& right_aligned,
                         const std::vector<std::vector<std::string>>& rows);
/// Creates out_dir (and its parents); an error naming it when that fails or it is not a directory.
void make_report_dir(const std::string& out_dir);

/// The table: | run | device | devices | epochs | best acc | epoch time (s) | images/s | speedup |
/// efficiency |. Epoch time is the mean epoch_seconds; images/s the summary's. Speedup and
/// parallel efficiency are relative to the run with the fewest devices (ties: the first given):
/// speedup = images/s / baseline images/s, efficiency = speedup / (devices / baseline devices);
/// both columns show "-" while every run has the same device count.
/// With `by`: a column of that config key's value after "run". A "GPU busy" column (mean_gpu_util)
/// before speedup when a run measured its GPU.
std::string markdown_table(const std::vector<RunRecord>& runs, const std::string& by = "");

/// A self-contained SVG line chart: one polyline per series over x = epoch, axes with ticks and
/// labels, a legend. Series with no points are skipped.
struct Series {
  std::string label;
  std::vector<double> x, y;
};
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series);
/// A bar chart (throughput per run).
std::string svg_bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& labels,
                          const std::vector<double>& values);

/// Writes out_dir/report.md (the table and the plots linked), loss.svg (train and test loss per
/// epoch, per run), accuracy.svg (test accuracy per epoch), throughput.svg (images/s per run),
/// accuracy_time.svg (test accuracy over wall time: training and evaluation seconds summed to each
/// epoch's end, per run), when a run trained in fp16 (metrics with loss_scale) loss_scale.svg
/// (log2 of the loss scale per epoch; report.md also gives each such run's last scale and skipped
/// steps), and when a run measured its GPU (gpu_util_percent) gpu.svg (utilisation per epoch; the
/// table then has a "GPU busy" column); creates out_dir. With `by` (a config key): the table has a
/// column of it, the runs ordered by group, and report.md the group_table; the plots' labels carry
/// "KEY=value". Returns the table (and, with `by`, the group table after it).
std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir, const std::string& by = "");
/// The names of the files write_report writes for these runs, in the order it lists them:
/// report.md, loss.svg, accuracy.svg, throughput.svg, loss_scale.svg when a run trained in fp16,
/// accuracy_time.svg, and gpu.svg when a run measured its GPU.
std::vector<std::string> report_files(const std::vector<RunRecord>& runs);

}  // namespace ember::report
