// All-reduce bus bandwidth of ember's TCP ring beside Gloo's ring all-reduce, measured in the same
// processes on the same sizes, on 2 and 4 local processes over 127.0.0.1.
//
// Figures follow nccl-tests: algbw = bytes / time, busbw = algbw * 2 (N - 1) / N (the share of the
// data every rank must send and receive in any all-reduce, so busbw is comparable across N).
// Time is the slowest rank's mean over the timed calls (f32 sum, in place); the two libraries
// alternate call by call, so changes in the machine's load fall on both alike. Each size starts
// with a checked all-reduce of known values on both libraries (the result must equal N (N+1) / 2).
//
// Flags: --quick (2 processes, 4 KiB and 1 MiB; the CTest smoke run); --slice-kib N (the ring's
// slice size; default: the tcp backend's); --world N (only N processes); --only ember|gloo (time
// one library, for profiling). The program starts its own worker processes (this binary with
// --worker); Gloo's columns hold figures when the build found Gloo, nan otherwise.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/process_group_tcp.h>
#include <ember/parallel/store.h>
#include <ember/parallel/tcp_socket.h>

#include "bench_util.h"

#ifdef EMBER_BENCH_HAVE_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

extern char** environ;

using namespace ember;
using ember::bench::fmt;

namespace {

#ifdef EMBER_BENCH_HAVE_GLOO
// Gloo's rendezvous through ember's store, so both libraries meet the same way.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<parallel::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = s_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout.count() / 1000.0);
  }

 private:
  std::shared_ptr<parallel::Store> s_;
};
#endif

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Timed iterations for a size: about 1 GiB of payload, between 3 and 200 calls.
int iterations_for(size_t bytes, bool quick) {
  if (quick) return 3;
  return static_cast<int>(std::clamp<double>((1u << 30) / static_cast<double>(bytes), 3.0, 200.0));
}

std::string size_str(size_t b) { return b >= (1u << 20) ? fmt("%zu MiB", b >> 20) : fmt("%zu KiB", b >> 10); }

// One rank of a run with `world` processes: times both libraries on every size; rank 0 prints.
int worker(int world, int rank, int port, bool quick, int64_t slice_bytes, const std::string& only) {
  parallel::TcpStoreOptions so;
  so.port = port;
  so.is_server = rank == 0;
  so.timeout_s = 120;
  auto store = std::make_shared<parallel::TcpStore>(so);
  parallel::RankInfo info;
  info.rank = rank, info.world_size = world, info.local_rank = rank, info.local_world_size = world;
  info.source = "options";
  parallel::GroupOptions go;
  go.timeout_s = 300;
  go.slice_bytes = slice_bytes;
  auto pg = parallel::make_tcp_process_group(store, info, go);
#ifdef EMBER_BENCH_HAVE_GLOO
  GlooStore gstore(store);
  gloo::rendezvous::PrefixStore prefixed("gloo", gstore);
  auto dev = gloo::transport::tcp::CreateDevice("127.0.0.1");
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->connectFullMesh(prefixed, dev);
#endif

  // The slowest rank's time: the collective ends on every rank only after the slowest has sent.
  auto slowest = [&](double secs) {
    Tensor t = full({1}, secs, {.dtype = DType::f64});
    pg->all_reduce(t, parallel::ReduceOp::max)->wait();
    return t.item<double>();
  };
  std::vector<size_t> sizes;
  for (size_t b = 4u << 10; b <= (quick ? (1u << 20) : (256u << 20)); b *= quick ? 256 : 4) sizes.push_back(b);

  bench::Table table({"size", "ember (ms)", "ember busbw GB/s", "gloo (ms)", "gloo busbw GB/s", "ember / gloo"});
  const double expect = world * (world + 1) / 2.0;
  const double bus_factor = 2.0 * (world - 1) / world;
  bool ok = true;
  for (size_t bytes : sizes) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    const int iters = iterations_for(bytes, quick);
    Tensor t = full({n}, double(rank + 1));
    pg->all_reduce(t)->wait();  // warm-up and check
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 1000)) ok = ok && p[i] == expect;
    ok = ok && p[n - 1] == expect;
    std::function<void()> run_gloo;
