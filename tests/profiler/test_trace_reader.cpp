// profiler/trace_reader.h: a trace written by a Profile reads back into the same spans (names,
// categories, nesting depth, self times to the nanosecond's rounding, steps, input shapes, thread
// names, counters); several pids become several ranks, aligned on one clock; bad files are errors
// naming the file, the JSON path and what was expected.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <ember/ember.h>
#include <ember/profiler/profile.h>
#include <ember/profiler/trace_reader.h>

#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::profiler;
using ember::testing::error_of;

namespace {
bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
}  // namespace

TEST_CASE("trace reader: a Profile's trace reads back into its spans", "[cpu][profiler]") {
  const Tensor x = randn({3, 4});
  Profile p({.schedule = {.active = 2}, .record_shapes = true});
  for (int step = 0; step < 2; ++step) {
    {
      EMBER_PROFILE_SCOPE("outer");  // closed before the step ends: spans nest within steps
      Tensor y = x * 2.0 + 1.0;
      std::thread worker([] {
        set_thread_name("reader test worker");
        EMBER_PROFILE_SCOPE("on the worker");
      });
      worker.join();
    }
    p.step();
  }
  p.stop();
  ember::testing::TempDir dir;
  const std::string path = dir.file("trace.json");
  p.write_chrome_trace(path, 0);
  const std::vector<RankProfile> ranks = load_chrome_trace(path);
  REQUIRE(ranks.size() == 1);
  const RankProfile& r = ranks[0];
  CHECK(r.rank == 0);
  REQUIRE(r.spans.size() == p.spans().size());
  CHECK(r.counters.size() == p.counters().size());
  CHECK_FALSE(r.cuda);
  // Span by span (both in order of start; ties keep the recorded order of nesting).
  std::map<std::string, std::vector<const Span*>> theirs, ours;
  for (const Span& s : p.spans()) theirs[s.event.name].push_back(&s);
  for (const Span& s : r.spans) ours[s.event.name].push_back(&s);
  REQUIRE(ours.size() == theirs.size());
  for (const auto& [name, list] : theirs) {
    INFO(name);
    REQUIRE(ours[name].size() == list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const Span& a = *list[i];
      const Span& b = *ours[name][i];
      CHECK(b.event.category == a.event.category);
      CHECK(b.event.depth == a.event.depth);
      CHECK(b.step == a.step);
      CHECK(b.event.input_shapes == a.event.input_shapes);
      const int64_t dur_a = static_cast<int64_t>(a.event.end_ns - a.event.start_ns);
      const int64_t dur_b = static_cast<int64_t>(b.event.end_ns - b.event.start_ns);
      CHECK(std::abs(dur_a - dur_b) <= 1);
      CHECK(std::abs(static_cast<int64_t>(a.self_ns) - static_cast<int64_t>(b.self_ns)) <= 3);
      CHECK(r.thread_names.at(b.event.thread) == thread_names().at(a.event.thread));
    }
  }
  CHECK(ours["mul"].front()->event.input_shapes == "[3, 4] f32");
  CHECK(table(r.spans) == p.table());  // the same table (the times agree to the microsecond's decimals)
}

