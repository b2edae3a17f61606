// Progress reporting (train/progress.h) and the RunLog it writes through (train/run_log.h):
// exact formatting, timestamped file lines vs plain console lines, plain interval lines when the
// console is not a terminal, '\r' redraws (and interval lines only in the file) when it is.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/error.h>
#include <ember/train/progress.h>
#include <ember/train/run_log.h>
#include "support/temp_dir.h"

using ember::train::format_duration;
using ember::train::format_progress;
using ember::train::Progress;
using ember::train::RunLog;
namespace fs = std::filesystem;

namespace {

// A log path in a fresh temp dir (removed at scope exit); the file itself does not exist yet.
struct TempLog {
  ember::testing::TempDir dir;
  fs::path path = dir.path() / "run_log.txt";
  // What the log holds; "" while the file has not been created.
  std::string read() const {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
};

// An anonymous temp file standing in for stdout (never a terminal).
struct Console {
  std::FILE* f = std::tmpfile();
  Console() { REQUIRE(f != nullptr); }
  ~Console() { std::fclose(f); }
  std::string read() const {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fseek(f, 0, SEEK_END);  // later writes append after what was read
    return out;
  }
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

size_t count_char(const std::string& s, char c) { return static_cast<size_t>(std::count(s.begin(), s.end(), c)); }

// "2026-11-21 10:00:03  <text>"
const std::regex kStampedLine(R"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}  (.*))");

std::string unstamp(const std::string& line) {
  std::smatch m;
  REQUIRE(std::regex_match(line, m, kStampedLine));
  return m[1];
}

}  // namespace

TEST_CASE("format_duration prints m:ss under an hour and h:mm:ss above", "[cpu]") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(7) == "0:07");
  CHECK(format_duration(7.4) == "0:07");
  CHECK(format_duration(7.6) == "0:08");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(425) == "7:05");
  CHECK(format_duration(3599) == "59:59");
  CHECK(format_duration(3600) == "1:00:00");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(36000 + 59 * 60 + 1) == "10:59:01");
  CHECK(format_duration(-7) == "-0:07");
  CHECK(format_duration(std::nan("")) == "?");
  CHECK(format_duration(INFINITY) == "?");
}

TEST_CASE("format_progress builds the exact progress text", "[cpu]") {
  // 234 * 20 / 469 = 9.98: cells round down, so the bar is full only at the last step.
  CHECK(format_progress(3, 10, 234, 469, 1834.4, 7, 0.31214, 20) ==
        "epoch 3/10 [#########...........]  234/469 steps  1834 img/s  ETA 0:07  loss 0.3121");
  // The step is padded to the width of the step count; unknown ETA; NaN loss omitted.
  CHECK(format_progress(1, 2, 5, 469, 99.6, -1, std::nan(""), 10) ==
        "epoch 1/2 [..........]    5/469 steps  100 img/s  ETA ?");
  CHECK(format_progress(2, 2, 469, 469, 50, 0, 1.0, 4) ==
        "epoch 2/2 [####]  469/469 steps  50 img/s  ETA 0:00  loss 1.0000");
  CHECK(format_progress(1, 1, 0, 8, 0, 3700, 2.5, 8) ==
        "epoch 1/1 [........]  0/8 steps  0 img/s  ETA 1:01:40  loss 2.5000");
  CHECK(format_progress(1, 1, 1, 1, 10, 0, std::nan(""), 0) == "epoch 1/1 []  1/1 steps  10 img/s  ETA 0:00");
  CHECK_THROWS_AS(format_progress(1, 1, 1, 1, 10, 0, 0, -1), ember::Error);
}

TEST_CASE("RunLog writes plain lines to the console and timestamped lines to the file", "[cpu]") {
  TempLog file;
  Console console;
  {
    RunLog log(file.path.string(), console.f);
    CHECK_FALSE(log.console_is_terminal());
    log.line("epoch 1: loss 0.5");
    log.line("with newline\n");
    log.file_line("file only");
    log.console_raw("\rraw");
    log.line("two\nlines");
  }
  CHECK(console.read() == "epoch 1: loss 0.5\nwith newline\n\rrawtwo\nlines\n");
  const auto lines = lines_of(file.read());
  REQUIRE(lines.size() == 5);
  CHECK(unstamp(lines[0]) == "epoch 1: loss 0.5");
  CHECK(unstamp(lines[1]) == "with newline");
  CHECK(unstamp(lines[2]) == "file only");
  CHECK(unstamp(lines[3]) == "two");  // every line of a multi-line text is stamped
  CHECK(unstamp(lines[4]) == "lines");

  // A second log on the same file appends (a resumed run continues its log).
  {
    RunLog log(file.path.string(), console.f);
    log.line("resumed");
  }
  const auto again = lines_of(file.read());
  REQUIRE(again.size() == 6);
  CHECK(unstamp(again[0]) == "epoch 1: loss 0.5");
  CHECK(unstamp(again[5]) == "resumed");
}

TEST_CASE("RunLog without a file writes the console only, and a bad path is an error naming it", "[cpu]") {
  Console console;
  {
    RunLog log("", console.f);
    log.line("hello");
    log.file_line("dropped: there is no file");
  }
  CHECK(console.read() == "hello\n");
  const std::string bad = "/nonexistent_dir_for_ember_test/log.txt";
  CHECK_THROWS_WITH(RunLog(bad, console.f), Catch::Contains(bad));
}

