// ember-report --scaling (scaling.h): per-run means over the epochs after warm-up, speedup and
// efficiency against the smallest world, exposed and hidden communication, verdicts, and the
// scaling report files.
#include "report/scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include <ember/core/error.h>
#include <ember/train/phase_timer.h>

namespace fs = std::filesystem;

namespace ember::report {
namespace {

// Runs whose images per epoch differ from the baseline's by more than this are flagged: their
// images/s may count one process's images instead of all (or they trained on other data).
constexpr double kImagesPerEpochTolerance = 0.02;

std::string percent(double fraction) { return std::isfinite(fraction) ? fixed(100 * fraction, 1) + "%" : "-"; }

// The phase times of `epochs` summed, as the trainer's input-bound verdict sees them.
train::PhaseTotals phase_totals(const std::vector<EpochMetrics>& epochs) {
  train::PhaseTotals t;
  for (const EpochMetrics& e : epochs) {
    const double phases[train::kNumPhases] = {e.data_wait_seconds, e.h2d_seconds, e.forward_seconds, e.backward_seconds,
                                              e.optimizer_seconds};
    for (int p = 0; p < train::kNumPhases; ++p) t.seconds[p] += phases[p];
    ++t.steps;  // epochs here, not steps: verdict() only uses the seconds
  }
  return t;
}

std::string verdict(const ScalingRow& row, const train::PhaseTotals& phases) {
  std::vector<std::string> parts;
  if (row.exposed_share > kCommBoundShare) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "communication-bound: %.0f%% of the epoch waits for the gradient all-reduce; use a larger batch "
                  "per process or a faster link",
                  100 * row.exposed_share);
    parts.emplace_back(buf);
  }
  if (std::string input = phases.verdict(); !input.empty()) parts.push_back(std::move(input));
  if (parts.empty()) {
    std::string why = "not communication- or input-bound (";
    if (row.comm_seconds > 0) why += "exposed all-reduce " + percent(row.exposed_share) + " of the epoch, ";
    why += "data wait " + percent(row.data_wait_share) + " of the step)";
    parts.push_back(std::move(why));
  }
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += "; " + parts[i];
  return out;
}

ScalingRow row_of(const RunRecord& r) {
  ScalingRow row;
  row.label = r.label;
  row.device = r.summary.device;
  row.world_size = r.summary.world_size;
  row.epochs_trained = r.epochs.size();
  row.stop_reason = r.summary.stop_reason;
  row.best_test_acc = r.summary.best_test_acc;
  const size_t skip = r.epochs.size() >= kWarmupMinEpochs ? 1 : 0;
  const std::vector<EpochMetrics> kept(r.epochs.begin() + static_cast<std::ptrdiff_t>(skip), r.epochs.end());
  row.epochs_averaged = kept.size();
  if (kept.empty()) {
    row.epoch_seconds = row.images_per_epoch = row.comm_seconds = row.comm_exposed_seconds = NAN;
    row.exposed_share = row.hidden_fraction = row.final_test_acc = row.data_wait_share = NAN;
    row.images_per_second = r.summary.images_per_second;
    row.verdict = "no epochs recorded";
    return row;
  }
  row.first_epoch = kept.front().epoch;
  row.last_epoch = kept.back().epoch;
  row.final_test_acc = r.epochs.back().test_acc;
  double seconds = 0, images = 0, comm = 0, exposed = 0;
  for (const EpochMetrics& e : kept) {
    seconds += e.epoch_seconds;
    images += e.images_per_second * e.epoch_seconds;  // images_per_second = images / epoch_seconds
    comm += e.comm_seconds;
    exposed += e.comm_exposed_seconds;
  }
  const double n = static_cast<double>(kept.size());
  row.epoch_seconds = seconds / n;
  row.images_per_epoch = images / n;
  row.images_per_second = seconds > 0 ? images / seconds : NAN;
  row.comm_seconds = comm / n;
  row.comm_exposed_seconds = exposed / n;
  row.exposed_share = seconds > 0 ? exposed / seconds : NAN;
  row.hidden_fraction = comm > 0 ? 1 - exposed / comm : NAN;
  const train::PhaseTotals phases = phase_totals(kept);
  row.data_wait_share = phases.step_seconds() > 0 ? phases[train::Phase::DataWait] / phases.step_seconds() : NAN;
  row.verdict = verdict(row, phases);
  return row;
}

