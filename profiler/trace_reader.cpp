// Reading Chrome traces back into spans (see trace_reader.h).
#include <ember/profiler/trace_reader.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include <ember/core/error.h>

namespace ember::profiler {

namespace {

using nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);  // an error message: never throws
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

struct Reader {
  const std::string& source;
  [[noreturn]] void fail(const std::string& where, const std::string& what, const json* got = nullptr) const {
    EMBER_FAIL(source, ": ", where, ": expected ", what, got ? ", got " + shown(*got) : std::string(" (missing)"));
  }
  const json& field(const json& e, const std::string& where, const char* key, const char* what) const {
    const auto it = e.find(key);
    if (it == e.end()) fail(where + "." + key, what);
    return *it;
  }
  // A time in microseconds (ts, dur): within +-1e15 us (31 years), so that it and sums of it stay
  // exact in int64 nanoseconds.
  double number(const json& e, const std::string& where, const char* key, bool non_negative = false) const {
    const char* expected = non_negative ? "microseconds in [0, 1e15]" : "microseconds in [-1e15, 1e15]";
    const json& v = field(e, where, key, expected);
    if (!v.is_number() || (non_negative && v.get<double>() < 0) || !(std::fabs(v.get<double>()) <= 1e15))
      fail(where + "." + key, expected, &v);
    return v.get<double>();
  }
  std::string string(const json& e, const std::string& where, const char* key) const {
    const json& v = field(e, where, key, "a string");
    if (!v.is_string()) fail(where + "." + key, "a string", &v);
    return v.get<std::string>();
  }
  // pid and tid: integers (a string tid is hashed into its own row name).
  int64_t id(const json& e, const std::string& where, const char* key) const {
    const json& v = field(e, where, key, "an integer");
    if (!v.is_number_integer()) fail(where + "." + key, "an integer", &v);
    return v.get<int64_t>();
  }
};

struct RawSpan {
  Span span;
  int64_t pid = 0, tid = 0;
  int64_t start_ns = 0, dur_ns = 0;
  int64_t gpu_ts_ns = 0, gpu_dur_ns = 0;  // args.gpu, when the op ran on a GPU
};

}  // namespace

Category category_from_name(const std::string& name) {
  for (Category c : {Category::user, Category::op, Category::backward, Category::data, Category::optimizer,
                     Category::comm, Category::step})
    if (name == category_name(c)) return c;
  return Category::user;
}

