#pragma once
// What a training run carries from one session to the next beyond the state dicts of its model,
// optimizer, schedule and loader: the counters behind summary.json, the early stopper's state and,
// for a checkpoint written in the middle of an epoch (SIGTERM), the partial sums of that epoch.
// Saved in Checkpoint::metadata as text; doubles use 17 significant digits, so they read back
// bit for bit and a resumed run's metrics equal an uninterrupted run's.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <ember/core/tensor.h>
#include <ember/data/dataloader.h>
#include <ember/train/early_stop.h>
#include <ember/train/phase_timer.h>

namespace ember::train {

struct RunState {
  int64_t epochs_done = 0;  // Checkpoint::epoch
  int64_t global_step = 0;  // Checkpoint::global_step
  double train_seconds = 0;  // summed epoch_seconds of completed epochs
  int64_t train_images = 0;  // training images of completed epochs
  double total_seconds = 0;  // training + evaluation wall time, all sessions
  std::optional<double> time_to_target;
  double best_acc = -1;  // best test_acc so far (-1: no epoch yet)
  int64_t best_epoch = 0;
  EarlyStopping::State stopper;
  /// Set once the early stopper fired: "target" or "patience", and its sentence. A run resumed
  /// after that has nothing left to do.
  std::string early_stop_rule, early_stop_reason;

  /// The epoch in progress (all zero between epochs).
  struct Partial {
    double loss_sum = 0;  // sum over steps of loss * batch size
    int64_t images = 0;
    int64_t steps = 0;
    double seconds = 0;  // training seconds so far
    double lr = 0;  // the learning rate at the start of the epoch
    PhaseTotals phases;
    bool active() const { return steps > 0; }
  } partial;

  /// Every field as text under its own key (plus nothing else).
  std::map<std::string, std::string> to_metadata() const;
  /// Reads what to_metadata() wrote; a missing or malformed key is an error naming it and
  /// `source` (the checkpoint path) — e.g. a checkpoint written by another program.
  static RunState from_metadata(const std::map<std::string, std::string>& meta, const std::string& source);
};

/// Loads `saved`, the training sampler's state from a checkpoint, into `loader`. A checkpoint of a
/// run with as many processes resumes exactly (under ddp rank 0's DistributedSampler state resumes
/// every rank: the position is the same). One of a run with another number of processes carries
/// over its epoch only: it must have been taken at an epoch's end (else an error saying so), and
/// the next epoch starts from its beginning, each rank taking its own share of that epoch's order.
/// Returns a note for the user when the number of processes changed, else "".
std::string restore_sampler(data::DataLoader& loader, const StateDict& saved);

}  // namespace ember::train
