// Profile (see profile.h): the schedule, self times, the table and the Chrome trace.
#include <ember/profiler/profile.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include <ember/core/device.h>
#include <ember/core/error.h>

namespace ember::profiler {

namespace {

std::atomic<bool> g_session{false};

/// Microseconds from `origin` to `t` (nanoseconds of one clock), negative when t is earlier.
double us_since(uint64_t origin, uint64_t t) { return static_cast<double>(static_cast<int64_t>(t - origin)) / 1e3; }

}  // namespace

// Self time of each span: its total less the totals of the spans directly inside it on the same
// thread (spans of one thread nest: each closes before its parent does).
void compute_self_times(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.event.thread, a.event.start_ns, a.event.depth) <
           std::tie(b.event.thread, b.event.start_ns, b.event.depth);
  });
  std::vector<Span*> stack;
  for (Span& s : spans) {
    s.self_ns = s.event.end_ns - s.event.start_ns;
    while (!stack.empty() &&
           (stack.back()->event.thread != s.event.thread || stack.back()->event.end_ns <= s.event.start_ns))
      stack.pop_back();
    if (!stack.empty() && stack.back()->event.depth < s.event.depth) {
      Span& parent = *stack.back();
      parent.self_ns -= std::min(parent.self_ns, s.event.end_ns - s.event.start_ns);
    }
    stack.push_back(&s);
  }
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span& a, const Span& b) { return a.event.start_ns < b.event.start_ns; });
}

namespace {

bool sorted_before(const SpanStats& a, const SpanStats& b, SortBy by) {
  const auto key = [by](const SpanStats& s) -> uint64_t {
    switch (by) {
      case SortBy::self:
        return s.self_ns;
      case SortBy::calls:
        return static_cast<uint64_t>(s.calls);
      case SortBy::total:
        break;
    }
    return s.total_ns;
  };
  if (key(a) != key(b)) return key(a) > key(b);
  return std::tie(a.name, a.input_shapes) < std::tie(b.name, b.input_shapes);
}

// A collective's span names its call ("all_reduce #12 on (1181066,) f32", so that the trace pairs
// the ranks' halves); the table counts the calls of one kind and size together.
std::string table_name(const Event& e) {
  if (e.category != Category::comm) return e.name;
  const size_t at = e.name.find(" #");
  if (at == std::string::npos) return e.name;
  size_t end = at + 2;
  while (end < e.name.size() && e.name[end] >= '0' && e.name[end] <= '9') ++end;
  return end == at + 2 ? e.name : e.name.substr(0, at) + e.name.substr(end);
}

}  // namespace

std::vector<SpanStats> key_averages(const std::vector<Span>& spans, const TableOptions& options) {
  std::map<std::tuple<std::string, Category, std::string>, SpanStats> by;
  for (const Span& s : spans) {
    const std::string& shapes = options.group_by_shapes ? s.event.input_shapes : std::string();
    std::string name = table_name(s.event);
    SpanStats& st = by[{name, s.event.category, shapes}];
    st.name = std::move(name);
    st.category = s.event.category;
    st.input_shapes = shapes;
    ++st.calls;
    st.total_ns += s.event.end_ns - s.event.start_ns;
    st.self_ns += s.self_ns;
    if (s.event.gpu_device >= 0) st.gpu_ns += s.event.gpu_end_ns - s.event.gpu_start_ns;
  }
  std::vector<SpanStats> out;
  out.reserve(by.size());
  for (auto& [k, v] : by) out.push_back(std::move(v));
  std::stable_sort(out.begin(), out.end(),
                   [&](const SpanStats& a, const SpanStats& b) { return sorted_before(a, b, options.sort); });
  return out;
}

