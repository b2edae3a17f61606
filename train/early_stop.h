#pragma once
// Early stopping on test accuracy (see EarlyStopConfig in train/config.h for the two rules).
#include <cstdint>
#include <string>

#include <ember/train/config.h>

namespace ember::train {

class EarlyStopping {
 public:
  /// What the stopper remembers between epochs (saved in checkpoints, so a resumed run stops
  /// where an uninterrupted one would).
  struct State {
    double best_acc = -1.0;  // best test_acc so far (-1: no epoch yet)
    int64_t best_epoch = 0;  // epoch of best_acc
    int64_t at_target_streak = 0;  // consecutive epochs with test_acc >= target
    int64_t since_improvement = 0;  // epochs since test_acc last beat the best by > min_delta
    int64_t target_epoch = 0;  // first epoch with test_acc >= target (0: not yet)
    friend bool operator==(const State&, const State&) = default;
  };

  explicit EarlyStopping(const EarlyStopConfig& config);

  /// Records one epoch's test accuracy; returns true when training should stop now.
  bool update(int64_t epoch, double test_acc);
  bool stopped() const { return !reason_.empty(); }
  /// Why it stopped (empty while running): "target_accuracy 0.9200 reached for 2 consecutive
  /// epochs (epochs 5-6)" or "no improvement > 0.001 for 3 epochs (best 0.9310 at epoch 4)".
  const std::string& reason() const { return reason_; }
  /// "target" or "patience" once stopped, "" before.
  const std::string& rule() const { return rule_; }
  /// True when any rule can fire (a target is set, or patience > 0).
  bool enabled() const;

  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

 private:
  EarlyStopConfig config_;
  State state_;
  std::string reason_, rule_;
};

}  // namespace ember::train