TEST_CASE("trace reader: several pids are ranks on one clock", "[cpu][profiler]") {
  const std::string text = R"({"traceEvents": [
    {"name": "step 4", "cat": "step", "ph": "X", "ts": 1000.0, "dur": 500.0, "pid": 1, "tid": 7, "args": {"step": 4}},
    {"name": "conv2d", "cat": "op", "ph": "X", "ts": 1100.0, "dur": 200.0, "pid": 1, "tid": 7, "args": {"step": 4}},
    {"name": "step 4", "cat": "step", "ph": "X", "ts": 990.0, "dur": 400.0, "pid": 0, "tid": 0, "args": {"step": 4}},
    {"name": "memory cuda:1", "ph": "C", "ts": 1200.0, "pid": 1, "args": {"bytes": 4096}},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 7, "args": {"name": "main"}},
    {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 1"}}
  ], "displayTimeUnit": "ms"})";
  const std::vector<RankProfile> ranks = parse_chrome_trace(text, "two.json");
  REQUIRE(ranks.size() == 2);
  CHECK(ranks[0].rank == 0);
  CHECK(ranks[1].rank == 1);
  CHECK(ranks[0].spans.at(0).event.start_ns == 0);  // the earliest event of the file
  REQUIRE(ranks[1].spans.size() == 2);
  CHECK(ranks[1].spans[0].event.start_ns == 10'000);
  CHECK(ranks[1].spans[1].event.depth == 1);
  CHECK(ranks[1].spans[0].self_ns == 300'000);
  CHECK(ranks[1].thread_names.at(ranks[1].spans[0].event.thread) == "main");
  CHECK(ranks[1].cuda);
  CHECK_FALSE(ranks[0].cuda);
  REQUIRE(ranks[1].counters.size() == 1);
  CHECK(ranks[1].counters[0].value == 4096);
  CHECK(ranks[0].thread_names == std::vector<std::string>{"thread 0"});
}

TEST_CASE("trace reader: an op's GPU time comes from its args, the GPU row's copy is not a span", "[cpu][profiler]") {
  const std::string text = R"({"traceEvents": [
    {"name": "matmul", "cat": "op", "ph": "X", "ts": 1000.0, "dur": 20.0, "pid": 0, "tid": 0,
     "args": {"step": 2, "gpu": {"device": 0, "ts": 1015.0, "dur": 800.0}}},
    {"name": "matmul", "cat": "gpu", "ph": "X", "ts": 1015.0, "dur": 800.0, "pid": 0, "tid": 1000000, "args": {"step": 2}},
    {"name": "add", "cat": "op", "ph": "X", "ts": 1030.0, "dur": 5.0, "pid": 0, "tid": 0, "args": {"step": 2}}
  ]})";
  const std::vector<RankProfile> ranks = parse_chrome_trace(text, "gpu.json");
  REQUIRE(ranks.size() == 1);
  REQUIRE(ranks[0].spans.size() == 2);  // matmul and add, not the GPU row's copy
  const profiler::Event& mm = ranks[0].spans[0].event;
  CHECK(mm.name == "matmul");
  CHECK(mm.gpu_device == 0);
  CHECK(mm.gpu_start_ns == 15'000);
  CHECK(mm.gpu_end_ns == 815'000);
  CHECK(ranks[0].spans[1].event.gpu_device == -1);
  const std::string table = profiler::table(ranks[0].spans, {});
  INFO(table);
  CHECK(table.find("| matmul | op | 1 | 0.020 | 0.020 | 20.0 | 0.800 |") != std::string::npos);
  CHECK(table.find("| add | op | 1 | 0.005 | 0.005 | 5.0 | - |") != std::string::npos);
  CHECK(error_of([] {
          parse_chrome_trace(R"({"traceEvents": [{"name": "m", "ph": "X", "ts": 1, "dur": 1, "pid": 0, "tid": 0,
                                 "args": {"gpu": 3}}]})",
                             "bad.json");
        }).find("bad.json: traceEvents[0].args.gpu: expected an object") != std::string::npos);
}

TEST_CASE("trace reader: errors name the file, the JSON path and what was expected", "[cpu][profiler]") {
  const auto err = [](const std::string& text) { return error_of([&] { parse_chrome_trace(text, "t.json"); }); };
  CHECK(contains(err("{\"traceEvents\": ["), "t.json: not valid JSON"));
  CHECK(contains(err("{\"events\": []}"), "t.json: traceEvents: expected an array of trace events (missing)"));
  CHECK(contains(err("{\"traceEvents\": 3}"), "t.json: traceEvents: expected an array of trace events, got 3"));
  CHECK(contains(err(R"({"traceEvents": [{"ph": "M", "name": "x", "pid": 0}, 5]})"),
                 "t.json: traceEvents[1]: expected an object (a trace event), got 5"));
  CHECK(contains(err(R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": "abc", "pid": 0, "tid": 0}]})"),
                 "t.json: traceEvents[0].dur: expected microseconds in [0, 1e15], got \"abc\""));
  CHECK(contains(err(R"([{"ph": "X", "name": "a", "ts": 1, "dur": -2, "pid": 0, "tid": 0}])"),
                 "t.json: [0].dur: expected microseconds in [0, 1e15], got -2"));
  // A time past int64 nanoseconds (a writer's unsigned wrap-around) is refused, not overflowed.
  CHECK(contains(err(R"([{"ph": "X", "name": "a", "ts": 1.8e16, "dur": 2, "pid": 0, "tid": 0}])"),
                 "t.json: [0].ts: expected microseconds in [-1e15, 1e15], got 1.8e+16"));
  CHECK(contains(err(R"([{"ph": "X", "name": "a", "ts": 1, "dur": 2, "tid": 0}])"),
                 "t.json: [0].pid: expected an integer (missing)"));
  CHECK(contains(err(R"([{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 0, "tid": 0, "args": {"step": "x"}}])"),
                 "t.json: [0].args.step: expected an integer, got \"x\""));
  CHECK(contains(err(R"([{"name": "a"}])"), "t.json: [0].ph: expected a string (missing)"));
  CHECK(contains(error_of([] { load_chrome_trace("/nonexistent/dir/trace.json"); }),
                 "cannot open the trace '/nonexistent/dir/trace.json'"));
}
