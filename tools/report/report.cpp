// ember-report's library side (tools/report/report.h): reading run directories, the Markdown table with
// speedup and parallel efficiency, and the report files. The charts are in svg.cpp, the scaling table in scaling.cpp.
#include "report/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include <ember/core/error.h>
#include <ember/train/tensorboard.h>  // flatten_hparams: config.json as key paths

namespace fs = std::filesystem;

namespace ember::report {

using train::parse_run_summary;
using train::read_metrics_file;
using train::write_file_atomic;
namespace {

constexpr const char* kSummaryFile = "summary.json";
constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr const char* kIncomplete = "incomplete";
constexpr const char* kConfigFile = "config.json";

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const int err = errno;
  EMBER_CHECK(f.is_open(), "cannot open '", path, "': ", std::strerror(err));
  std::ostringstream os;
  os << f.rdbuf();
  EMBER_CHECK(!f.bad(), "reading '", path, "' failed");
  return os.str();
}

// "runs/cpu-1/" and "runs/cpu-1" both name "cpu-1"; "." names the current directory.
std::string dir_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == "..") p = fs::absolute(p).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// The summary of a run that has none yet (still running, or killed before the end): what the
// epochs say. Name and device are not in metrics.jsonl, so the directory names the run and the
// device is unknown; the device count is unknown too, so the table leaves the run out of the
// speedup comparison (see markdown_table).
RunSummary derive_summary(const std::string& dir, const std::vector<EpochMetrics>& epochs) {
  RunSummary s;
  s.name = dir_name(dir);
  s.device = "?";
  s.epochs_run = static_cast<int64_t>(epochs.size());
  s.stop_reason = kIncomplete;
  s.stop_detail = "no summary.json: the run is still going or was killed";
  double train_seconds = 0, images = 0;
  for (size_t i = 0; i < epochs.size(); ++i) {
    const EpochMetrics& e = epochs[i];
    if (i == 0 || e.test_acc > s.best_test_acc) {
      s.best_test_acc = e.test_acc;
      s.best_epoch = e.epoch;
    }
    train_seconds += e.epoch_seconds;
    images += e.images_per_second * e.epoch_seconds;  // images_per_second = images / epoch_seconds
    s.total_seconds += e.epoch_seconds + e.eval_seconds;
  }
  s.images_per_second = train_seconds > 0 ? images / train_seconds : 0;
  return s;
}

}  // namespace

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string cell_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

bool device_count_known(const RunRecord& r) { return r.summary.stop_reason != kIncomplete; }

std::string render_table(const std::vector<std::string>& header, const std::vector<bool>& right_aligned,
                         const std::vector<std::vector<std::string>>& rows) {
  EMBER_ASSERT(right_aligned.size() == header.size(), "render_table: ", header.size(), " columns but ",
               right_aligned.size(), " alignments");
  // Pad every column to its widest cell, so the table reads as well on a terminal as rendered.
  std::vector<size_t> width(header.size(), 3);
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = std::max(width[c], header[c].size());
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - cells[c].size();
      out += ' ';
      if (right_aligned[c]) out.append(pad, ' ');
      out += cells[c];
      if (!right_aligned[c]) out.append(pad, ' ');
      out += " |";
    }
    out += '\n';
    return out;
  };
  // The separator row: "---:" right-aligns the numeric columns when rendered.
  std::string out = line(header);
  out += '|';
  for (size_t c = 0; c < header.size(); ++c) {
    out += ' ';
    out.append(right_aligned[c] ? width[c] - 1 : width[c], '-');
    out += right_aligned[c] ? ": |" : " |";
  }
  out += '\n';
  for (const auto& row : rows) out += line(row);
  return out;
}

void make_report_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  EMBER_CHECK(!ec, "cannot create the report directory '", out_dir, "': ", ec.message());
  EMBER_CHECK(fs::is_directory(out_dir, ec), "report directory '", out_dir, "' exists but is not a directory");
}

