#pragma once
// Grad mode: whether differentiable ops record the graph. Thread-local, on by default; the backward
// engine turns it off while running backward closures.
namespace ember {

struct GradMode {
  /// True when ops on this thread record autograd graphs.
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Disables graph recording on this thread until the guard leaves scope (restores the old mode).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Enables graph recording on this thread until the guard leaves scope (restores the old mode).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace ember