std::string epochs_cell(const ScalingRow& r) {
  if (r.epochs_averaged == 0) return "-";
  if (r.first_epoch == r.last_epoch) return std::to_string(r.first_epoch);
  return std::to_string(r.first_epoch) + "-" + std::to_string(r.last_epoch);
}

std::string seconds_cell(double s) { return fixed(s, s != 0 && std::abs(s) < 0.1 ? 3 : 2); }

}  // namespace

std::vector<ScalingRow> scaling_rows(const std::vector<RunRecord>& runs) {
  EMBER_CHECK(runs.size() >= 2, "--scaling compares runs on different world sizes: give two or more runs, got ",
              runs.size());
  std::set<int64_t> worlds;
  for (const RunRecord& r : runs) {
    EMBER_CHECK(device_count_known(r), "run '", r.dir,
                "' has no summary.json, so its world size is unknown: --scaling needs runs that wrote one (it "
                "appears after the first epoch)");
    EMBER_CHECK(r.summary.world_size >= 1, "run '", r.dir, "': summary.json has world_size ", r.summary.world_size,
                ", expected 1 or more");
    worlds.insert(r.summary.world_size);
  }
  EMBER_CHECK(worlds.size() >= 2, "--scaling compares runs on different world sizes, but all ", runs.size(),
              " runs trained on world size ", *worlds.begin(),
              ": give runs of 1, 2, 4 ... processes (ember-run --nproc-per-node N), or leave out --scaling");

  std::vector<ScalingRow> rows;
  for (const RunRecord& r : runs) rows.push_back(row_of(r));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ScalingRow& a, const ScalingRow& b) { return a.world_size < b.world_size; });
  const ScalingRow& base = rows.front();
  for (ScalingRow& row : rows) {
    const double ratio = static_cast<double>(row.world_size) / static_cast<double>(base.world_size);
    row.speedup = base.images_per_second > 0 ? row.images_per_second / base.images_per_second : NAN;
    row.efficiency = row.speedup / ratio;
  }
  return rows;
}

std::string scaling_table(const std::vector<ScalingRow>& rows) {
  const std::vector<std::string> header = {
      "run",           "world",   "device",     "epochs",         "epoch time (s)",
      "images/s",      "speedup", "efficiency", "comm/epoch (s)", "exposed/epoch (s)",
      "exposed share", "hidden",  "final acc",  "best acc"};
  std::vector<bool> right_aligned(header.size(), true);
  right_aligned[0] = right_aligned[2] = false;
  std::vector<std::vector<std::string>> cells;
  for (const ScalingRow& r : rows) {
    cells.push_back({cell_text(r.label), std::to_string(r.world_size), cell_text(r.device), epochs_cell(r),
                     seconds_cell(r.epoch_seconds), fixed(r.images_per_second, 0),
                     std::isfinite(r.speedup) ? fixed(r.speedup, 2) + "x" : "-", percent(r.efficiency),
                     seconds_cell(r.comm_seconds), seconds_cell(r.comm_exposed_seconds), percent(r.exposed_share),
                     percent(r.hidden_fraction), fixed(r.final_test_acc, 4), fixed(r.best_test_acc, 4)});
  }
  return render_table(header, right_aligned, cells);
}