std::vector<RankProfile> parse_chrome_trace(const std::string& text, const std::string& source) {
  const Reader r{source};
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    EMBER_FAIL(source, ": not valid JSON: ", e.what());
  }
  const json* events = &doc;
  std::string root = "";
  if (doc.is_object()) {
    const auto it = doc.find("traceEvents");
    if (it == doc.end()) r.fail("traceEvents", "an array of trace events");
    events = &*it;
    root = "traceEvents";
  }
  if (!events->is_array()) r.fail(root.empty() ? "(top level)" : root, "an array of trace events", events);

  std::vector<RawSpan> raw;
  std::map<std::pair<int64_t, int64_t>, std::string> names;  // (pid, tid) -> thread name
  struct RawCounter {
    int64_t pid;
    std::string name;
    int64_t ts_ns;
    double value;
  };
  std::vector<RawCounter> counters;
  int64_t origin = INT64_MAX;
  for (size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    const std::string where = (root.empty() ? "" : root) + "[" + std::to_string(i) + "]";
    if (!e.is_object()) r.fail(where, "an object (a trace event)", &e);
    const std::string ph = r.string(e, where, "ph");
    if (ph == "X") {
      // A GPU row's copy of an op's kernels: the op's own event carries them in args.gpu.
      if (const auto c = e.find("cat"); c != e.end() && c->is_string() && *c == "gpu") continue;
      RawSpan s;
      s.span.event.name = r.string(e, where, "name");
      const double ts = r.number(e, where, "ts"), dur = r.number(e, where, "dur", true);
      s.pid = r.id(e, where, "pid");
      s.tid = r.id(e, where, "tid");
      s.start_ns = std::llround(ts * 1e3);
      s.dur_ns = std::llround(dur * 1e3);
      if (const auto c = e.find("cat"); c != e.end() && c->is_string())
        s.span.event.category = category_from_name(c->get<std::string>());
      if (const auto a = e.find("args"); a != e.end()) {
        if (!a->is_object()) r.fail(where + ".args", "an object", &*a);
        if (const auto st = a->find("step"); st != a->end()) {
          if (!st->is_number_integer()) r.fail(where + ".args.step", "an integer", &*st);
          s.span.step = st->get<int64_t>();
        }
        if (const auto d = a->find("Input Dims"); d != a->end())
          s.span.event.input_shapes = d->is_string() ? d->get<std::string>() : d->dump();
        if (const auto g = a->find("gpu"); g != a->end()) {
          const std::string at = where + ".args.gpu";
          if (!g->is_object()) r.fail(at, "an object with the op's GPU device, ts and dur", &*g);
          s.span.event.gpu_device = static_cast<int>(r.id(*g, at, "device"));
          s.gpu_ts_ns = std::llround(r.number(*g, at, "ts") * 1e3);
          s.gpu_dur_ns = std::llround(r.number(*g, at, "dur", true) * 1e3);
        }
      }
      origin = std::min(origin, s.start_ns);
      raw.push_back(std::move(s));
    } else if (ph == "M") {
      if (r.string(e, where, "name") != "thread_name") continue;
      const json& args = r.field(e, where, "args", "an object with the thread's name");
      if (!args.is_object()) r.fail(where + ".args", "an object with the thread's name", &args);
      names[{r.id(e, where, "pid"), r.id(e, where, "tid")}] = r.string(args, where + ".args", "name");
    } else if (ph == "C") {
      RawCounter c{r.id(e, where, "pid"), r.string(e, where, "name"), std::llround(r.number(e, where, "ts") * 1e3), 0};
      const json& args = r.field(e, where, "args", "an object with the counter's value");
      const json* value = nullptr;
      if (args.is_object())
        for (const auto& [k, v] : args.items())
          if (v.is_number()) {
            value = &v;
            break;
          }
      if (value == nullptr) r.fail(where + ".args", "an object with a number (the counter's value)", &args);
      c.value = value->get<double>();
      origin = std::min(origin, c.ts_ns);
      counters.push_back(std::move(c));
    }
  }

  // Ranks by pid; threads by tid, numbered in tid order within their rank.
  std::map<int64_t, std::map<int64_t, uint32_t>> threads;
  for (const RawSpan& s : raw) threads[s.pid][s.tid] = 0;
  for (const auto& [key, name] : names) threads[key.first].emplace(key.second, 0);
  for (const RawCounter& c : counters) threads[c.pid];
  std::vector<RankProfile> out;
  std::map<int64_t, size_t> rank_of;
  for (auto& [pid, tids] : threads) {
    rank_of[pid] = out.size();
    RankProfile rp;
    rp.rank = static_cast<int>(pid);
    uint32_t index = 0;
    for (auto& [tid, idx] : tids) {
      idx = index++;
      const auto n = names.find({pid, tid});
      rp.thread_names.push_back(n != names.end() ? n->second : "thread " + std::to_string(tid));
    }
    out.push_back(std::move(rp));
  }
  // Depths: per thread, by start and then the longer first (the parent of a child that starts
  // with it), each span inside the open ones that end after it starts.
  std::stable_sort(raw.begin(), raw.end(), [](const RawSpan& a, const RawSpan& b) {
    if (a.pid != b.pid || a.tid != b.tid) return std::tie(a.pid, a.tid) < std::tie(b.pid, b.tid);
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.dur_ns > b.dur_ns;
  });
  std::vector<int64_t> open_ends;
  for (size_t i = 0; i < raw.size(); ++i) {
    RawSpan& s = raw[i];
    if (i == 0 || raw[i - 1].pid != s.pid || raw[i - 1].tid != s.tid) open_ends.clear();
    while (!open_ends.empty() && open_ends.back() <= s.start_ns) open_ends.pop_back();
    s.span.event.depth = static_cast<uint32_t>(open_ends.size());
    open_ends.push_back(s.start_ns + s.dur_ns);
    s.span.event.start_ns = static_cast<uint64_t>(s.start_ns - origin);
    s.span.event.end_ns = s.span.event.start_ns + static_cast<uint64_t>(s.dur_ns);
    if (s.span.event.gpu_device >= 0) {
      s.span.event.gpu_start_ns = static_cast<uint64_t>(std::max<int64_t>(s.gpu_ts_ns - origin, 0));
      s.span.event.gpu_end_ns = s.span.event.gpu_start_ns + static_cast<uint64_t>(std::max<int64_t>(s.gpu_dur_ns, 0));
    }
    s.span.event.thread = threads[s.pid][s.tid];
    out[rank_of[s.pid]].spans.push_back(std::move(s.span));
  }
  for (RawCounter& c : counters) {
    RankProfile& rp = out[rank_of[c.pid]];
    rp.cuda = rp.cuda || c.name.rfind("memory cuda", 0) == 0;
    rp.counters.push_back({std::move(c.name), static_cast<uint64_t>(c.ts_ns - origin), c.value});
  }
  for (RankProfile& rp : out) compute_self_times(rp.spans);
  return out;
}

std::vector<RankProfile> load_chrome_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.good(), "cannot open the trace '", path, "' for reading");
  std::ostringstream text;
  text << f.rdbuf();
  EMBER_CHECK(!f.bad(), "reading the trace '", path, "' failed");
  return parse_chrome_trace(text.str(), path);
}

}  // namespace ember::profiler