TEST_CASE("RunLog lines from many threads never interleave", "[cpu]") {
  TempLog file;
  Console console;
  constexpr int kThreads = 4, kLines = 200;
  {
    RunLog log(file.path.string(), console.f);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&log, t] {
        for (int i = 0; i < kLines; ++i) log.line("thread " + std::to_string(t) + " line " + std::to_string(i));
      });
    for (auto& th : threads) th.join();
  }
  const std::regex whole(R"(thread (\d) line (\d+))");
  const auto console_lines = lines_of(console.read());
  REQUIRE(console_lines.size() == kThreads * kLines);
  for (const auto& l : console_lines) REQUIRE(std::regex_match(l, whole));
  const auto file_lines = lines_of(file.read());
  REQUIRE(file_lines.size() == kThreads * kLines);
  std::vector<int> next(kThreads, 0);  // each thread's lines appear in its order
  for (const auto& l : file_lines) {
    std::smatch m;
    const std::string body = unstamp(l);
    REQUIRE(std::regex_match(body, m, whole));
    const int t = std::stoi(m[1]);
    CHECK(std::stoi(m[2]) == next[t]++);
  }
}

TEST_CASE("Progress off a terminal prints plain lines at the interval to console and file", "[cpu]") {
  TempLog file;
  Console console;
  RunLog log(file.path.string(), console.f);
  {
    // Interval 0: every update is a line.
    Progress p(log, /*terminal=*/false, 0.0);
    p.begin_epoch(2, 5, 4);
    CHECK(p.due());
    p.update(1, 32, 0.5);
    p.update(2, 64, std::nan(""));
    p.update(4, 128, 0.25);
    p.end_epoch();
  }
  const std::string out = console.read();
  CHECK(count_char(out, '\r') == 0);
  const auto con = lines_of(out);
  REQUIRE(con.size() == 3);
  CHECK(con[0].rfind("epoch 2/5 [#####...............]  1/4 steps  ", 0) == 0);
  CHECK(con[0].find("loss 0.5000") != std::string::npos);
  CHECK(con[1].find("loss") == std::string::npos);
  CHECK(con[2].rfind("epoch 2/5 [####################]  4/4 steps  ", 0) == 0);
  CHECK(con[2].find("ETA 0:00  loss 0.2500") != std::string::npos);
  const auto fl = lines_of(file.read());
  REQUIRE(fl.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(unstamp(fl[i]) == con[i]);
}

TEST_CASE("Progress off a terminal waits for the interval before the next line", "[cpu]") {
  TempLog file;
  Console console;
  RunLog log(file.path.string(), console.f);
  {
    // An hour: nothing can be due during this test.
    Progress p(log, false, 3600.0);
    p.begin_epoch(1, 1, 100);
    CHECK_FALSE(p.due());
    for (int s = 1; s <= 50; ++s) p.update(s, s * 8, 1.0);
    p.end_epoch();
  }
  CHECK(console.read().empty());
  CHECK(file.read().empty());
  {
    constexpr double kInterval = 0.05;
    Progress p(log, false, kInterval);
    p.begin_epoch(1, 1, 100);
    std::this_thread::sleep_for(std::chrono::duration<double>(kInterval * 1.2));
    CHECK(p.due());
    p.update(10, 80, 1.0);
    std::this_thread::sleep_for(std::chrono::duration<double>(kInterval * 1.2));
    p.update(20, 160, 1.0);
    p.end_epoch();
  }
  const auto con = lines_of(console.read());
  REQUIRE(con.size() == 2);
  CHECK(con[0].find(" 10/100 steps") != std::string::npos);
  CHECK(con[1].find(" 20/100 steps") != std::string::npos);
  CHECK(lines_of(file.read()).size() == 2);
}

TEST_CASE("Progress on a terminal redraws with carriage returns and logs lines only to the file", "[cpu]") {
  TempLog file;
  Console console;  // not a tty, but Progress is told it is one: the mode is the caller's choice
  RunLog log(file.path.string(), console.f);
  Progress p(log, /*terminal=*/true, 0.0);
  p.begin_epoch(1, 3, 10);
  CHECK(p.due());  // the first bar is always due
  p.update(1, 10, 0.75);
  std::string out = console.read();
  REQUIRE(out.size() > 1);
  CHECK(out[0] == '\r');
  CHECK(out.find("epoch 1/3 [##..................]   1/10 steps") != std::string::npos);
  CHECK(count_char(out, '\n') == 0);
  p.end_epoch();
  out = console.read();
  CHECK(out.back() != '\n');
  CHECK(out.rfind('\r') > out.find("steps"));  // end_epoch returned to the start of the line
  CHECK(count_char(out, '\n') == 0);
  // With interval 0 every update that printed also went to the file as a whole line.
  const auto fl = lines_of(file.read());
  REQUIRE(fl.size() == 1);
  CHECK(unstamp(fl[0]).rfind("epoch 1/3 [##..................]   1/10 steps", 0) == 0);
}

TEST_CASE("Progress on a terminal redraws at most ten times a second", "[cpu]") {
  TempLog file;
  Console console;
  RunLog log(file.path.string(), console.f);
  Progress p(log, true, 3600.0);
  const auto t0 = std::chrono::steady_clock::now();
  p.begin_epoch(1, 1, 100000);
  constexpr int kUpdates = 20000;
  for (int s = 1; s <= kUpdates; ++s)
    if (p.due()) p.update(s, s, 1.0);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = console.read();
  const size_t draws = count_char(out, '\r');
  CHECK(draws >= 1);
  CHECK(draws <= 1 + static_cast<size_t>(elapsed / 0.1) + 1);
  CHECK(draws < kUpdates);
  CHECK(file.read().empty());  // the hour-long interval never came due
}