std::string scaling_text(const std::vector<ScalingRow>& rows) {
  EMBER_CHECK(!rows.empty(), "scaling_text: no rows");
  const ScalingRow& base = rows.front();
  std::ostringstream os;
  os << scaling_table(rows) << "\n";
  // Early stopping (a target, patience) ends runs of different world sizes after different epochs:
  // their final and best accuracies, and their means over "the epochs listed", then compare unlike
  // things. Said before anything else, so it is not missed.
  bool unequal = false;
  for (const ScalingRow& r : rows)
    unequal = unequal || r.epochs_trained != base.epochs_trained || r.stop_reason != base.stop_reason;
  if (unequal) {
    os << "WARNING: the runs trained different numbers of epochs or stopped for different reasons (";
    for (size_t i = 0; i < rows.size(); ++i)
      os << (i ? "; " : "") << cell_text(rows[i].label) << ": " << rows[i].epochs_trained << " epochs, "
         << rows[i].stop_reason;
    os << "): their accuracies do not compare. For a scaling study give every run the same epochs with early "
          "stopping off (early_stop.target_accuracy=null early_stop.patience=0; docs/scaling.md).\n\n";
  }
  // One sentence a line: a Markdown paragraph when rendered, readable on a terminal too.
  os << "Means per epoch over the epochs listed (the first is left out as warm-up when a run has " << kWarmupMinEpochs
     << " or more).\n"
     << "images/s: training images of all processes / training seconds. speedup: images/s / that of '"
     << cell_text(base.label) << "' (world " << base.world_size << "); efficiency = speedup / world-size ratio.\n"
     << "comm: time the backend spent in gradient all-reduces; exposed: the part the step waited for "
     << "(exposed share: of the epoch time);\n"
     << "hidden = 1 - exposed / comm, the part overlapped with backward (- without communication).\n"
     << "final acc: test accuracy after the last epoch. How to read this: docs/scaling.md.\n";
  // A rate that counts one process's images shows as fewer images per epoch on larger worlds.
  std::string odd;
  for (const ScalingRow& r : rows) {
    if (!(base.images_per_epoch > 0) || !std::isfinite(r.images_per_epoch)) continue;
    if (std::abs(r.images_per_epoch / base.images_per_epoch - 1) > kImagesPerEpochTolerance)
      odd += (odd.empty() ? "" : ", ") + cell_text(r.label) + " " + fixed(r.images_per_epoch, 0);
  }
  if (!odd.empty())
    os << "\nWarning: the runs trained on different numbers of images per epoch (" << cell_text(base.label) << " "
       << fixed(base.images_per_epoch, 0) << "; " << odd
       << "): speedup compares images/s, so check that each run used the same data and that its images/s counts "
          "the images of all its processes.\n";
  os << "\nVerdicts:\n";
  for (const ScalingRow& r : rows)
    os << "- " << cell_text(r.label) << " (world " << r.world_size << "): " << r.verdict << "\n";
  return os.str();
}

std::string write_scaling_report(const std::vector<RunRecord>& runs, const std::string& out_dir) {
  const std::vector<ScalingRow> rows = scaling_rows(runs);
  make_report_dir(out_dir);
  const double base_world = static_cast<double>(rows.front().world_size);
  Series speedup{"speedup (measured)", {}, {}}, ideal{"ideal (linear)", {}, {}};
  Series efficiency{"parallel efficiency (measured)", {}, {}}, full{"ideal (100%)", {}, {}};
  for (const ScalingRow& r : rows) {
    const double w = static_cast<double>(r.world_size);
    speedup.x.push_back(w);
    speedup.y.push_back(r.speedup);
    efficiency.x.push_back(w);
    efficiency.y.push_back(100 * r.efficiency);
    if (ideal.x.empty() || ideal.x.back() != w) {  // one ideal point per world size
      ideal.x.push_back(w);
      ideal.y.push_back(w / base_world);
      full.x.push_back(w);
      full.y.push_back(100);
    }
  }
  const std::string text = scaling_text(rows);
  const std::string x_label = "world size (processes or devices)";
  const fs::path out(out_dir);
  train::write_file_atomic(
      (out / "scaling.svg").string(),
      svg_line_chart("Speedup vs world size (baseline: world " + std::to_string(rows.front().world_size) + ")", x_label,
                     "speedup (images/s ratio)", {speedup, ideal}));
  train::write_file_atomic(
      (out / "scaling-efficiency.svg").string(),
      svg_line_chart("Parallel efficiency vs world size", x_label, "efficiency (%)", {efficiency, full}));
  train::write_file_atomic((out / "scaling.md").string(),
                           "# ember scaling report\n\n" + text +
                               "\n## Plots\n\n![speedup over world size](scaling.svg)\n\n"
                               "![parallel efficiency over world size](scaling-efficiency.svg)\n");
  return text;
}

}  // namespace ember::report
