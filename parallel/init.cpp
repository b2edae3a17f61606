// init_process_group, the default group and the "auto" backend (see init.h).
#include <ember/parallel/init.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <ember/core/error.h>
#include <ember/parallel/process_group_nccl.h>
#include <ember/parallel/process_group_tcp.h>

namespace ember::parallel {

namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_default;

// "auto": CUDA tensors go to an nccl group (created at the first CUDA collective, which every rank
// reaches together) when NCCL is usable here, everything else to the tcp group.
class AutoProcessGroup final : public ProcessGroup {
 public:
  AutoProcessGroup(std::shared_ptr<Store> store, const RankInfo& info, const GroupOptions& opts)
      : ProcessGroup(info, opts),
        store_(std::move(store)),
        tcp_(make_tcp_process_group(store_, info, opts)),
        nccl_ok_(nccl_usable(info.local_world_size > 0 ? info.local_world_size : 1)) {}

  std::string backend() const override { return "auto"; }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override { return route(t).all_reduce(t, op); }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override { return route(t).broadcast(t, root); }
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) override {
    return route(in).all_gather(out, in);
  }
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    return route(in).reduce_scatter(out, in, op);
  }
  std::shared_ptr<Work> barrier() override { return tcp_->barrier(); }
  std::shared_ptr<Work> send(const Tensor& t, int dst) override { return route(t).send(t, dst); }
  std::shared_ptr<Work> recv(const Tensor& t, int src) override { return route(t).recv(t, src); }
  uint64_t sequence_number() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return tcp_->sequence_number() + (nccl_ ? nccl_->sequence_number() : 0);
  }

 private:
  ProcessGroup& route(const Tensor& t) {
    if (!t.defined() || !t.device().is_cuda() || !nccl_ok_) return *tcp_;
    std::lock_guard<std::mutex> lock(mu_);
    if (!nccl_) nccl_ = make_nccl_process_group(store_, info_, opts_);
    return *nccl_;
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<ProcessGroup> tcp_;
  bool nccl_ok_;
  mutable std::mutex mu_;
  std::shared_ptr<ProcessGroup> nccl_;
};

bool debug_from_env() {
  const char* v = std::getenv("EMBER_DISTRIBUTED_DEBUG");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  EMBER_CHECK(std::strcmp(v, "1") == 0, "EMBER_DISTRIBUTED_DEBUG=", v, " is not 0 or 1");
  return true;
}

// Every rank must be started with one world size, and each rank number by one process: a node
// started with another --nproc-per-node (its WORLD_SIZE differs) or two processes given the same
// RANK would otherwise wait for ranks that never come, or join as someone else. The first to
// join sets each key; the others compare.
void check_membership(Store& store, const RankInfo& info) {
  const std::string world = std::to_string(info.world_size);
  const std::string seen = store.compare_set("ember/init/world_size", "", world);
  EMBER_CHECK(seen == world, "init_process_group: rank ", info.rank, " was started with world size ", world, " (from ",
              info.source, ") but an earlier rank joined with world size ", seen,
              ": every rank needs the same world size (on every node the same --nproc-per-node, or the same "
              "WORLD_SIZE / SLURM_NTASKS)");
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::string me = std::string(host) + " pid " + std::to_string(::getpid());
  const std::string owner = store.compare_set("ember/init/rank/" + std::to_string(info.rank), "", me);
  EMBER_CHECK(owner == me, "init_process_group: rank ", info.rank, " (from ", info.source, ") was already taken by ",
              owner, " when ", me, " joined: two processes were given the same rank");
}

}  // namespace

std::string loopback_master_warning(const RankInfo& info, const std::string& served) {
  const bool loopback = served.rfind("127.", 0) == 0 || served == "::1" || served.rfind("::ffff:127.", 0) == 0;
  if (info.rank != 0 || info.local_world_size >= info.world_size || !loopback) return "";
  return "init_process_group: MASTER_ADDR=" + info.master_addr + " is " + served +
         " on rank 0's node, a loopback address, but the job spans several nodes (world size " +
         std::to_string(info.world_size) + ", " + std::to_string(info.local_world_size) +
         " on this node): nodes on other hosts cannot reach it (fine when every node runs on this host, as in a "
         "test); set MASTER_ADDR to an address of this node that the others reach (its IP, or a host name that "
         "/etc/hosts does not map to 127.0.1.1)";
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts) {
  EMBER_CHECK(opts.backend == "auto" || opts.backend == "tcp" || opts.backend == "nccl",
              "init_process_group: unknown backend '", opts.backend, "' (expected \"auto\", \"tcp\" or \"nccl\")");
  EMBER_CHECK(opts.algorithm == "native" || opts.algorithm == "ring", "init_process_group: unknown algorithm '",
              opts.algorithm, "' (expected \"native\" or \"ring\")");
  EMBER_CHECK(opts.timeout_s >= 0 && std::isfinite(opts.timeout_s),
              "init_process_group: timeout_s must be a finite number of seconds >= 0, got ", opts.timeout_s);
  const RankInfo info = discover_rank(opts.rank);

  GroupOptions g;
  g.timeout_s = opts.timeout_s > 0 ? opts.timeout_s : collective_timeout_from_env(300.0).seconds;
  g.debug = opts.debug || debug_from_env();
  g.algorithm = opts.algorithm;
  g.device = opts.device;
  g.slice_bytes = opts.slice_bytes;

  std::shared_ptr<Store> store = opts.store;
  if (!store) {
    TcpStoreOptions so;
    so.host = info.master_addr;
    so.port = info.master_port;
    so.is_server = info.rank == 0;
    so.timeout_s = g.timeout_s;
    so.origin = "MASTER_ADDR=" + info.master_addr + ", MASTER_PORT=" + std::to_string(info.master_port) + ", from " +
                info.source;
    store = std::make_shared<TcpStore>(so);
    if (const std::string w = loopback_master_warning(info, store->local_address()); !w.empty())
      std::fprintf(stderr, "ember: %s\n", w.c_str());
  }
  check_membership(*store, info);

  std::shared_ptr<ProcessGroup> pg;
  if (opts.backend == "tcp") {
    pg = make_tcp_process_group(store, info, g);
  } else if (opts.backend == "nccl") {
    pg = make_nccl_process_group(store, info, g);
  } else {
    pg = std::make_shared<AutoProcessGroup>(store, info, g);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_default = pg;
  return pg;
}

ProcessGroup& default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  EMBER_CHECK(g_default != nullptr, "default_group(): no process group; call parallel::init_process_group() first");
  return *g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> old;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    old.swap(g_default);
  }
  // `old` is released here, outside the lock: the group's destructor joins its progress thread.
}

}  // namespace ember::parallel
