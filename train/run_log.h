#pragma once
// RunLog: what a run prints goes to stdout and, with a timestamp, to the run directory's log.txt.
#include <cstdio>
#include <mutex>
#include <string>

namespace ember::train {

class RunLog {
 public:
  /// log_path "": stdout only. The file is opened for append (a resumed run continues its log);
  /// an unopenable file is an error naming it.
  explicit RunLog(const std::string& log_path = "", std::FILE* console = stdout);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  /// One line (no trailing newline needed) to the console and the file; both flushed.
  void line(const std::string& text);
  /// To the file only (e.g. progress lines while the console shows a bar).
  void file_line(const std::string& text);
  /// To the console only, without a newline or timestamp (progress bar redraws with '\r').
  void console_raw(const std::string& text);
  /// Whether the console is a terminal (isatty).
  bool console_is_terminal() const { return console_tty_; }

 private:
  std::mutex mu_;
  std::FILE* console_;
  std::FILE* file_ = nullptr;
  bool console_tty_ = false;
};

}  // namespace ember::train