RunRecord read_run(const std::string& dir) {
  std::error_code ec;
  EMBER_CHECK(fs::is_directory(dir, ec), "run directory '", dir, "' does not exist or is not a directory");
  const std::string metrics_path = (fs::path(dir) / kMetricsFile).string();
  const std::string summary_path = (fs::path(dir) / kSummaryFile).string();
  const bool has_metrics = fs::exists(metrics_path, ec), has_summary = fs::exists(summary_path, ec);
  EMBER_CHECK(has_metrics, "run directory '", dir, "': missing '", metrics_path, "'",
              has_summary ? "" : " (and no summary.json either: not a run directory?)");
  RunRecord r;
  r.dir = dir;
  r.epochs = read_metrics_file(metrics_path);
  r.summary = has_summary ? parse_run_summary(read_text(summary_path), summary_path) : derive_summary(dir, r.epochs);
  r.label = r.summary.name.empty() ? dir_name(dir) : r.summary.name;
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  if (fs::exists(config_path, ec)) {
    try {
      for (const auto& [key, value] : train::flatten_hparams(read_text(config_path), {"provenance"})) {
        if (const double* d = std::get_if<double>(&value)) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.17g", *d);
          double shorter = 0;
          for (int digits = 1; digits <= 17; ++digits) {  // the shortest text that reads back the same
            std::snprintf(buf, sizeof buf, "%.*g", digits, *d);
            if (std::sscanf(buf, "%lf", &shorter) == 1 && shorter == *d) break;
          }
          r.config[key] = buf;
        } else if (const bool* b = std::get_if<bool>(&value)) {
          r.config[key] = *b ? "true" : "false";
        } else {
          r.config[key] = std::get<std::string>(value);
        }
      }
    } catch (const Error& e) {
      EMBER_FAIL("'", config_path, "': ", e.message());
    }
  }
  return r;
}

std::string config_value(const RunRecord& r, const std::string& key) {
  auto it = r.config.find(key);
  return it == r.config.end() ? "?" : it->second;
}

double mean_gpu_util(const RunRecord& r) {
  double sum = 0;
  int n = 0;
  for (const EpochMetrics& e : r.epochs)
    if (e.gpu_util_percent) {
      sum += *e.gpu_util_percent;
      ++n;
    }
  return n > 0 ? sum / n : NAN;
}

namespace {

bool any_gpu(const std::vector<RunRecord>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const RunRecord& r) { return std::isfinite(mean_gpu_util(r)); });
}

// A whole decimal or floating-point number, as config values print.
bool numeric(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

std::vector<RunGroup> group_runs(const std::vector<RunRecord>& runs, const std::string& key) {
  const bool known = std::any_of(runs.begin(), runs.end(), [&](const RunRecord& r) { return r.config.count(key) > 0; });
  if (!known) {
    std::string keys;
    for (const RunRecord& r : runs) {
      if (r.config.empty()) continue;
      int n = 0;
      for (const auto& [k, v] : r.config) {
        if (k.find('.') != std::string::npos && n++ >= 12) continue;  // the top-level keys, and a few paths
        keys += (keys.empty() ? "" : ", ") + k;
      }
      break;
    }
    EMBER_FAIL("--by ", key, ": no run's config.json has this key",
               keys.empty() ? std::string(" (none of the runs has a config.json)") : " (keys include " + keys + ")");
  }
  std::vector<RunGroup> groups;
  for (const RunRecord& r : runs) {
    const std::string v = config_value(r, key);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const RunGroup& g) { return g.value == v; });
    if (it == groups.end()) groups.push_back({v, {&r}});
    else it->runs.push_back(&r);
  }
  bool all_numeric = true;
  for (const RunGroup& g : groups) {
    double d = 0;
    all_numeric = all_numeric && (g.value == "?" || numeric(g.value, d));
  }
  std::stable_sort(groups.begin(), groups.end(), [&](const RunGroup& a, const RunGroup& b) {
    if ((a.value == "?") != (b.value == "?")) return b.value == "?";  // unknown last
    double x = 0, y = 0;
    if (all_numeric && numeric(a.value, x) && numeric(b.value, y)) return x < y;
    return a.value < b.value;
  });
  return groups;
}

