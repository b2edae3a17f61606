// profiler::Profile over core/record.h: nested spans' self times add up to the root's total
// exactly; spans of another thread land on its own named row; the schedule keeps only its active
// steps; nothing is recorded without a profile; the Chrome trace is valid Trace Event Format
// whose complete events nest on each thread; a mnist_cnn step records each forward op once per
// layer that runs it, and its backward node; a backward node's span gets its first gradient; the
// memory counter's peak is the allocator's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/record.h>
#include <ember/ember.h>
#include <ember/profiler/profile.h>

#include "support/error_of.h"
#include "support/only_span.h"

using namespace ember;
using namespace ember::profiler;
using ember::testing::error_of;
using ember::testing::only_span;

namespace {

void busy_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

TEST_CASE("profiler: self times of nested spans add up to the root's total", "[cpu][profiler]") {
  Profile p;
  {
    EMBER_PROFILE_SCOPE("root");
    busy_for(std::chrono::microseconds(300));
    {
      RecordScope a("child a", Category::op);
      busy_for(std::chrono::microseconds(500));
      {
        EMBER_PROFILE_SCOPE("grandchild");
        busy_for(std::chrono::microseconds(200));
      }
    }
    {
      EMBER_PROFILE_SCOPE("child b");
      busy_for(std::chrono::microseconds(400));
    }
  }
  p.stop();
  REQUIRE(p.spans().size() == 4);
  const Span& root = only_span(p, "root");
  uint64_t self_sum = 0;
  for (const Span& s : p.spans()) self_sum += s.self_ns;
  CHECK(self_sum == root.event.end_ns - root.event.start_ns);  // exact: integer nanoseconds
  CHECK(root.self_ns >= 300'000);  // its own busy loop
  CHECK(root.self_ns < root.event.end_ns - root.event.start_ns - 1'100'000);  // excludes the children's 1.1 ms
  const Span& a = only_span(p, "child a");
  CHECK(a.event.category == Category::op);
  CHECK(a.event.depth == 1);
  CHECK(only_span(p, "grandchild").event.depth == 2);
  CHECK(a.self_ns == a.event.end_ns - a.event.start_ns -
                         (only_span(p, "grandchild").event.end_ns - only_span(p, "grandchild").event.start_ns));
  const std::vector<SpanStats> stats = p.key_averages();
  REQUIRE(stats.size() == 4);
  CHECK(stats.front().name == "root");  // sorted by total time
  CHECK(p.table().find("| child a | op | 1 |") != std::string::npos);
}

TEST_CASE("profiler: spans of other threads on their own named rows", "[cpu][profiler]") {
  Profile p;
  std::thread worker([] {
    set_thread_name("worker for the test");
    for (int i = 0; i < 3; ++i) EMBER_PROFILE_SCOPE("work item");
  });
  worker.join();
  { EMBER_PROFILE_SCOPE("on main"); }
  p.stop();
  std::map<std::string, std::set<uint32_t>> threads_of;
  for (const Span& s : p.spans()) threads_of[s.event.name].insert(s.event.thread);
  REQUIRE(threads_of["work item"].size() == 1);
  REQUIRE(threads_of["on main"].size() == 1);
  CHECK(*threads_of["work item"].begin() != *threads_of["on main"].begin());
  CHECK(thread_names().at(*threads_of["work item"].begin()) == "worker for the test");
  CHECK(p.key_averages().size() == 2);
}

TEST_CASE("profiler: the schedule keeps its active steps only, nothing is recorded without a profile",
          "[cpu][profiler]") {
  { EMBER_PROFILE_SCOPE("before any profile"); }
  CHECK_FALSE(recording());
  CHECK(take_events().empty());

  Profile p({.schedule = {.wait = 1, .warmup = 1, .active = 2, .repeat = 1}});
  for (int step = 0; step < 6; ++step) {
    { RecordScope s("work of step " + std::to_string(step), Category::user); }
    p.step();
  }
  p.stop();
  std::set<std::string> names;
  std::set<int64_t> steps;
  for (const Span& s : p.spans()) {
    names.insert(s.event.name);
    steps.insert(s.step);
  }
  // Steps 0 (wait) and 1 (warmup) are gone, 2 and 3 kept (with their step spans), 4 and 5 after
  // the one cycle: not recorded.
  CHECK(names == std::set<std::string>{"work of step 2", "work of step 3", "step 2", "step 3"});
  CHECK(steps == std::set<int64_t>{2, 3});
  CHECK_FALSE(recording());
  CHECK(error_of([] { Profile bad({.schedule = {.wait = -1}}); }).find("must be >= 0") != std::string::npos);
  // active 0 means no schedule: a wait or warmup with it would be silently ignored.
  CHECK(error_of([] {
          Profile bad({.schedule = {.wait = 2, .warmup = 0, .active = 0}});
        }).find("a schedule needs active >= 1") != std::string::npos);
}

TEST_CASE("profiler: a span opened under an earlier profile and closed during this one is not this one's",
          "[cpu][profiler]") {
  // A loader worker's scope open across two profiles: it began before the second one's origin,
  // and keeping it wrote a start before the trace's (an unsigned wrap-around: ts ~1.8e16 us).
  std::mutex mu;
  std::condition_variable cv;
  bool opened = false, close_now = false;
  std::thread worker;
  {
    Profile first;
    worker = std::thread([&] {
      RecordScope s("worker span", Category::data);
      std::unique_lock<std::mutex> lock(mu);
      opened = true;
      cv.notify_all();
      cv.wait(lock, [&] { return close_now; });
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return opened; });
  }
  Profile second;
  {
    std::lock_guard<std::mutex> lock(mu);
    close_now = true;
  }
  cv.notify_all();
  worker.join();
  { RecordScope s("main span", Category::user); }
  second.stop();
  for (const Span& sp : second.spans()) {
    INFO(sp.event.name);
    CHECK(sp.event.name != "worker span");
    CHECK(sp.event.start_ns >= second.origin_ns());
  }
  CHECK(only_span(second, "main span").event.depth == 0);
  const nlohmann::json trace = nlohmann::json::parse(second.chrome_trace_json(0));
  for (const auto& e : trace["traceEvents"])
    if (e.contains("ts")) CHECK(e["ts"].get<double>() >= 0);
}

TEST_CASE("profiler: stop() inside a scope opened in the step is an error naming it, and the step then ends as usual",
          "[cpu][profiler]") {
  Profile p({.schedule = {.wait = 0, .warmup = 0, .active = 2, .repeat = 1}});
  {
    RecordScope open("final block", Category::user);
    CHECK(error_of([&] { p.stop(); }).find("Profile::stop: called inside the span 'final block'") != std::string::npos);
  }
  p.stop();
  CHECK(only_span(p, "step 0").event.depth == 0);
  CHECK(only_span(p, "final block").event.depth == 1);  // inside step 0's span
  CHECK(take_events().empty());  // nothing left behind in the recording buffers
}

TEST_CASE("profiler: a span name that is not UTF-8 is written with U+FFFD, not an exception", "[cpu][profiler]") {
  Profile p;
  { RecordScope s(std::string("bad \xff name"), Category::user); }
  p.stop();
  std::string json;
  REQUIRE_NOTHROW(json = p.chrome_trace_json(0));
  CHECK(json.find("bad \xEF\xBF\xBD name") != std::string::npos);
}

TEST_CASE("profiler: step() inside a scope opened in the step is an error naming the scope", "[cpu][profiler]") {
  Profile p({.schedule = {.wait = 0, .warmup = 0, .active = 2, .repeat = 1}});
  {
    RecordScope epoch("epoch 1", Category::user);  // opened in step 0, still open at step()
    const std::string what = error_of([&] { p.step(); });
    CHECK(what.find("Profile::step: called inside the span 'epoch 1', which began in step 0") != std::string::npos);
  }
  p.step();  // once the scope is closed, the step ends as usual
  p.stop();
  CHECK(only_span(p, "step 0").event.depth == 0);
  CHECK(only_span(p, "epoch 1").event.depth == 1);  // inside step 0's span, not around it
}

TEST_CASE("profiler: the Chrome trace is Trace Event Format with nested complete events", "[cpu][profiler]") {
  Profile p;
  for (int i = 0; i < 3; ++i) {
    EMBER_PROFILE_SCOPE("outer");
    {
      RecordScope inner("inner", Category::op);
      busy_for(std::chrono::microseconds(50));
    }
  }
  p.stop();
  const nlohmann::json doc = nlohmann::json::parse(p.chrome_trace_json(3));
  REQUIRE(doc.contains("traceEvents"));
  std::map<int64_t, std::vector<std::pair<double, double>>> by_thread;
  bool named_thread = false, named_process = false;
  for (const auto& e : doc["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    CHECK(e["pid"] == 3);
    if (e["ph"] == "M") {
      named_thread = named_thread || e["name"] == "thread_name";
      named_process = named_process || (e["name"] == "process_name" && e["args"]["name"] == "rank 3");
      continue;
    }
    REQUIRE(e["ph"] == "X");
    for (const char* key : {"name", "cat", "ts", "dur", "tid"}) CHECK(e.contains(key));
    CHECK(e["dur"].get<double>() >= 0);
    by_thread[e["tid"].get<int64_t>()].push_back(
        {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  CHECK(named_thread);
  CHECK(named_process);
  // On one thread two events are disjoint or one holds the other: never a partial overlap.
  for (auto& [tid, spans] : by_thread)
    for (const auto& a : spans)
      for (const auto& b : spans) {
        const bool disjoint = a.second <= b.first || b.second <= a.first;
        const bool a_holds_b = a.first <= b.first && b.second <= a.second;
        const bool b_holds_a = b.first <= a.first && a.second <= b.second;
        CHECK((disjoint || a_holds_b || b_holds_a));
      }
  CHECK(by_thread.begin()->second.size() == 6);
}

TEST_CASE("profiler: a mnist_cnn step records each op of the model once per layer and its backward",
          "[cpu][profiler]") {
  auto model = models::mnist_cnn();
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  Generator gen(1);
  const Tensor x = randn({2, 1, 28, 28}, {}, gen);
  const Tensor y = from_vector(std::vector<int64_t>{3, 7}, {2});
  constexpr int kSteps = 2;
  Profile p({.schedule = {.active = kSteps}});
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    layers::cross_entropy(model->forward(x), y).backward();
    opt.step();
    p.step();
  }
  p.stop();
  std::map<std::string, int64_t> calls;
  for (const SpanStats& s : p.key_averages()) calls[s.name] += s.calls;
  INFO(p.table());
  // mnist_cnn: conv, relu, conv, relu, max-pool, dropout, linear (matmul + bias add), relu,
  // dropout, linear; then the loss.
  const std::map<std::string, int64_t> per_step = {
      {"conv2d", 2},          {"relu", 3},           {"max_pool2d", 1},     {"dropout", 2},
      {"matmul", 2},          {"cross_entropy", 1},  {"Conv2dBackward", 2}, {"MaxPool2dBackward", 1},
      {"DropoutBackward", 2}, {"MatmulBackward", 2}, {"ReluBackward", 3},   {"CrossEntropyBackward", 1},
      {"optimizer step", 1}};
  for (const auto& [name, n] : per_step) {
    INFO(name);
    CHECK(calls[name] == n * kSteps);
  }
  CHECK(calls["step 0"] == 1);
  CHECK(calls["step 1"] == 1);
}

TEST_CASE("profiler: the memory counter follows the CPU allocator, and its peak is the allocator's",
          "[cpu][profiler]") {
  auto& alloc = dynamic_cast<CachingAllocator&>(cpu_allocator());
  Profile p;
  alloc.reset_peak();
  const size_t before = alloc.stats().allocated;
  {
    Tensor a = zeros({1000, 1000});  // 4 MB
    Tensor b = zeros({500, 500});
    Tensor c = a + 1.0;  // a third live tensor: the peak
  }
  Tensor d = zeros({10});
  p.stop();
  double peak = 0;
  int64_t samples = 0;
  for (const CounterSample& s : p.counters()) {
    if (s.name != "memory cpu") continue;
    ++samples;
    CHECK(s.value >= 0);
    peak = std::max(peak, s.value);
  }
  CHECK(samples == 7);  // 4 allocations (a, b, c, d) and 3 frees, one sample each
  CHECK(peak == static_cast<double>(alloc.stats().peak_allocated));
  CHECK(peak >= static_cast<double>(before + 2 * 4'000'000));
  const nlohmann::json doc = nlohmann::json::parse(p.chrome_trace_json());
  int64_t counters = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "C") {
      ++counters;
      CHECK(e["args"]["bytes"].get<double>() >= 0);
    }
  CHECK(counters == samples);
}

TEST_CASE("profiler: the table sorts by total, self time or calls, keeps the top N, groups by input shapes",
          "[cpu][profiler]") {
  Profile p;
  for (int i = 0; i < 3; ++i) {
    RecordScope many("many calls", Category::op);  // 3 calls, short
  }
  {
    RecordScope outer("long outer", Category::user);  // the longest total, little self time
    RecordScope inner("long inner", Category::op);
    busy_for(std::chrono::microseconds(2000));
  }
  p.stop();
  const auto names = [](const std::vector<SpanStats>& stats) {
    std::vector<std::string> out;
    for (const SpanStats& s : stats) out.push_back(s.name);
    return out;
  };
  CHECK(names(p.key_averages({.sort = SortBy::total})).front() == "long outer");
  CHECK(names(p.key_averages({.sort = SortBy::self})).front() == "long inner");
  CHECK(names(p.key_averages({.sort = SortBy::calls})).front() == "many calls");
  const std::string top1 = p.table({.sort = SortBy::calls, .top = 1});
  INFO(top1);
  CHECK(top1.find("| many calls | op | 3 |") != std::string::npos);
  CHECK(top1.find("long") == std::string::npos);
  CHECK(std::count(top1.begin(), top1.end(), '\n') == 3);  // header, separator, one row
  CHECK(p.table(2) == p.table({.top = 2}));
}

TEST_CASE("profiler: the table counts a collective's calls together, whatever their sequence numbers",
          "[cpu][profiler]") {
  Profile p;
  for (int seq : {7, 8, 12}) RecordScope c("all_reduce #" + std::to_string(seq) + " on (6,) f32", Category::comm);
  { RecordScope c("broadcast #9 on (6,) f32", Category::comm); }
  { RecordScope u("block #3", Category::user); }  // a user's own name stays as written
  p.stop();
  std::map<std::string, int64_t> calls;
  for (const SpanStats& s : p.key_averages()) calls[s.name] = s.calls;
  CHECK(calls ==
        std::map<std::string, int64_t>{{"all_reduce on (6,) f32", 3}, {"broadcast on (6,) f32", 1}, {"block #3", 1}});
}

TEST_CASE("profiler: record_shapes puts ops' input shapes and dtypes in their spans and the trace", "[cpu][profiler]") {
  const Tensor x = randn({2, 1, 8, 8}), w = randn({4, 1, 3, 3}), b = randn({4});
  const Tensor x5 = randn({5, 1, 8, 8});
  {
    Profile p({.record_shapes = true});
    conv2d(x, w, b);
    conv2d(x5, w, b);
    conv2d(x, w, b);
    add(x, 1.0);
    p.stop();
    std::map<std::string, int> shapes;
    for (const Span& s : p.spans())
      if (s.event.name == "conv2d") ++shapes[s.event.input_shapes];
    CHECK(shapes == std::map<std::string, int>{{"[2, 1, 8, 8] f32, [4, 1, 3, 3] f32, [4] f32", 2},
                                               {"[5, 1, 8, 8] f32, [4, 1, 3, 3] f32, [4] f32", 1}});
    CHECK(only_span(p, "add").event.input_shapes == "[2, 1, 8, 8] f32");
    // Grouped by shapes: a row per conv2d shape, with the shapes column.
    const std::string t = p.table({.group_by_shapes = true});
    INFO(t);
    CHECK(t.find("| span | category | input shapes | calls |") != std::string::npos);
    CHECK(t.find("| conv2d | op | [2, 1, 8, 8] f32, [4, 1, 3, 3] f32, [4] f32 | 2 |") != std::string::npos);
    CHECK(t.find("| conv2d | op | [5, 1, 8, 8] f32, [4, 1, 3, 3] f32, [4] f32 | 1 |") != std::string::npos);
    CHECK(p.table().find("| conv2d | op | 3 |") != std::string::npos);  // not grouped: one row
    const nlohmann::json doc = nlohmann::json::parse(p.chrome_trace_json());
    int with_dims = 0;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "X" && e["name"] == "conv2d") {
        REQUIRE(e["args"].contains("Input Dims"));
        ++with_dims;
      }
    CHECK(with_dims == 3);
  }
  {
    Profile p;  // record_shapes off by default: nothing formatted
    conv2d(x, w, Tensor());
    p.stop();
    CHECK(only_span(p, "conv2d").event.input_shapes.empty());
    CHECK(p.chrome_trace_json().find("Input Dims") == std::string::npos);
    CHECK_FALSE(recording_shapes());
  }
  CHECK(format_input_shapes({&x, nullptr}) == "[2, 1, 8, 8] f32, none");
}

TEST_CASE("profiler: a backward node is handed its first gradient (its shape, and on a GPU its GPU time)",
          "[cpu][profiler]") {
  Tensor x = randn({3, 4});
  x.requires_grad_();
  Profile p({.record_shapes = true});
  sum(x * x).backward();
  p.stop();
  CHECK(only_span(p, "SumBackward").event.input_shapes == "[] f32");
  CHECK(only_span(p, "MulBackward").event.input_shapes == "[3, 4] f32");
}

TEST_CASE("profiler: ops on the CPU carry no GPU time, the table and trace have no GPU column or row",
          "[cpu][profiler]") {
  const Tensor x = randn({16});
  Profile p;
  const Tensor y = add(x, x);
  p.stop();
  CHECK(only_span(p, "add").event.gpu_device == -1);
  CHECK(only_span(p, "add").event.gpu_events[0] == nullptr);
  CHECK(p.table().find("GPU") == std::string::npos);
  CHECK(p.chrome_trace_json(0).find("GPU cuda:") == std::string::npos);
  (void)y;
}

TEST_CASE("profiler: memory false records no allocator counters", "[cpu][profiler]") {
  {
    Profile p({.memory = false});
    Tensor a = zeros({1000});
    p.stop();
    CHECK(p.counters().empty());
  }
  Profile p;  // the default keeps them
  Tensor a = zeros({1000});
  p.stop();
  CHECK_FALSE(p.counters().empty());
}
