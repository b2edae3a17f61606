// profiler/gather.h: clock offsets through the store and one trace for the ranks of a job.
// A rank whose clock is shifted by a known amount is measured within the residual the measurement
// states (rank 0's stamp lies between the pinger's two, so this is a bound, not a tolerance).
// Two DDP processes give one trace: two process rows, complete events with every field, on each
// rank an all-reduce on the tcp group's comm thread overlapping a backward span of that rank (the
// reducer's overlap), the two ranks' halves of each all-reduce overlapping once aligned (neither
// can end before the other began), an offset moving its rank's events by exactly that much, the
// offsets in "otherData", and a rank without spans still a row. Merging made-up ranks: an op's GPU
// time (args.gpu) moves with its rank's events, so the trace reader keeps it beside its host span.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/store.h>
#include <ember/profiler/gather.h>
#include <ember/profiler/profile.h>
#include <ember/profiler/trace_reader.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::profiler;

namespace {

// Conv2d(3, 16, 3) ReLU Conv2d(16, 16, 3) ReLU MaxPool2d(2) Flatten Linear(3136, 10): x (N, 3, 32, 32).
// The linear layer's gradients are ready first and fill a bucket of their own, whose all-reduce
// runs while the convolutions' backward does.
layers::ModulePtr convnet() {
  Generator gen(7);
  auto m = std::make_shared<layers::Sequential>();
  m->push_back(std::make_shared<layers::Conv2d>(3, 16, 3, layers::Conv2dOptions{}, gen));
  m->push_back(std::make_shared<layers::ReLU>());
  m->push_back(std::make_shared<layers::Conv2d>(16, 16, 3, layers::Conv2dOptions{}, gen));
  m->push_back(std::make_shared<layers::ReLU>());
  m->push_back(std::make_shared<layers::MaxPool2d>(2));
  m->push_back(std::make_shared<layers::Flatten>());
  m->push_back(std::make_shared<layers::Linear>(16 * 14 * 14, 10, true, gen));
  return m;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  REQUIRE(f.good());
}

// One rank: 4 DDP steps on the CPU under a profile (warmup 1, active 3); rank 0 writes the trace
// gathered with the measured offsets, and the same with rank 1's offset 1 s larger.
void ddp_child() {
  const std::string dir = std::getenv("EMBER_GATHER_DIR");
  auto pg = testing::child_group();
  const int rank = pg->rank();
  const ClockOffset clock = measure_clock_offset(*pg);
  CHECK(clock.round_trips == (rank == 0 ? 0 : 16));

  parallel::DdpOptions buckets;
  buckets.bucket_cap_mb = 0.1;
  parallel::DistributedDataParallel ddp(convnet(), pg, buckets);
  REQUIRE(ddp.buckets().size() >= 2);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01});
  ProfileOptions po;
  po.schedule.warmup = 1;
  po.schedule.active = 3;
  Profile p(po);
  for (int step = 0; step < 4; ++step) {
    Generator gen(100 + static_cast<uint64_t>(step * 2 + rank));
    const Tensor x = randn({8, 3, 32, 32}, {}, gen);
    std::vector<int64_t> y(8);
    for (int64_t i = 0; i < 8; ++i) y[size_t(i)] = (i + step) % 10;
    opt.zero_grad();
    layers::cross_entropy(ddp(x), from_vector(y, {8})).backward();
    opt.step();
    p.step();
  }
  p.stop();
  const GatheredTrace trace = gather_chrome_trace(p, *pg, clock);
  ClockOffset later = clock;
  if (rank == 1) later.offset_ns += 1'000'000'000;
  const GatheredTrace moved = gather_chrome_trace(p, *pg, later);

  // A rank that kept no span is still a row: here rank 1 records nothing.
  Profile quiet;
  if (rank == 0) {
    EMBER_PROFILE_SCOPE("only rank 0");
  }
  quiet.stop();
  const GatheredTrace sparse = gather_chrome_trace(quiet, *pg, clock);

  if (rank == 0) {
    REQUIRE(trace.offsets.size() == 2);
    CHECK(trace.spans > 0);
    CHECK(sparse.spans == 1);
    write_text(dir + "/trace.json", trace.json);
    write_text(dir + "/moved.json", moved.json);
    write_text(dir + "/sparse.json", sparse.json);
  } else {
    CHECK(trace.json.empty());
    CHECK(trace.offsets.empty());
  }
}

