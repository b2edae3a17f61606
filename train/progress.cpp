// Epoch progress: the formatting (pure) and the bar / interval-line logic (train/progress.h).
#include <ember/train/progress.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include <ember/core/error.h>

namespace ember::train {

namespace {

// The terminal bar is redrawn at most this often: more is invisible and costs console writes.
constexpr double kRedrawSeconds = 0.1;
// ANSI "erase to end of line": a redraw shorter than the previous one leaves no stale tail.
constexpr const char* kEraseLine = "\x1b[K";

double seconds_between(Progress::Clock::time_point a, Progress::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int decimal_digits(int64_t v) {
  int n = 1;
  for (v = v < 0 ? -v : v; v >= 10; v /= 10) ++n;
  return n;
}

}  // namespace

std::string format_duration(double seconds) {
  // Beyond int64 seconds llround is undefined; such an ETA is as unknown as a NaN one.
  if (!std::isfinite(seconds) || std::fabs(seconds) >= 9e18) return "?";
  const int64_t total = std::llround(std::fabs(seconds));
  const char* sign = seconds < 0 && total > 0 ? "-" : "";
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[48];
  if (h > 0) std::snprintf(buf, sizeof buf, "%s%" PRId64 ":%02" PRId64 ":%02" PRId64, sign, h, m, s);
  else std::snprintf(buf, sizeof buf, "%s%" PRId64 ":%02" PRId64, sign, m, s);
  return buf;
}

std::string format_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double images_per_second,
                            double eta_seconds, double running_loss, int width) {
  EMBER_CHECK(width >= 0, "format_progress: expected a bar width >= 0, found ", width);
  // Filled cells round down, so the bar is full only when the epoch is.
  int64_t filled = steps > 0 ? std::clamp<int64_t>(step, 0, steps) * width / steps : 0;
  std::string out = "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + " [";
  out.append(static_cast<size_t>(filled), '#');
  out.append(static_cast<size_t>(width - filled), '.');
  out += "]  ";
  // The step is right-aligned to the width of the step count so redraws do not jitter.
  char buf[96];
  std::snprintf(buf, sizeof buf, "%*" PRId64 "/%" PRId64 " steps  %.0f img/s  ETA ", decimal_digits(steps), step, steps,
                std::isfinite(images_per_second) ? images_per_second : 0.0);
  out += buf;
  out += eta_seconds >= 0 && std::isfinite(eta_seconds) ? format_duration(eta_seconds) : "?";
  if (!std::isnan(running_loss)) {
    std::snprintf(buf, sizeof buf, "  loss %.4f", running_loss);
    out += buf;
  }
  return out;
}

Progress::Progress(RunLog& log, bool terminal, double interval_seconds)
    : log_(log), terminal_(terminal), interval_(interval_seconds) {
  EMBER_CHECK(std::isfinite(interval_seconds) && interval_seconds >= 0,
              "output.log_interval: expected a number of seconds >= 0, found ", interval_seconds);
}

void Progress::begin_epoch(int64_t epoch, int64_t epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  start_ = last_draw_ = last_line_ = Clock::now();
  drawn_ = false;
}

bool Progress::due() const {
  const auto now = Clock::now();
  if (seconds_between(last_line_, now) >= interval_) return true;
  return terminal_ && (!drawn_ || seconds_between(last_draw_, now) >= kRedrawSeconds);
}

void Progress::update(int64_t step, int64_t images, double running_loss) {
  const auto now = Clock::now();
  const bool line_due = seconds_between(last_line_, now) >= interval_;
  const bool draw_due = terminal_ && (!drawn_ || seconds_between(last_draw_, now) >= kRedrawSeconds);
  if (!line_due && !draw_due) return;

  const double elapsed = seconds_between(start_, now);
  const double ips = elapsed > 0 ? static_cast<double>(images) / elapsed : 0.0;
  // Remaining steps at this epoch's average step time so far; unknown before the first step.
  const double eta =
      step > 0 && steps_ >= step ? elapsed * static_cast<double>(steps_ - step) / static_cast<double>(step) : -1.0;
  const std::string text = format_progress(epoch_, epochs_, step, steps_, ips, eta, running_loss);
  if (line_due) {
    // On a terminal the bar is the console's view; the file still gets the periodic line.
    if (terminal_) log_.file_line(text);
    else log_.line(text);
    last_line_ = now;
  }
  if (draw_due) {
    log_.console_raw("\r" + text + kEraseLine);
    last_draw_ = now;
    drawn_ = true;
  }
}

void Progress::end_epoch() {
  if (terminal_ && drawn_) log_.console_raw(std::string("\r") + kEraseLine);
  drawn_ = false;
}

}  // namespace ember::train
