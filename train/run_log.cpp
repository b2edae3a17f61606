// RunLog: plain lines to the console, "YYYY-mm-dd HH:MM:SS  text" lines to log.txt.
#include <ember/train/run_log.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string_view>

#include <ember/core/error.h>

namespace ember::train {

namespace {

// Local wall-clock time, to the second: log.txt is read next to the scheduler's and the system's
// logs, which use local time too.
std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// `text` without one trailing newline (callers may or may not end their lines).
std::string_view strip_newline(const std::string& text) {
  std::string_view v(text);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  return v;
}

// A failing log write (full disk) must not end a long run, but must not go unnoticed either:
// it is reported once per process on stderr.
void warn_write_failed(int err) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "ember: RunLog: writing the log file failed: %s (further failures not reported)\n",
                 std::strerror(err));
}

// Caller holds mu_. Every line of a multi-line text gets its own timestamp so log.txt stays
// greppable by time.
void write_file_lines(std::FILE* f, std::string_view text) {
  const std::string stamp = timestamp();
  size_t start = 0;
  int err = 0;  // errno of the first failure, captured before anything else can change it
  while (true) {
    const size_t nl = text.find('\n', start);
    const std::string_view part =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (std::fprintf(f, "%s  %.*s\n", stamp.c_str(), static_cast<int>(part.size()), part.data()) < 0 && err == 0)
      err = errno;
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  if (std::fflush(f) != 0 && err == 0) err = errno;
  if (err != 0) warn_write_failed(err);
}

}  // namespace

RunLog::RunLog(const std::string& log_path, std::FILE* console) : console_(console) {
  console_tty_ = console_ != nullptr && ::isatty(::fileno(console_)) == 1;
  if (!log_path.empty()) {
    file_ = std::fopen(log_path.c_str(), "a");
    EMBER_CHECK(file_ != nullptr, "RunLog: cannot open log file '", log_path, "' for append: ", std::strerror(errno));
  }
}

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

void RunLog::line(const std::string& text) {
  const std::string_view v = strip_newline(text);
  std::lock_guard<std::mutex> lock(mu_);
  if (console_) {
    std::fprintf(console_, "%.*s\n", static_cast<int>(v.size()), v.data());
    std::fflush(console_);
  }
  if (file_) write_file_lines(file_, v);
}

void RunLog::file_line(const std::string& text) {
  const std::string_view v = strip_newline(text);
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) write_file_lines(file_, v);
}

void RunLog::console_raw(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!console_) return;
  std::fwrite(text.data(), 1, text.size(), console_);
  std::fflush(console_);
}

}  // namespace ember::train
