#pragma once
// Learning-rate schedules. A schedule counts its own steps t (0 at construction) and sets the
// optimizer's learning rate to lr_at(t), a closed form of t and the base learning rate (the
// optimizer's lr when the schedule was built). The caller decides what a step is: call step()
// once per epoch for epoch schedules (StepLR, MultiStepLR, CosineAnnealingLR as usually used) or
// once per optimizer step for iteration schedules (LinearWarmup, OneCycleLR); the numbers below
// (step_size, milestones, T_max, warmup_steps, total_steps) are in the same unit.
//
//   optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
//   optim::StepLR sched(opt, {.step_size = 10, .gamma = 0.1});   // lr 0.1, then 0.01 after 10 epochs
//   for (epoch ...) { train_one_epoch(opt); sched.step(); }
//
// Constructing a schedule sets the optimizer's lr to lr_at(0); step() advances t and sets
// lr_at(t). Because the lr is a pure function of t, state_dict() holds just t and the base lr, and
// a restored schedule continues exactly.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/state_dict.h>
#include <ember/optim/optimizer.h>

namespace ember::optim {

class LRScheduler {
 public:
  /// Remembers opt.lr() as the base lr and keeps a reference to opt (which must outlive the
  /// schedule). Subclass constructors finish by applying lr_at(0).
  explicit LRScheduler(Optimizer& opt);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Short type name ("StepLR", ...) for messages.
  virtual std::string name() const = 0;
  /// Advances t by one and sets the optimizer's lr to lr_at(t).
  virtual void step();
  /// The lr for the current t (what the optimizer uses now, unless someone else changed it).
  double get_lr() const { return lr_at(step_count_); }
  /// The closed form: the lr after t steps.
  virtual double lr_at(int64_t t) const = 0;
  /// Steps taken (t).
  int64_t step_count() const { return step_count_; }
  double base_lr() const { return base_lr_; }
  Optimizer& optimizer() const { return *opt_; }

  /// {"step_count": 0-d i64, "base_lr": 0-d f64} (plus the wrapped schedule's, for LinearWarmup).
  virtual StateDict state_dict() const;
  /// Restores t and the base lr, then sets the optimizer's lr to get_lr(). A missing or
  /// unexpected entry is an error naming it (nothing changes then).
  virtual void load_state_dict(const StateDict& state);

 protected:
  /// Sets the optimizer's lr to get_lr().
  void apply() { opt_->set_lr(get_lr()); }
  Optimizer* opt_;
  double base_lr_;
  int64_t step_count_ = 0;
};

/// lr = base * gamma^floor(t / step_size).
struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, const StepLROptions& options);
  std::string name() const override { return "StepLR"; }
  double lr_at(int64_t t) const override;

 private:
  StepLROptions o_;
};

/// lr = base * gamma^(number of milestones <= t); milestones may repeat (each counts).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }
  double lr_at(int64_t t) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

/// lr = eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2 (PyTorch's closed form; past
/// T_max it rises again along the same cosine).
struct CosineAnnealingOptions {
  int64_t T_max = 1;
  double eta_min = 0.0;
};
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, const CosineAnnealingOptions& options);
  std::string name() const override { return "CosineAnnealingLR"; }
  double lr_at(int64_t t) const override;

 private:
  CosineAnnealingOptions o_;
};

/// Linear warm-up in front of another schedule (or of the constant base lr). With w warm-up
/// steps and target = after ? after.lr_at(0) : base:
///   t <  w: lr = target * (start_factor + (1 - start_factor) * t / w)
///   t >= w: lr = after ? after.lr_at(t - w) : base
/// The wrapped schedule must drive the same optimizer and is not stepped by the caller: the
/// warm-up owns it and shifts its clock by w. Usually stepped once per iteration.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup_steps, std::unique_ptr<LRScheduler> after = nullptr,
               double start_factor = 0.1);
  std::string name() const override { return "LinearWarmup"; }
  double lr_at(int64_t t) const override;
  /// Adds the wrapped schedule's entries under "after.".
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
  const LRScheduler* after() const { return after_.get(); }

 private:
  int64_t warmup_;
  std::unique_ptr<LRScheduler> after_;
  double start_factor_;
};

/// The 1cycle policy (PyTorch's OneCycleLR, learning rate only: momentum is not cycled). From
/// initial = max_lr / div_factor up to max_lr over the first pct_start of total_steps, then down
/// to initial / final_div_factor at step total_steps - 1 (three_phase: up, back down to initial,
/// then down to the minimum). Stepped once per iteration; stepping past total_steps is an error.
/// Ignores the optimizer's initial lr.
struct OneCycleOptions {
  double max_lr = 0.1;
  int64_t total_steps = 1000;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  /// Cosine annealing between phase ends (else linear).
  bool cos_anneal = true;
};
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, const OneCycleOptions& options);
  std::string name() const override { return "OneCycleLR"; }
  void step() override;
  double lr_at(int64_t t) const override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr;
  };
  OneCycleOptions o_;
  std::vector<Phase> phases_;
};

}  // namespace ember::optim