#ifdef EMBER_BENCH_HAVE_GLOO
    std::vector<float> g(static_cast<size_t>(n), float(rank + 1));
    run_gloo = [&] {
      gloo::AllreduceOptions opts(ctx);
      opts.setOutput(g.data(), g.size());
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(opts);
    };
    run_gloo();
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 1000)) ok = ok && g[size_t(i)] == expect;
#endif
    // The two libraries alternate call by call, so a change in the machine's load (other
    // processes) falls on both alike.
    pg->barrier()->wait();
    double ember_total = 0, gloo_total = 0;
    for (int i = 0; i < iters; ++i) {
      double t0 = now_s();
      if (only != "gloo") pg->all_reduce(t)->wait();
      const double t1 = now_s();
      if (run_gloo && only != "ember") run_gloo();
      ember_total += t1 - t0;
      gloo_total += now_s() - t1;
    }
    const double ember_s = slowest(ember_total / iters);
    const double gloo_s = run_gloo ? slowest(gloo_total / iters) : NAN;
    const double ember_bus = bytes / ember_s / 1e9 * bus_factor, gloo_bus = bytes / gloo_s / 1e9 * bus_factor;
    table.add({size_str(bytes), fmt("%.3f", ember_s * 1e3), fmt("%.3f", ember_bus), fmt("%.3f", gloo_s * 1e3),
               fmt("%.3f", gloo_bus), fmt("%.2f", ember_bus / gloo_bus)});
  }
  if (rank == 0) {
    std::printf("\n%d processes (busbw = bytes / time * 2(N-1)/N; slowest rank's mean over the timed calls)\n", world);
    table.print();
    if (!ok) std::printf("RESULT CHECK FAILED: an all-reduce did not give N(N+1)/2\n");
  }
  pg->barrier()->wait();
  return ok ? 0 : 1;
}

int pick_port() {
  parallel::net::Socket s = parallel::net::listen_on("127.0.0.1", 0, "bench_allreduce");
  return parallel::net::local_port(s);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  int64_t slice_bytes = 0;  // --slice-kib N: the ring's slice size (default: the backend's)
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--slice-kib") slice_bytes = std::atoll(argv[i + 1]) << 10;
  std::string only = "both";  // --only ember|gloo: time one library (for profiling)
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
  std::vector<int> worlds = quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--world") worlds = {std::atoi(argv[i + 1])};
  if (argc >= 6 && std::string(argv[1]) == "--worker") {
    return worker(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), quick, std::atoll(argv[5]),
                  argc >= 7 ? argv[6] : "");
  }
#ifdef EMBER_BENCH_HAVE_GLOO
  const char* peer = "Gloo ring all-reduce (gloo::allreduce, Algorithm::RING)";
#else
  const char* peer = "(Gloo not found at build time: its columns are nan)";
#endif
  std::printf("bench_allreduce: ember TCP ring all-reduce (f32 sum, in place) beside %s, on 127.0.0.1, %ld cores\n",
              peer, sysconf(_SC_NPROCESSORS_ONLN));
  std::fflush(stdout);  // before the workers write to the same stdout
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  int status_all = 0;
  for (int world : worlds) {
    const std::string port = std::to_string(pick_port());
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> args = {
          self, "--worker", std::to_string(world), std::to_string(r), port, std::to_string(slice_bytes), only};
      if (quick) args.push_back("--quick");
      std::vector<char*> argv_c;
      for (auto& a : args) argv_c.push_back(a.data());
      argv_c.push_back(nullptr);
      pid_t pid = 0;
      if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv_c.data(), environ) != 0) {
        std::fprintf(stderr, "bench_allreduce: cannot start a worker\n");
        return 1;
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int st = 0;
      ::waitpid(pid, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) status_all = 1;
    }
  }
  return status_all;
}
