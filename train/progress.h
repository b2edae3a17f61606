#pragma once
// Progress of an epoch: on a terminal, a bar redrawn in place; otherwise (and always in log.txt)
// a plain line every `interval` seconds.
//
//   epoch 3/10 [##########..........]  234/469 steps  1834 img/s  ETA 0:07  loss 0.3121
#include <chrono>
#include <cstdint>
#include <string>

#include <ember/train/run_log.h>

namespace ember::train {

/// The text of one progress report (no '\r' or newline), `width` characters of bar.
/// eta_seconds < 0 prints "ETA ?"; running_loss NaN omits the loss.
std::string format_progress(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double images_per_second,
                            double eta_seconds, double running_loss, int width = 20);
/// "1:02:03" for hours, "7:05" under an hour, "0:07" under a minute.
std::string format_duration(double seconds);

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  /// terminal: redraw a bar on the log's console at most 10 times a second (RunLog::console_raw);
  /// plain lines go to the file every `interval` seconds, and to the console too when !terminal.
  Progress(RunLog& log, bool terminal, double interval_seconds);

  void begin_epoch(int64_t epoch, int64_t epochs, int64_t steps);
  /// True when the next update() would print something: call it before computing an expensive
  /// running loss (a device sync), and skip the update otherwise.
  bool due() const;
  /// After step `step` (1-based) with `images` images done this epoch.
  void update(int64_t step, int64_t images, double running_loss);
  /// Clears the bar (terminal) so the epoch's summary line prints cleanly.
  void end_epoch();

 private:
  RunLog& log_;
  bool terminal_;
  double interval_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  Clock::time_point start_, last_draw_, last_line_;
  bool drawn_ = false;
};

}  // namespace ember::train