struct X {
  std::string name, cat;
  double start = 0, end = 0;
  int pid = 0, tid = 0;
};

struct Parsed {
  std::vector<X> spans;
  std::map<int, std::string> processes;  // pid -> process_name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> thread_name
  nlohmann::json other;
};

Parsed parse(const std::string& path) {
  const nlohmann::json doc = nlohmann::json::parse(testing::read_text(path));
  Parsed out;
  REQUIRE(doc.contains("traceEvents"));
  REQUIRE(doc.contains("otherData"));
  out.other = doc["otherData"];
  for (const auto& e : doc["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    if (e["ph"] == "M" && e["name"] == "process_name") out.processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") out.threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    for (const char* key : {"name", "cat", "ph", "ts", "dur", "pid", "tid"}) {
      INFO(e.dump());
      REQUIRE(e.contains(key));
    }
    const double ts = e["ts"], dur = e["dur"];
    out.spans.push_back({e["name"], e["cat"], ts, ts + dur, e["pid"], e["tid"]});
  }
  return out;
}

bool overlap(const X& a, const X& b, double slack_us = 0) {
  return a.start < b.end + slack_us && b.start < a.end + slack_us;
}

// A store server on a free loopback port; a rank's client copies these with its port and is_server false.
parallel::TcpStoreOptions server_options(double timeout_s) {
  parallel::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.timeout_s = timeout_s;
  return so;
}
}  // namespace

TEST_CASE("profiler gather child", "[.profiler_gather_child]") {
  testing::run_scenario("EMBER_GATHER_SCENARIO", {{"ddp", ddp_child}});
}

TEST_CASE("profiler: a rank's shifted clock is measured within the residual it states", "[cpu][profiler]") {
  const parallel::TcpStoreOptions so = server_options(30);
  parallel::TcpStore server(so);
  const int world = 3;
  // Rank k's clock reads shift[k] ahead of rank 0's; one negative, one of several seconds.
  const std::vector<int64_t> shift = {0, 2'500'000'123, -7'000'321};
  for (int attempt = 0; attempt < 2; ++attempt) {  // the keys are gone after each: the same prefix again
    std::vector<ClockOffset> got(world);
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; ++r)
      ranks.emplace_back([&, r] {
        parallel::TcpStoreOptions co = so;
        co.port = server.port();
        co.is_server = false;
        parallel::TcpStore store(co);
        ClockOptions shifted;
        shifted.round_trips = 8;
        shifted.clock = [&, r] { return now_ns() + static_cast<uint64_t>(shift[size_t(r)]); };
        got[size_t(r)] = measure_clock_offset(store, r, world, shifted);
      });
    ClockOptions plain;
    plain.round_trips = 8;
    got[0] = measure_clock_offset(server, 0, world, plain);
    for (std::thread& t : ranks) t.join();
    CHECK(got[0].offset_ns == 0);
    CHECK(got[0].residual_ns == 0);
    for (int r = 1; r < world; ++r) {
      INFO("rank " << r << ": offset " << got[size_t(r)].offset_ns << " ns, residual " << got[size_t(r)].residual_ns
                   << " ns, shifted by " << shift[size_t(r)] << " ns");
      CHECK(got[size_t(r)].round_trips == 8);
      CHECK(got[size_t(r)].residual_ns > 0);
      CHECK(std::llabs(got[size_t(r)].offset_ns - shift[size_t(r)]) <= got[size_t(r)].residual_ns);
    }
  }
  CHECK_FALSE(server.check({"ember/profiler/clock/1/go"}));
  CHECK_FALSE(server.check({"ember/profiler/clock/2/pong/0"}));
  CHECK_FALSE(server.check({"ember/profiler/clock/2/ping/7"}));
}

