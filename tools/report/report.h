#pragma once
// ember-report's library (not part of libember): reads run directories and writes a Markdown table
// and SVG plots.
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
};

/// Reads dir/summary.json and dir/metrics.jsonl. A missing or malformed file is an error naming
/// it (and the line for metrics). A run without summary.json (still running, or killed) is read
/// from metrics.jsonl alone, its summary derived and stop_reason "incomplete".
RunRecord read_run(const std::string& dir);
/// read_run for each directory, in order, then labels made unique: a label two runs share gets
/// " (<directory name>)" appended (or " (<dir as given>)", then " #k", when that does not separate them).
std::vector<RunRecord> read_runs(const std::vector<std::string>& dirs);

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
std::string markdown_table(const std::vector<RunRecord>& runs);

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
/// epoch, per run), accuracy.svg (test accuracy per epoch), throughput.svg (images/s per run) and,
/// when a run trained in fp16 (metrics with loss_scale), loss_scale.svg (log2 of the loss scale per
/// epoch; report.md also gives each such run's last scale and skipped steps); creates out_dir.
/// Returns the table.
std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir);
/// The names of the files write_report writes for these runs, in the order it lists them:
/// report.md, loss.svg, accuracy.svg, throughput.svg, and loss_scale.svg when a run trained in fp16.
std::vector<std::string> report_files(const std::vector<RunRecord>& runs);

}  // namespace ember::report