std::string group_table(const std::vector<RunRecord>& runs, const std::string& key) {
  const bool gpu = any_gpu(runs);
  std::vector<std::string> header = {
      key, "runs", "best acc (mean)", "best acc (min-max)", "images/s (mean)", "epoch time (s, mean)"};
  if (gpu) header.push_back("GPU busy (mean)");
  std::vector<bool> right(header.size(), true);
  right[0] = false;
  std::vector<std::vector<std::string>> rows;
  for (const RunGroup& g : group_runs(runs, key)) {
    double acc = 0, lo = INFINITY, hi = -INFINITY, ips = 0, epoch = 0, util = 0;
    int epoch_runs = 0, util_runs = 0;
    for (const RunRecord* r : g.runs) {
      acc += r->summary.best_test_acc;
      lo = std::min(lo, r->summary.best_test_acc);
      hi = std::max(hi, r->summary.best_test_acc);
      ips += r->summary.images_per_second;
      if (!r->epochs.empty()) {
        double t = 0;
        for (const EpochMetrics& e : r->epochs) t += e.epoch_seconds;
        epoch += t / static_cast<double>(r->epochs.size());
        ++epoch_runs;
      }
      if (const double u = mean_gpu_util(*r); std::isfinite(u)) {
        util += u;
        ++util_runs;
      }
    }
    const double n = static_cast<double>(g.runs.size());
    std::vector<std::string> row = {cell_text(g.value), std::to_string(g.runs.size()),
                                    fixed(acc / n, 4),  fixed(lo, 4) + "-" + fixed(hi, 4),
                                    fixed(ips / n, 0),  epoch_runs > 0 ? fixed(epoch / epoch_runs, 2) : "-"};
    if (gpu) row.push_back(util_runs > 0 ? fixed(util / util_runs, 0) + "%" : "-");
    rows.push_back(std::move(row));
  }
  return render_table(header, right, rows);
}

std::vector<RunRecord> read_runs(const std::vector<std::string>& dirs) {
  std::vector<RunRecord> runs;
  runs.reserve(dirs.size());
  for (const std::string& d : dirs) runs.push_back(read_run(d));
  // Two runs of one config share a name: tell them apart by directory name, then by the path as
  // given, then (the same directory twice) by position.
  auto count = [&](const std::string& label) {
    return std::count_if(runs.begin(), runs.end(), [&](const RunRecord& r) { return r.label == label; });
  };
  std::vector<std::string> original;
  for (const RunRecord& r : runs) original.push_back(r.label);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (std::count(original.begin(), original.end(), original[i]) < 2) continue;
    const std::string base = dir_name(runs[i].dir);
    runs[i].label = base == original[i] ? original[i] + " (" + runs[i].dir + ")" : original[i] + " (" + base + ")";
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (count(runs[i].label) < 2) continue;
    const std::string label = runs[i].label;
    int n = 0;
    for (RunRecord& r : runs)
      if (r.label == label) r.label += " #" + std::to_string(++n);
  }
  return runs;
}