TEST_CASE("profiler: clock offsets measured twice back to back with one prefix, no pause between", "[cpu][profiler]") {
  // Rank 1 removed its "go" key only after its last round trip; rank 0, done by then, could already
  // have set it for the next measurement, which rank 1 then waited for until the store's timeout.
  const parallel::TcpStoreOptions so = server_options(5);
  parallel::TcpStore server(so);
  ClockOptions o;
  o.round_trips = 2;
  for (int trial = 0; trial < 10; ++trial) {
    std::string error;
    std::thread rank1([&] {
      try {
        parallel::TcpStoreOptions co = so;
        co.port = server.port();
        co.is_server = false;
        parallel::TcpStore store(co);
        for (int m = 0; m < 2; ++m) (void)measure_clock_offset(store, 1, 2, o);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    std::string error0;
    try {
      for (int m = 0; m < 2; ++m) (void)measure_clock_offset(server, 0, 2, o);
    } catch (const std::exception& e) {
      error0 = e.what();
    }
    rank1.join();
    INFO("trial " << trial);
    CHECK(error.empty());
    CHECK(error0.empty());
    if (!error.empty() || !error0.empty()) break;
  }
}

TEST_CASE("profiler: 2 DDP processes give one trace, all-reduce beside backward on each rank's row",
          "[multiproc][profiler][ddp]") {
  testing::TempDir dir;
  {
    testing::Ranks job("[.profiler_gather_child]", 2,
                       {"EMBER_GATHER_SCENARIO=ddp", "EMBER_GATHER_DIR=" + dir.str(), "EMBER_NUM_THREADS=1"});
    if (!job.wait_all(120)) return;
    job.check_all_passed();
  }
  const Parsed t = parse((dir.path() / "trace.json").string());
  CHECK(t.processes == std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}});

  // otherData: both ranks' offsets; the ranks share this machine's steady clock, so the true offset
  // is 0 and the measured one is within its residual of it.
  REQUIRE(t.other["ranks"] == 2);
  REQUIRE(t.other["clock_offsets"].size() == 2);
  const nlohmann::json& r1 = t.other["clock_offsets"][1];
  CHECK(r1["rank"] == 1);
  CHECK(r1["round_trips"] == 16);
  CHECK(r1["residual_us"].get<double>() > 0);
  CHECK(std::abs(r1["offset_us"].get<double>()) <= r1["residual_us"].get<double>());
  CHECK(t.other["clock_offsets"][0]["offset_us"] == 0.0);
  const double residual_us = r1["residual_us"].get<double>();

  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    int comm_tid = -1;
    for (const auto& [key, name] : t.threads)
      if (key.first == rank && name == "comm (tcp group)") comm_tid = key.second;
    REQUIRE(comm_tid >= 0);
    std::vector<X> reduces, backward;
    for (const X& s : t.spans) {
      if (s.pid != rank) continue;
      if (s.cat == "comm" && s.tid == comm_tid && s.name.rfind("all_reduce #", 0) == 0) reduces.push_back(s);
      if (s.cat == "backward") backward.push_back(s);
    }
    // >= 2 buckets in each of 3 steps; a step's last all-reduce may close on the comm thread after
    // the step ended, and land in the next step (or after stop(), in none).
    REQUIRE(reduces.size() >= 4);
    REQUIRE(!backward.empty());
    bool hidden = false;  // an all-reduce running while this rank's backward does
    for (const X& a : reduces)
      for (const X& b : backward) hidden = hidden || overlap(a, b);
    CHECK(hidden);
  }
  // Each all-reduce on one rank overlaps its half on the other once the clocks are aligned: neither
  // can finish before the other has started (the residual, and 1 us of rounding, of slack). At the
  // steps' edges one rank may have kept a half the other did not (see above).
  std::map<std::string, std::vector<X>> by_name;
  for (const X& s : t.spans)
    if (s.name.rfind("all_reduce #", 0) == 0) by_name[s.name].push_back(s);
  int pairs = 0;
  for (const auto& [name, halves] : by_name) {
    INFO(name);
    REQUIRE(halves.size() <= 2);
    if (halves.size() < 2) continue;
    CHECK(halves[0].pid != halves[1].pid);
    CHECK(overlap(halves[0], halves[1], residual_us + 1));
    ++pairs;
  }
  CHECK(pairs >= 4);

  // Rank 1's offset 1 s larger: its events 1 s earlier against rank 0's, to rounding.
  const Parsed moved = parse((dir.path() / "moved.json").string());
  REQUIRE(moved.spans.size() == t.spans.size());
  std::map<int, double> first_before, first_after;  // the first span of each rank
  for (size_t i = 0; i < t.spans.size(); ++i) {
    REQUIRE(moved.spans[i].name == t.spans[i].name);
    if (!first_before.count(t.spans[i].pid)) {
      first_before[t.spans[i].pid] = t.spans[i].start;
      first_after[t.spans[i].pid] = moved.spans[i].start;
    }
  }
  const double before = first_before[1] - first_before[0], after = first_after[1] - first_after[0];
  CHECK(after - before == Approx(-1e6).margin(0.01));

  // A rank without spans: its row is there, no event of its own.
  const Parsed sparse = parse((dir.path() / "sparse.json").string());
  CHECK(sparse.processes.size() == 2);
  REQUIRE(sparse.spans.size() == 1);
  CHECK(sparse.spans[0].name == "only rank 0");
  CHECK(sparse.spans[0].pid == 0);
}

