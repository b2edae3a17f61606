#pragma once
// The files of a run directory, as the Trainer writes them (see train/trainer.h for the layout):
// paths, config.json with provenance, metrics.jsonl lines kept across a resume, and the rotation
// of epoch_N.ckpt files.
#include <cstdint>
#include <string>
#include <vector>

#include <ember/train/config.h>

namespace ember::train {

/// The paths inside one run directory.
struct RunPaths {
  /// checkpoint_dir "": <run_dir>/checkpoints.
  explicit RunPaths(const std::string& run_dir, const std::string& checkpoint_dir = "");
  std::string dir, config, metrics, summary, log, checkpoints, last_ckpt, best_ckpt;
  /// checkpoints/epoch_<epoch>.ckpt
  std::string epoch_ckpt(int64_t epoch) const;
};

/// The checkpoint a run in `paths` starts from for checkpoint.resume = `resume`: with "auto"
/// last.ckpt when there is one, else ""; with a path that file (an error when it is not one); with
/// "" nothing, and a directory that already holds a run (metrics.jsonl or last.ckpt) is an error
/// naming the overrides that continue it or start another: a new run never overwrites an old one.
std::string checkpoint_to_resume(const RunPaths& paths, const std::string& resume);

/// The config as config.json holds it: to_json(config) plus a "provenance" object with
/// git_commit (ember::build_git_commit()), overrides, started (local ISO-8601 time), host and,
/// when resuming, resumed_from. output.run_dir is left empty, so that `ember-train
/// <run>/config.json` runs the experiment again in a new directory under output.dir instead of
/// being refused by the run it came from. parse_config accepts the result as it is.
std::string config_json_with_provenance(const ExperimentConfig& config, const std::vector<std::string>& overrides,
                                        const std::string& resumed_from);

/// Now as local ISO-8601 time with the UTC offset: "2024-05-01T12:34:56+0200".
std::string iso_time_now();

/// The lines of metrics file `path` (missing file: none) whose "epoch" is <= max_epoch, verbatim
/// and in order: what a run resumed from a checkpoint of epoch max_epoch keeps. A last line that
/// does not parse (a write cut short) is dropped and described in `dropped_note`; any other line
/// that does not parse is an error naming the file and the line number.
std::vector<std::string> metrics_lines_up_to(const std::string& path, int64_t max_epoch, std::string& dropped_note);

/// Epoch numbers of the checkpoints/epoch_N.ckpt files in `checkpoint_dir`, ascending.
std::vector<int64_t> epoch_checkpoints(const std::string& checkpoint_dir);

/// Deletes epoch_N.ckpt files so that only the newest `keep_last` remain (keep_last 0: keep all),
/// and every one with N > max_epoch (left by a timeline a resume discarded). Returns the epochs
/// deleted. A file that cannot be deleted is an error naming it.
std::vector<int64_t> prune_epoch_checkpoints(const std::string& checkpoint_dir, int64_t keep_last, int64_t max_epoch);

}  // namespace ember::train
