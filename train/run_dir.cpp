// Run-directory files (train/run_dir.h) and resolve_run_dir (train/trainer.h).
#include <ember/train/run_dir.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include <ember/core/build_info.h>
#include <ember/core/error.h>
#include <ember/train/trainer.h>

namespace ember::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEpochPrefix = "epoch_";
constexpr const char* kCkptSuffix = ".ckpt";

std::string local_time(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof(buf), format, &tm);
  return std::string(buf, n);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// N for a file named epoch_N.ckpt (N a decimal >= 0), else -1.
int64_t epoch_of_checkpoint_name(const std::string& name) {
  const std::string prefix = kEpochPrefix, suffix = kCkptSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  int64_t n = -1;
  auto [end, ec] = std::from_chars(first, last, n);
  return (ec == std::errc() && end == last && n >= 0) ? n : -1;
}

}  // namespace

RunPaths::RunPaths(const std::string& run_dir, const std::string& checkpoint_dir)
    : dir(run_dir),
      config((fs::path(run_dir) / "config.json").string()),
      metrics((fs::path(run_dir) / "metrics.jsonl").string()),
      summary((fs::path(run_dir) / "summary.json").string()),
      log((fs::path(run_dir) / "log.txt").string()),
      checkpoints(checkpoint_dir.empty() ? (fs::path(run_dir) / "checkpoints").string() : checkpoint_dir),
      last_ckpt((fs::path(checkpoints) / "last.ckpt").string()),
      best_ckpt((fs::path(checkpoints) / "best.ckpt").string()) {}

std::string RunPaths::epoch_ckpt(int64_t epoch) const {
  return (fs::path(checkpoints) / (kEpochPrefix + std::to_string(epoch) + kCkptSuffix)).string();
}

std::string iso_time_now() { return local_time("%Y-%m-%dT%H:%M:%S%z"); }

std::string resolve_run_dir(const ExperimentConfig& config) { return resolve_run_dir(config.name, config.output); }

std::string resolve_run_dir(const std::string& name, const OutputConfig& output) {
  if (!output.run_dir.empty()) return output.run_dir;
  const fs::path base = fs::path(output.dir) / (name + "-" + local_time("%Y%m%d-%H%M%S"));
  // Two runs started within the same second get -2, -3, ...: never share a directory by accident.
  fs::path candidate = base;
  std::error_code ec;
  for (int k = 2; fs::exists(candidate, ec); ++k) candidate = base.string() + "-" + std::to_string(k);
  return candidate.string();
}

std::string checkpoint_to_resume(const RunPaths& paths, const std::string& resume) {
  std::error_code ec;
  if (resume == "auto") return fs::exists(paths.last_ckpt, ec) ? paths.last_ckpt : std::string();
  if (!resume.empty()) {
    EMBER_CHECK(fs::is_regular_file(resume, ec), "checkpoint.resume: no checkpoint file '", resume,
                "' (give the path of a .ckpt file, \"auto\" or \"\")");
    return resume;
  }
  // Starting afresh must not overwrite an earlier run's results.
  EMBER_CHECK(!fs::exists(paths.last_ckpt, ec) && !fs::exists(paths.metrics, ec), "output.run_dir '", paths.dir,
              "' already holds a run (", fs::exists(paths.metrics, ec) ? paths.metrics : paths.last_ckpt,
              "): add checkpoint.resume=auto to continue it, or output.run_dir=NEW_DIR for a new run");
  return "";
}

std::string config_json_with_provenance(const ExperimentConfig& config, const std::vector<std::string>& overrides,
                                        const std::string& resumed_from) {
  ExperimentConfig rerun = config;
  rerun.output.run_dir.clear();  // the file sits in the run directory; running it again starts another
  // ordered_json keeps to_json's schema order, so config.json reads like the documentation.
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(to_json(rerun));
  nlohmann::ordered_json prov;
  prov["git_commit"] = build_git_commit();
  prov["overrides"] = overrides;
  prov["started"] = iso_time_now();
  prov["host"] = host_name();
  if (!resumed_from.empty()) prov["resumed_from"] = resumed_from;
  j["provenance"] = prov;
  return j.dump(2) + "\n";
}

std::vector<std::string> metrics_lines_up_to(const std::string& path, int64_t max_epoch, std::string& dropped_note) {
  dropped_note.clear();
  std::vector<std::string> kept;
  std::error_code ec;
  if (!fs::exists(path, ec)) return kept;
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "cannot read metrics file '", path, "': ", std::strerror(errno));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool ok = j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer();
    if (!ok) {
      // Only the last line can be cut short by a crash; damage elsewhere is not ours to repair.
      EMBER_CHECK(i + 1 == lines.size(), "metrics file '", path, "' line ", i + 1,
                  ": expected a JSON object with an integer \"epoch\", found '", line.substr(0, 80), "'");
      dropped_note = "dropped the incomplete last line " + std::to_string(i + 1) + " of " + path;
      continue;
    }
    if (j["epoch"].get<int64_t>() <= max_epoch) kept.push_back(line);
  }
  return kept;
}

std::vector<int64_t> epoch_checkpoints(const std::string& checkpoint_dir) {
  std::vector<int64_t> epochs;
  std::error_code ec;
  if (!fs::is_directory(checkpoint_dir, ec)) return epochs;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    const int64_t n = epoch_of_checkpoint_name(entry.path().filename().string());
    if (n >= 0 && entry.is_regular_file(ec)) epochs.push_back(n);
  }
  EMBER_CHECK(!ec, "cannot list checkpoint directory '", checkpoint_dir, "': ", ec.message());
  std::sort(epochs.begin(), epochs.end());
  return epochs;
}

std::vector<int64_t> prune_epoch_checkpoints(const std::string& checkpoint_dir, int64_t keep_last, int64_t max_epoch) {
  std::vector<int64_t> epochs = epoch_checkpoints(checkpoint_dir), doomed;
  std::vector<int64_t> kept;
  for (int64_t e : epochs) (e > max_epoch ? doomed : kept).push_back(e);
  if (keep_last > 0 && static_cast<int64_t>(kept.size()) > keep_last)
    doomed.insert(doomed.end(), kept.begin(), kept.end() - keep_last);
  std::sort(doomed.begin(), doomed.end());
  for (int64_t e : doomed) {
    const fs::path p = fs::path(checkpoint_dir) / (kEpochPrefix + std::to_string(e) + kCkptSuffix);
    std::error_code ec;
    fs::remove(p, ec);
    EMBER_CHECK(!ec, "cannot delete old checkpoint '", p.string(), "': ", ec.message());
  }
  return doomed;
}

}  // namespace ember::train