TEST_CASE("profiler: merging ranks moves an op's GPU time with its rank's events", "[cpu][profiler]") {
  // What a rank sends: its header line, then a trace with one op whose kernels ran `gpu_after_us`
  // after its host span began (on a GPU, Profile::chrome_trace_json writes args.gpu so).
  const auto rank = [](int pid, uint64_t origin_ns, double gpu_after_us) {
    const nlohmann::json header = {{"origin_ns", origin_ns}, {"offset_ns", 0}, {"residual_ns", 0}, {"round_trips", 0}};
    const nlohmann::json op = {
        {"name", "add"}, {"cat", "op"},
        {"ph", "X"},     {"ts", 10.0},
        {"dur", 5.0},    {"pid", pid},
        {"tid", 0},      {"args", {{"step", 0}, {"gpu", {{"device", 0}, {"ts", 10.0 + gpu_after_us}, {"dur", 2.0}}}}}};
    return header.dump() + "\n" + nlohmann::json{{"traceEvents", {op}}}.dump();
  };
  // Rank 1 started 4 ms after rank 0: its events move 4000 us later, args.gpu.ts with them.
  const GatheredTrace t = profiler::detail::merge_chrome_traces({rank(0, 1'000'000, 1), rank(1, 5'000'000, 3)});
  const nlohmann::json doc = nlohmann::json::parse(t.json);
  int moved = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 1) {
      CHECK(e["ts"].get<double>() == 4010.0);
      CHECK(e["args"]["gpu"]["ts"].get<double>() == 4013.0);
      ++moved;
    }
  CHECK(moved == 1);
  const std::vector<RankProfile> ranks = parse_chrome_trace(t.json, "merged");
  REQUIRE(ranks.size() == 2);
  for (const RankProfile& r : ranks) {
    INFO("rank " << r.rank);
    REQUIRE(r.spans.size() == 1);
    const profiler::Event& e = r.spans[0].event;
    CHECK(e.start_ns == (r.rank == 0 ? 0u : 4'000'000u));
    CHECK(e.gpu_device == 0);
    CHECK(e.gpu_start_ns == e.start_ns + (r.rank == 0 ? 1000u : 3000u));
    CHECK(e.gpu_end_ns == e.gpu_start_ns + 2000u);
  }
}
