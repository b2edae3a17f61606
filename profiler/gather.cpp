// One trace for the ranks of a job (see gather.h): the clock offsets through the store, and rank
// 0's merge of every rank's Chrome trace.
#include <ember/profiler/gather.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include <ember/core/error.h>
#include <ember/parallel/object_collectives.h>

namespace ember::profiler {

namespace {

std::string key(const ClockOptions& o, int rank, const char* what, int round = -1) {
  std::string k = o.key_prefix + std::to_string(rank) + "/" + what;
  return round < 0 ? k : k + "/" + std::to_string(round);
}

// Rank 0: answers each other rank's pings with its clock, one rank after another.
void answer_pings(parallel::Store& store, int world_size, const ClockOptions& o, const std::function<uint64_t()>& now) {
  for (int k = 1; k < world_size; ++k) {
    store.set(key(o, k, "go"), "1");
    for (int i = 0; i < o.round_trips; ++i) {
      store.get(key(o, k, "ping", i));
      store.set_nowait(key(o, k, "pong", i), std::to_string(now()));
    }
    for (int i = 0; i < o.round_trips; ++i) store.remove(key(o, k, "ping", i));
  }
}

// Rank k: its round trips to rank 0; the shortest one gives the offset.
ClockOffset ping(parallel::Store& store, int rank, const ClockOptions& o, const std::function<uint64_t()>& now) {
  store.get(key(o, rank, "go"));
  // Removed at once: rank 0 may set it again for a next measurement as soon as the last pong is out.
  store.remove(key(o, rank, "go"));
  ClockOffset best{0, std::numeric_limits<int64_t>::max(), o.round_trips};
  for (int i = 0; i < o.round_trips; ++i) {
    const uint64_t t0 = now();
    store.set_nowait(key(o, rank, "ping", i), "");
    const std::string answer = store.get(key(o, rank, "pong", i));
    const uint64_t t3 = now();
    const uint64_t t = std::stoull(answer);  // rank 0's clock, some moment between t0 and t3
    const uint64_t trip = t3 - t0;
    const auto residual = static_cast<int64_t>((trip + 1) / 2);  // rounded up: the midpoint is rounded down
    if (residual < best.residual_ns) {
      best.residual_ns = residual;
      best.offset_ns = static_cast<int64_t>(t0 + trip / 2 - t);  // two's complement: negative offsets too
    }
  }
  for (int i = 0; i < o.round_trips; ++i) store.remove(key(o, rank, "pong", i));
  return best;
}

double us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

ClockOffset measure_clock_offset(parallel::Store& store, int rank, int world_size, const ClockOptions& options) {
  EMBER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "measure_clock_offset: rank ", rank,
              " is not in a world of ", world_size);
  EMBER_CHECK(options.round_trips >= 1, "measure_clock_offset: round_trips must be >= 1, got ", options.round_trips);
  const std::function<uint64_t()> now = options.clock ? options.clock : std::function<uint64_t()>(now_ns);
  if (rank == 0) {
    answer_pings(store, world_size, options, now);
    return {};
  }
  return ping(store, rank, options, now);
}

ClockOffset measure_clock_offset(const parallel::ProcessGroup& group, const ClockOptions& options) {
  if (group.world_size() == 1) return {};
  const parallel::RankInfo& info = group.info();
  parallel::TcpStoreOptions so;
  so.host = info.master_addr;
  so.port = info.master_port;
  so.timeout_s = group.timeout_s();
  so.origin = "the job's store (MASTER_ADDR=" + info.master_addr + ", MASTER_PORT=" + std::to_string(info.master_port) +
              "), for the profiler's clock offsets";
  parallel::TcpStore store(so);
  return measure_clock_offset(store, group.rank(), group.world_size(), options);
}

GatheredTrace gather_chrome_trace(const Profile& profile, parallel::ProcessGroup& group, const ClockOffset& clock) {
  const int rank = group.rank(), world = group.world_size();
  // Each rank: a header line (its start and clock offset), then its own trace.
  const nlohmann::json header = {{"origin_ns", profile.origin_ns()},
                                 {"offset_ns", clock.offset_ns},
                                 {"residual_ns", clock.residual_ns},
                                 {"round_trips", clock.round_trips}};
  std::string mine = header.dump() + "\n" + profile.chrome_trace_json(rank);
  std::vector<std::string> all;
  if (world > 1) {
    all = parallel::all_gather_strings(group, mine);
  } else {
    all.push_back(std::move(mine));
  }
  if (rank != 0) return {};
  return detail::merge_chrome_traces(all);
}

GatheredTrace detail::merge_chrome_traces(const std::vector<std::string>& all) {
  const int world = static_cast<int>(all.size());
  GatheredTrace out;
  std::vector<nlohmann::json> headers;
  std::vector<nlohmann::ordered_json> traces;
  for (const std::string& text : all) {
    const size_t nl = text.find('\n');
    headers.push_back(nlohmann::json::parse(text.substr(0, nl)));
    traces.push_back(nlohmann::ordered_json::parse(text.substr(nl + 1)));
  }
  // Each rank's start on rank 0's clock; the earliest is the merged trace's time 0.
  std::vector<int64_t> start(static_cast<size_t>(world));
  for (size_t r = 0; r < start.size(); ++r)
    start[r] = static_cast<int64_t>(headers[r]["origin_ns"].get<uint64_t>()) - headers[r]["offset_ns"].get<int64_t>();
  const int64_t zero = *std::min_element(start.begin(), start.end());

  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  nlohmann::ordered_json offsets = nlohmann::ordered_json::array();
  int64_t worst = 0;
  for (int r = 0; r < world; ++r) {
    const nlohmann::json& h = headers[static_cast<size_t>(r)];
    ClockOffset c{h["offset_ns"].get<int64_t>(), h["residual_ns"].get<int64_t>(), h["round_trips"].get<int>()};
    out.offsets.push_back(c);
    worst = std::max(worst, c.residual_ns);
    const double shift_us = us(start[static_cast<size_t>(r)] - zero);
    for (nlohmann::ordered_json& e : traces[static_cast<size_t>(r)]["traceEvents"]) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + shift_us;
      // An op's GPU time (args.gpu, which the trace reader reads) is on the rank's clock too.
      if (e.contains("args") && e["args"].contains("gpu")) {
        nlohmann::ordered_json& gpu = e["args"]["gpu"];
        if (gpu.contains("ts")) gpu["ts"] = gpu["ts"].get<double>() + shift_us;
      }
      if (e.value("ph", "") == "X") ++out.spans;
      events.push_back(std::move(e));
    }
    char label[96];
    std::snprintf(label, sizeof label, "clock %+.1f us +- %.1f us against rank 0", us(c.offset_ns), us(c.residual_ns));
    events.push_back({{"name", "process_labels"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"labels", label}}}});
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"sort_index", r}}}});
    offsets.push_back({{"rank", r},
                       {"offset_us", us(c.offset_ns)},
                       {"residual_us", us(c.residual_ns)},
                       {"round_trips", c.round_trips}});
  }
  nlohmann::ordered_json other = {
      {"ranks", world},
      {"clock",
       "each rank's steady clock moved onto rank 0's by its offset, measured through the job's store as NTP does "
       "(the shortest of several round trips); the true offset is within residual_us of offset_us"},
      {"max_residual_us", us(worst)},
      {"clock_offsets", offsets}};
  nlohmann::ordered_json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  out.json = doc.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";  // as Profile's
  return out;
}

}  // namespace ember::profiler