std::string markdown_table(const std::vector<RunRecord>& runs, const std::string& by) {
  const bool gpu = any_gpu(runs);
  // Baseline: the fewest devices among runs whose device count is known (ties: the first given).
  const RunRecord* base = nullptr;
  bool mixed = false;
  for (const RunRecord& r : runs) {
    if (!device_count_known(r)) continue;
    if (base && r.summary.world_size != base->summary.world_size) mixed = true;
    if (!base || r.summary.world_size < base->summary.world_size) base = &r;
  }
  std::vector<std::string> header = {"run",      "device",  "devices",   "epochs", "best acc", "epoch time (s)",
                                     "images/s", "speedup", "efficiency"};
  std::vector<bool> right_aligned = {false, false, true, true, true, true, true, true, true};
  if (gpu) {
    header.insert(header.begin() + 7, "GPU busy");
    right_aligned.insert(right_aligned.begin() + 7, true);
  }
  if (!by.empty()) {
    header.insert(header.begin() + 1, by);
    right_aligned.insert(right_aligned.begin() + 1, false);
  }
  std::vector<std::vector<std::string>> rows;
  for (const RunRecord& r : runs) {
    const RunSummary& s = r.summary;
    double epoch_time = NAN;
    if (!r.epochs.empty()) {
      epoch_time = 0;
      for (const EpochMetrics& e : r.epochs) epoch_time += e.epoch_seconds;
      epoch_time /= static_cast<double>(r.epochs.size());
    }
    std::string speedup = "-", efficiency = "-";
    if (mixed && device_count_known(r) && base->summary.images_per_second > 0 && std::isfinite(s.images_per_second)) {
      const double sp = s.images_per_second / base->summary.images_per_second;
      const double eff = sp / (static_cast<double>(s.world_size) / static_cast<double>(base->summary.world_size));
      speedup = fixed(sp, 2) + "x";
      efficiency = fixed(100 * eff, 1) + "%";
    }
    std::vector<std::string> row = {
        cell_text(r.label),
        cell_text(s.device),
        device_count_known(r) ? std::to_string(s.world_size) : "?",
        std::to_string(s.epochs_run) + (s.stop_reason == kIncomplete ? " (incomplete)" : ""),
        fixed(s.best_test_acc, 4),
        fixed(epoch_time, 2),
        fixed(s.images_per_second, 0),
        speedup,
        efficiency};
    if (gpu) row.insert(row.begin() + 7, std::isfinite(mean_gpu_util(r)) ? fixed(mean_gpu_util(r), 0) + "%" : "-");
    if (!by.empty()) row.insert(row.begin() + 1, cell_text(config_value(r, by)));
    rows.push_back(std::move(row));
  }
  return render_table(header, right_aligned, rows);
}