std::string table(const std::vector<Span>& spans, const TableOptions& options) {
  const std::vector<SpanStats> stats = key_averages(spans, options);
  // A GPU column when any op ran on a GPU under gpu_time.
  const bool gpu = std::any_of(stats.begin(), stats.end(), [](const SpanStats& s) { return s.gpu_ns > 0; });
  std::string out = options.group_by_shapes
                        ? "| span | category | input shapes | calls | total (ms) | self (ms) | "
                          "self per call (us) |"
                        : "| span | category | calls | total (ms) | self (ms) | self per call (us) |";
  out += gpu ? " GPU total (ms) |\n" : "\n";
  out += options.group_by_shapes ? "|---|---|---|--:|--:|--:|--:|" : "|---|---|--:|--:|--:|--:|";
  out += gpu ? "--:|\n" : "\n";
  size_t n = 0;
  for (const SpanStats& s : stats) {
    if (options.top > 0 && n++ >= options.top) break;
    char numbers[200];
    std::snprintf(numbers, sizeof numbers, "%lld | %.3f | %.3f | %.1f |", static_cast<long long>(s.calls),
                  static_cast<double>(s.total_ns) / 1e6, static_cast<double>(s.self_ns) / 1e6,
                  static_cast<double>(s.self_ns) / 1e3 / static_cast<double>(std::max<int64_t>(s.calls, 1)));
    out += "| " + s.name + " | " + category_name(s.category) + " | ";
    if (options.group_by_shapes) out += (s.input_shapes.empty() ? std::string("-") : s.input_shapes) + " | ";
    out += numbers;
    if (gpu) {
      std::snprintf(numbers, sizeof numbers, " %.3f |", static_cast<double>(s.gpu_ns) / 1e6);
      out += s.gpu_ns > 0 ? std::string(numbers) : std::string(" - |");
    }
    out += "\n";
  }
  return out;
}

Profile::Profile(ProfileOptions options) : options_(options) {
  const Schedule& s = options_.schedule;
  EMBER_CHECK(s.wait >= 0 && s.warmup >= 0 && s.active >= 0 && s.repeat >= 0,
              "Profile: schedule steps must be >= 0, got wait ", s.wait, ", warmup ", s.warmup, ", active ", s.active,
              ", repeat ", s.repeat);
  // active 0 is "no schedule" (everything recorded): a wait or warmup with it would be ignored.
  EMBER_CHECK(s.active > 0 || (s.wait == 0 && s.warmup == 0),
              "Profile: a schedule needs active >= 1 (active 0 records everything, without a schedule), got wait ",
              s.wait, ", warmup ", s.warmup, ", active 0");
  EMBER_CHECK(!g_session.exchange(true), "Profile: another Profile is running; one records at a time");
  try {
    origin_ns_ = now_ns();
    // Spans of an earlier session that ended while recording are not this one's (nor their events).
    for (Event& e : take_events()) release_gpu_events(e);
    take_counters();
    set_recording_options(options_.record_shapes, options_.memory);
    // Each device's clock is aligned with the host's when the first op on it records (record.h).
    if (options_.gpu_time && cuda_available()) set_recording_gpu(true);
    enter(phase_at(0));
  } catch (...) {  // no session: the next Profile may start
    set_recording(false);
    set_recording_gpu(false);
    set_recording_options(false, true);
    g_session.store(false);
    throw;
  }
  running_ = true;
}

Profile::~Profile() {
  // Scopes opened after the Profile have ended by now, so stop() finds the step's span innermost.
  try {
    if (running_) stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: Profile: %s\n", e.what());
  }
}

Profile::Phase Profile::phase_at(int64_t step) const {
  const Schedule& s = options_.schedule;
  if (s.active == 0) return Phase::active;
  const int64_t cycle = s.wait + s.warmup + s.active;
  if (s.repeat > 0 && step >= cycle * s.repeat) return Phase::done;
  const int64_t in = step % cycle;
  return in < s.wait ? Phase::wait : in < s.wait + s.warmup ? Phase::warmup : Phase::active;
}

void Profile::enter(Phase phase) {
  phase_ = phase;
  const bool on = phase == Phase::warmup || phase == Phase::active;
  set_recording(on);
  // The step as a span of its own around everything this thread records in it.
  step_open_ = on && options_.schedule.active > 0;  // steps as spans under a schedule
  if (step_open_) detail::begin("step " + std::to_string(step_), Category::step);
}

void Profile::keep(std::vector<Event> events, bool discard) {
  std::vector<CounterSample> samples = take_counters();
  // Every op's GPU events are released, also in steps thrown away (waits for their kernels).
  for (Event& e : events) resolve_gpu_time(e);
  if (discard) return;
  for (CounterSample& c : samples)
    if (c.time_ns >= origin_ns_) counters_.push_back(std::move(c));
  // A span that began before this profile (opened under an earlier one, on another thread, and
  // closed during this one) is not this profile's.
  for (Event& e : events)
    if (e.start_ns >= origin_ns_) spans_.push_back({std::move(e), step_, 0});
}

