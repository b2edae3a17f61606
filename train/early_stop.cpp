// Early stopping: the two rules of EarlyStopConfig (train/config.h).
//
// Target rule (target_accuracy set): a streak counts consecutive epochs with test_acc >= target
// and resets on any epoch below it; the run stops once the streak reaches max(patience, 1).
// Patience rule (no target, patience > 0): an epoch improves when test_acc > best + min_delta
// (exactly min_delta is not enough); the run stops after `patience` epochs without one.
// The best accuracy moves only on such an improvement (as in Keras / Lightning), so a run creeping
// up by less than min_delta per epoch is still measured against the last real improvement.
#include <ember/train/early_stop.h>

#include <cmath>
#include <cstdio>

#include <ember/core/error.h>

namespace ember::train {

namespace {

// "%.4f" for accuracies, "%g" for min_delta (0.001 stays "0.001", 0 stays "0").
std::string fmt(const char* spec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

}  // namespace

EarlyStopping::EarlyStopping(const EarlyStopConfig& config) : config_(config) {
  // parse_config validates these too; the stopper checks again because it can be built directly.
  EMBER_CHECK(config.patience >= 0, "early_stop.patience: expected an integer >= 0, found ", config.patience);
  EMBER_CHECK(std::isfinite(config.min_delta) && config.min_delta >= 0,
              "early_stop.min_delta: expected a number >= 0, found ", config.min_delta);
  if (config.target_accuracy) {
    const double t = *config.target_accuracy;
    EMBER_CHECK(t > 0 && t <= 1, "early_stop.target_accuracy: expected a number in (0, 1], found ", t);
  }
}

bool EarlyStopping::enabled() const { return config_.target_accuracy.has_value() || config_.patience > 0; }

bool EarlyStopping::update(int64_t epoch, double test_acc) {
  EMBER_CHECK(std::isfinite(test_acc), "EarlyStopping::update: epoch ", epoch,
              ": expected a finite test accuracy, found ", test_acc);
  // Once stopped the decision stands; a caller that keeps going does not move the state on.
  if (stopped()) return true;

  State& s = state_;
  // Best / since-improvement are kept under both rules: checkpoints save them either way.
  const bool first = s.best_epoch == 0;
  if (first || test_acc > s.best_acc + config_.min_delta) {
    s.best_acc = test_acc;
    s.best_epoch = epoch;
    s.since_improvement = 0;
  } else {
    ++s.since_improvement;
  }

  if (config_.target_accuracy) {
    const double target = *config_.target_accuracy;
    if (test_acc >= target) {
      ++s.at_target_streak;
      if (s.target_epoch == 0) s.target_epoch = epoch;
    } else {
      s.at_target_streak = 0;
    }
    const int64_t needed = config_.patience > 0 ? config_.patience : 1;
    if (s.at_target_streak >= needed) {
      const int64_t n = s.at_target_streak;
      const std::string epochs = n == 1 ? "1 consecutive epoch (epoch " + std::to_string(epoch) + ")"
                                        : std::to_string(n) + " consecutive epochs (epochs " +
                                              std::to_string(epoch - n + 1) + "-" + std::to_string(epoch) + ")";
      reason_ = "target_accuracy " + fmt("%.4f", target) + " reached for " + epochs;
      rule_ = "target";
    }
    return stopped();
  }

  if (config_.patience > 0 && s.since_improvement >= config_.patience) {
    reason_ = "no improvement > " + fmt("%g", config_.min_delta) + " for " + std::to_string(s.since_improvement) +
              (s.since_improvement == 1 ? " epoch" : " epochs") + " (best " + fmt("%.4f", s.best_acc) + " at epoch " +
              std::to_string(s.best_epoch) + ")";
    rule_ = "patience";
  }
  return stopped();
}

}  // namespace ember::train