std::string write_report(const std::vector<RunRecord>& runs_given, const std::string& out_dir, const std::string& by) {
  // --by: the runs in group order (group_runs checks the key before anything is written), each
  // label with its group's value.
  std::vector<RunRecord> runs;
  std::string groups;
  if (by.empty()) {
    runs = runs_given;
  } else {
    for (const RunGroup& g : group_runs(runs_given, by))
      for (const RunRecord* r : g.runs) runs.push_back(*r);
    groups = group_table(runs, by);
  }
  make_report_dir(out_dir);
  auto plot_label = [&](const RunRecord& r) {
    return by.empty() ? r.label : r.label + " [" + by + "=" + config_value(r, by) + "]";
  };

  std::vector<Series> loss, accuracy, scale;  // scale: fp16 runs' log2(loss scale) per epoch
  std::vector<Series> acc_time, gpu;  // test accuracy over wall time; GPU utilisation per epoch
  std::vector<std::string> labels;
  std::vector<double> throughput;
  for (const RunRecord& r : runs) {
    const std::string label = plot_label(r);
    Series train{label + " train", {}, {}}, test{label + " test", {}, {}}, acc{label, {}, {}};
    Series at{label, {}, {}}, util{label, {}, {}};
    double wall = 0;
    for (const EpochMetrics& e : r.epochs) {
      wall += e.epoch_seconds + e.eval_seconds;
      at.x.push_back(wall);
      at.y.push_back(e.test_acc);
      if (e.gpu_util_percent) {
        util.x.push_back(static_cast<double>(e.epoch));
        util.y.push_back(*e.gpu_util_percent);
      }
    }
    acc_time.push_back(std::move(at));
    if (!util.x.empty()) gpu.push_back(std::move(util));
    for (const EpochMetrics& e : r.epochs) {
      const double x = static_cast<double>(e.epoch);
      train.x.push_back(x);
      train.y.push_back(e.train_loss);
      test.x.push_back(x);
      test.y.push_back(e.test_loss);
      acc.x.push_back(x);
      acc.y.push_back(e.test_acc);
    }
    Series s{label, {}, {}};
    for (const EpochMetrics& e : r.epochs) {
      if (e.loss_scale <= 0) continue;
      s.x.push_back(static_cast<double>(e.epoch));
      s.y.push_back(std::log2(e.loss_scale));
    }
    if (!s.x.empty()) scale.push_back(std::move(s));
    loss.push_back(std::move(train));
    loss.push_back(std::move(test));
    accuracy.push_back(std::move(acc));
    labels.push_back(label);
    throughput.push_back(r.summary.images_per_second);
  }

  const std::string table = markdown_table(runs, by);
  std::ostringstream md;
  md << "# ember report\n\n" << table << "\n";
  md << "Epoch time: mean training pass per epoch. Speedup and efficiency: images/s relative to the run with the "
        "fewest devices, efficiency = speedup / device ratio.";
  if (!gpu.empty()) md << " GPU busy: mean NVML utilisation over the training passes (train/gpu_monitor.h).";
  md << "\n\n";
  if (!by.empty()) md << "## By " << cell_text(by) << "\n\n" << groups << "\n";
  md << "## Runs\n\n";
  for (const RunRecord& r : runs) {
    md << "- **" << cell_text(r.label) << "**: `" << r.dir << "`, " << r.summary.stop_reason;
    if (!r.summary.stop_detail.empty()) md << " (" << r.summary.stop_detail << ")";
    if (r.summary.time_to_target_seconds && r.summary.target_accuracy)
      md << "; reached " << fixed(*r.summary.target_accuracy, 4) << " after "
         << fixed(*r.summary.time_to_target_seconds, 1) << " s of training";
    double skipped = 0, last_scale = 0;
    for (const EpochMetrics& e : r.epochs) {
      skipped += e.skipped_steps;
      if (e.loss_scale > 0) last_scale = e.loss_scale;
    }
    if (last_scale > 0)
      md << "; fp16 loss scale " << fixed(last_scale, 0) << " after the last epoch, " << fixed(skipped, 0)
         << (skipped == 1 ? " step" : " steps") << " skipped";
    md << "\n";
  }
  md << "\n## Plots\n\n![loss per epoch](loss.svg)\n\n![test accuracy per epoch](accuracy.svg)\n\n"
        "![throughput per run](throughput.svg)\n\n![test accuracy over wall time](accuracy_time.svg)\n";
  if (!scale.empty()) md << "\n![fp16 loss scale per epoch](loss_scale.svg)\n";
  if (!gpu.empty()) md << "\n![GPU utilisation per epoch](gpu.svg)\n";

  const fs::path out(out_dir);
  write_file_atomic((out / "loss.svg").string(), svg_line_chart("Loss per epoch", "epoch", "loss", loss));
  write_file_atomic((out / "accuracy.svg").string(),
                    svg_line_chart("Test accuracy per epoch", "epoch", "test accuracy", accuracy));
  write_file_atomic((out / "throughput.svg").string(),
                    svg_bar_chart("Training throughput per run", "images/s", labels, throughput));
  if (!scale.empty())  // report_files() lists it under the same condition
    write_file_atomic((out / "loss_scale.svg").string(),
                      svg_line_chart("fp16 loss scale at the end of each epoch", "epoch", "log2(loss scale)", scale));
  write_file_atomic(
      (out / "accuracy_time.svg").string(),
      svg_line_chart("Test accuracy over wall time (training + evaluation)", "seconds", "test accuracy", acc_time));
  if (!gpu.empty())  // report_files() lists it under the same condition
    write_file_atomic(
        (out / "gpu.svg").string(),
        svg_line_chart("GPU utilisation per epoch (mean of 10 Hz NVML readings)", "epoch", "GPU busy (%)", gpu));
  write_file_atomic((out / "report.md").string(), md.str());
  return by.empty() ? table : table + "\n" + groups;
}

std::vector<std::string> report_files(const std::vector<RunRecord>& runs) {
  std::vector<std::string> files = {"report.md", "loss.svg", "accuracy.svg", "throughput.svg"};
  const bool fp16 = std::any_of(runs.begin(), runs.end(), [](const RunRecord& r) {
    return std::any_of(r.epochs.begin(), r.epochs.end(), [](const EpochMetrics& e) { return e.loss_scale > 0; });
  });
  if (fp16) files.push_back("loss_scale.svg");
  files.push_back("accuracy_time.svg");
  if (any_gpu(runs)) files.push_back("gpu.svg");
  return files;
}

}  // namespace ember::report
