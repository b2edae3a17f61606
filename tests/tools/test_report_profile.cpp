// ember-report --profile's library (tools/report/profile.h) on a trace written by a real Profile:
// the timeline SVG draws the last kept step (its spans, ranks as rows, a row per thread, the time
// axis in ms, the legend), write_profile_report writes profile.md (table and verdict) and the
// SVG from a run directory, and a bad trace is an error naming the file and the JSON path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <ember/ember.h>
#include <ember/profiler/profile.h>
#include <ember/profiler/trace_reader.h>
#include "report/profile.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::report;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A run directory with profile/trace.json of three kept steps of a small model, a loader-like
// worker thread recording beside the main one.
std::string profiled_run(const TempDir& dir) {
  auto model = models::mnist_cnn();
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  const Tensor x = randn({4, 1, 28, 28});
  const Tensor y = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4});
  profiler::Profile p({.schedule = {.wait = 1, .active = 3}});
  for (int step = 0; step < 4; ++step) {
    std::thread worker([] {
      profiler::set_thread_name("loader worker 0");
      profiler::RecordScope s("collate batch", profiler::Category::data);
    });
    worker.join();
    { profiler::RecordScope wait("wait for batch", profiler::Category::data); }
    opt.zero_grad();
    layers::cross_entropy(model->forward(x), y).backward();
    opt.step();
    p.step();
  }
  p.stop();
  fs::create_directories(dir.path() / "run" / "profile");
  p.write_chrome_trace((dir.path() / "run" / "profile" / "trace.json").string(), 0);
  return (dir.path() / "run").string();
}

}  // namespace

TEST_CASE("profile report: the timeline draws the last kept step of a real trace", "[cpu]") {
  TempDir dir;
  const std::string run = profiled_run(dir);
  const auto ranks = profiler::load_chrome_trace(profile_trace_path(run));
  REQUIRE(ranks.size() == 1);
  size_t last_step_spans = 0;
  for (const profiler::Span& s : ranks[0].spans) last_step_spans += s.step == 3 ? 1 : 0;
  const std::string svg = svg_profile_timeline(ranks);
  INFO(svg.substr(0, 2000));
  CHECK(contains(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(contains(svg, "</svg>"));
  CHECK(contains(svg, "Timeline of step 3 ("));
  CHECK(contains(svg, ">rank 0</text>"));
  CHECK(contains(svg, ">main</text>"));
  CHECK(contains(svg, ">loader worker 0</text>"));
  CHECK(count_of(svg, "class=\"thread-row\"") == 2);
  CHECK(count_of(svg, "<rect class=\"span\"") == last_step_spans);  // step 3's spans, no others
  CHECK(contains(svg, "<title>conv2d (op): "));
  CHECK(contains(svg, "fill=\"#4e79a7\""));  // ops' colour
  CHECK(contains(svg, "ms from the step's start"));
  CHECK(contains(svg, "class=\"legend\""));
  // Every span lies within the plot: x from the label column to its right end.
  const std::regex rect(R"re(<rect class="span" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), w = std::stod((*it)[2]);
    CHECK(x >= 200 - 1e-9);
    CHECK(x + w <= 1100.5 + 1e-9);
  }
}

TEST_CASE("profile report: write_profile_report writes profile.md with the verdict and the timeline", "[cpu]") {
  TempDir dir;
  const std::string run = profiled_run(dir);
  const std::string out = (dir.path() / "out").string();
  const std::string text = write_profile_report(run, out);
  CHECK(contains(text, "# Profile: " + run + "/profile/trace.json"));
  CHECK(contains(text, "| span | category | calls |"));
  CHECK(contains(text, "| conv2d | op | 6 |"));  // 2 per step, 3 steps
  CHECK(contains(text, "## Verdict"));
  CHECK(contains(text, "| 0 | 3 |"));  // rank 0, 3 steps
  const std::string md = read_text(fs::path(out) / "profile.md");
  CHECK(contains(md, text));
  CHECK(contains(md, "![timeline](profile_timeline.svg)"));
  CHECK(contains(read_text(fs::path(out) / "profile_timeline.svg"), "Timeline of step 3"));
}

TEST_CASE("profile report: a bad trace is an error naming the file and the JSON path", "[cpu]") {
  TempDir dir;
  fs::create_directories(dir.path() / "run" / "profile");
  const std::string trace = (dir.path() / "run" / "profile" / "trace.json").string();
  std::ofstream(trace) << R"({"traceEvents": [{"ph": "X", "name": "a", "ts": "soon", "dur": 1, "pid": 0, "tid": 0}]})";
  const std::string out = (dir.path() / "out").string();
  const std::string e = error_of([&] { write_profile_report((dir.path() / "run").string(), out); });
  CHECK(contains(e, trace + ": traceEvents[0].ts: expected microseconds in [-1e15, 1e15], got \"soon\""));
  CHECK_FALSE(fs::exists(fs::path(out) / "profile.md"));
  CHECK(contains(error_of([&] { write_profile_report((dir.path() / "nowhere").string(), out); }),
                 "'" + (dir.path() / "nowhere").string() + "': no such run directory or trace file"));
  fs::create_directories(dir.path() / "unprofiled");
  CHECK(contains(
      error_of([&] { write_profile_report((dir.path() / "unprofiled").string(), out); }),
      (dir.path() / "unprofiled" / "profile" / "trace.json").string() + "' does not exist: was the run profiled"));
}