void Profile::end_step_span(const char* caller) {
  // The step's span must be this thread's innermost: a scope opened in the step and still open
  // would end after it, and the trace's spans on this thread would overlap partly.
  std::string open;
  Category category = Category::step;
  const bool any = detail::innermost_open(open, category);
  EMBER_CHECK(any && category == Category::step, "Profile::", caller, ": called inside the span '", open,
              "', which began in step ", step_, " and is still open: call ", caller,
              "() outside every scope this thread opens while profiling (after the block of its "
              "EMBER_PROFILE_SCOPE)");
  detail::end();
}

void Profile::step() {
  EMBER_CHECK(running_, "Profile::step: the profile has stopped");
  if (phase_ == Phase::done) {  // the schedule is over: a long run's later steps cost a branch
    ++step_;
    return;
  }
  if (step_open_) end_step_span("step");
  keep(take_events(), phase_ != Phase::active);  // warmup: recorded, thrown away
  ++step_;
  enter(phase_at(step_));
}

void Profile::stop() {
  if (!running_) return;
  if (step_open_) end_step_span("stop");
  step_open_ = false;
  set_recording(false);
  keep(take_events(), phase_ != Phase::active);
  set_recording_gpu(false);
  set_recording_options(false, true);
  running_ = false;
  phase_ = Phase::done;
  compute_self_times(spans_);
  g_session.store(false);
}

std::vector<SpanStats> Profile::key_averages(const TableOptions& options) const {
  return profiler::key_averages(spans_, options);
}

std::string Profile::table(size_t top) const { return profiler::table(spans_, {.top = top}); }

std::string Profile::table(const TableOptions& options) const { return profiler::table(spans_, options); }

std::string Profile::chrome_trace_json(int pid) const {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const std::vector<std::string> names = thread_names();
  std::vector<bool> used(names.size(), false);
  std::set<int> gpu_rows;
  for (const Span& s : spans_) {
    if (s.event.thread < used.size()) used[s.event.thread] = true;
    events.push_back({{"name", s.event.name},
                      {"cat", category_name(s.event.category)},
                      {"ph", "X"},
                      {"ts", us_since(origin_ns_, s.event.start_ns)},
                      {"dur", static_cast<double>(s.event.end_ns - s.event.start_ns) / 1e3},
                      {"pid", pid},
                      {"tid", s.event.thread},
                      {"args", {{"step", s.step}}}});
    if (!s.event.input_shapes.empty()) events.back()["args"]["Input Dims"] = s.event.input_shapes;
    if (s.event.gpu_device >= 0) {  // its kernels: in its args (what a reader reads), and on the GPU's row
      const double gpu_ts = (static_cast<double>(s.event.gpu_start_ns) - static_cast<double>(origin_ns_)) / 1e3;
      const double gpu_dur = static_cast<double>(s.event.gpu_end_ns - s.event.gpu_start_ns) / 1e3;
      events.back()["args"]["gpu"] = {{"device", s.event.gpu_device}, {"ts", gpu_ts}, {"dur", gpu_dur}};
      gpu_rows.insert(s.event.gpu_device);
      events.push_back({{"name", s.event.name},
                        {"cat", "gpu"},
                        {"ph", "X"},
                        {"ts", gpu_ts},
                        {"dur", gpu_dur},
                        {"pid", pid},
                        {"tid", kGpuRowTid + s.event.gpu_device},
                        {"args", {{"step", s.step}}}});
    }
  }
  for (int d : gpu_rows)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", kGpuRowTid + d},
                      {"args", {{"name", "GPU cuda:" + std::to_string(d) + " (each op's kernels)"}}}});
  for (const CounterSample& c : counters_)
    events.push_back({{"name", c.name},
                      {"ph", "C"},
                      {"ts", us_since(origin_ns_, c.time_ns)},
                      {"pid", pid},
                      {"args", {{"bytes", c.value}}}});
  for (size_t t = 0; t < names.size(); ++t)
    if (used[t])
      events.push_back(
          {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t}, {"args", {{"name", names[t]}}}});
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", pid},
                    {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(pid)}}}});
  nlohmann::ordered_json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  // A span or thread name that is not UTF-8 is written with U+FFFD rather than failing the write.
  return doc.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void Profile::write_chrome_trace(const std::string& path, int pid) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  EMBER_CHECK(f.good(), "Profile::write_chrome_trace: cannot open '", path, "' for writing");
  f << chrome_trace_json(pid);
  f.close();
  EMBER_CHECK(f.good(), "Profile::write_chrome_trace: writing '", path, "' failed (disk full?)");
}

}  // namespace ember::profiler
