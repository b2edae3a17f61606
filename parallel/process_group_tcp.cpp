// The "tcp" backend (see process_group_tcp.h).
#include <ember/parallel/process_group_tcp.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/pinned.h>
#include <ember/core/record.h>
#include <ember/core/stream.h>
#include <ember/kernels/copy.h>
#include <ember/parallel/collective.h>
#include <ember/parallel/peer_io.h>
#include <ember/parallel/ring.h>

namespace ember::parallel {

namespace {

constexpr uint32_t kHandshakeMagic = 0x454d4252;  // "EMBR"
// Ring slices: about a quarter of a chunk, so that several are in flight, between 32 KiB (fewer
// system calls per byte) and 1 MiB (the sender stays close to the receiver in the caches).
constexpr int64_t kMinSliceBytes = int64_t(32) << 10;
constexpr int64_t kMaxSliceBytes = int64_t(1) << 20;
// Two exchanges in flight: one slice on the wire while the previous one is reduced (more only
// lets the sender run further ahead of the receiver; measured slower on one machine).
constexpr int kRingDepth = 2;
// SO_SNDBUF of connections between ranks on one machine. There the "wire" is a memory copy, and a
// large send buffer (autotuning grows it to megabytes) lets a sender run far ahead of its
// receiver: the bytes go cold in the caches before they are read, and the copies slow down by
// half (measured in docs/benchmarks.md). EMBER_TCP_SEND_BUFFER overrides it for every connection.
constexpr int kSameHostSendBuffer = 256 << 10;

// The host memory a collective works on: `t` itself on the CPU; for a CUDA tensor a pinned host
// buffer, filled from `t` when `copy_in` (the copy is complete when this returns).
Tensor host_side(const Tensor& t, bool copy_in) {
  if (t.device().is_cpu()) return t;
  Tensor h = ember::detail::pinned_empty(t.shape(), t.dtype(), t.device());
  if (copy_in) {
    DeviceGuard device(t.device());
    kernels::copy(h, t);  // a raw copy: collectives are not differentiable
    current_stream(t.device()).synchronize();
  }
  return h;
}

// Copies a staged result back into the CUDA tensor `t` (nothing for CPU tensors).
void copy_back(const Tensor& t, const Tensor& host) {
  if (t.is_same(host)) return;
  DeviceGuard device(t.device());
  kernels::copy(t, host);
  current_stream(t.device()).synchronize();
}

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
// memcpy/memmove of n bytes where an empty tensor's data_ptr() (and an empty vector's data()) may be
// null: passing null to them is undefined even for 0 bytes (UBSan stops there).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memmove(dst, src, n);
}

class TcpProcessGroup final : public ProcessGroup {
 public:
  TcpProcessGroup(const std::shared_ptr<Store>& store, const RankInfo& info, const GroupOptions& opts);
  ~TcpProcessGroup() override;

  std::string backend() const override { return "tcp"; }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& t, int dst) override;
  std::shared_ptr<Work> recv(const Tensor& t, int src) override;
  uint64_t sequence_number() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }

 private:
  using Body = std::function<void(const CollectiveCall&)>;
  struct Task {
    CollectiveCall call;
    Body body;
    std::shared_ptr<HostWork> work;
  };

  std::string key(const std::string& k) const { return prefix_ + k; }
  void connect_mesh(const std::shared_ptr<Store>& store);
  std::shared_ptr<Work> enqueue(CollectiveCall call, Body body);
  void run() noexcept;
  void execute(Task& t);
  void debug_check(const CollectiveCall& c);
  void check_reported_failure();
  std::string explain(const CollectiveCall& c, const LinkError& e);
  std::string who_is_missing(const CollectiveCall& c);
  RingConfig ring_config(DType dtype, int64_t numel);
  void* staging(const RingConfig& cfg);

  std::shared_ptr<Store> store_;  // this group's own connection
  std::string prefix_;
  std::unique_ptr<PeerIo> io_;
  std::vector<char> staging_;
  std::string failed_;  // first failure (progress thread only)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  uint64_t seq_ = 0, p2p_seq_ = 0;
  std::thread thread_;
};

TcpProcessGroup::TcpProcessGroup(const std::shared_ptr<Store>& store, const RankInfo& info, const GroupOptions& opts)
    : ProcessGroup(info, opts) {
  EMBER_CHECK(store != nullptr, "tcp process group: no store");
  EMBER_CHECK(info.world_size >= 1 && info.rank >= 0 && info.rank < info.world_size, "tcp process group: rank ",
              info.rank, " is not in [0, world_size = ", info.world_size, ")");
  EMBER_CHECK(opts.timeout_s > 0, "tcp process group: timeout_s must be positive, got ", opts.timeout_s);
  prefix_ = "pg/" + std::to_string(next_group_id()) + "/";
  store_ = store->clone();
  if (!store_) store_ = store;
  connect_mesh(store);
  io_->set_stall_hook([this] { check_reported_failure(); });
  thread_ = std::thread([this] { run(); });
}

TcpProcessGroup::~TcpProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  io_->abort();  // a collective still blocked ends now (its Work reports the group's destruction)
  thread_.join();
}

void TcpProcessGroup::connect_mesh(const std::shared_ptr<Store>& store) {
  const int me = rank(), n = world_size();
  const auto deadline = net::deadline_in(timeout_s());
  std::string host = store->local_address();
  if (host.empty()) host = "127.0.0.1";
  net::Socket listener = net::listen_on(host, 0, "rank " + std::to_string(me) + "'s process group listener");
  store_->set(key("addr/" + std::to_string(me)), host + " " + std::to_string(net::local_port(listener)));

  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(key("addr/" + std::to_string(r)));
  const std::vector<std::string> missing = store_->wait_for(keys, timeout_s());
  if (!missing.empty()) {
    std::vector<int> ranks;
    for (const std::string& k : missing) ranks.push_back(std::stoi(k.substr(key("addr/").size())));
    EMBER_FAIL("tcp process group: ", ranks_str(ranks), " of ", n, ranks.size() == 1 ? " has" : " have",
               " not joined within ", seconds_str(timeout_s()), " (rank ", me, ", store at ", store_->address(), ")");
  }

  // Rank r connects to every lower rank and accepts every higher one: connect() succeeds as soon as
  // the listener exists, so the order cannot deadlock.
  std::vector<net::Socket> peers(static_cast<size_t>(n));
  const int gid = std::stoi(prefix_.substr(3));
  for (int r = 0; r < me; ++r) {
    const std::string addr = store_->get(keys[static_cast<size_t>(r)]);
    const size_t sp = addr.rfind(' ');
    const std::string what = "rank " + std::to_string(r) + "'s process group listener";
    net::Socket s = net::connect_to(addr.substr(0, sp), std::stoi(addr.substr(sp + 1)), deadline, what);
    const uint32_t hello[3] = {kHandshakeMagic, static_cast<uint32_t>(gid), static_cast<uint32_t>(me)};
    net::send_all(s, hello, sizeof hello, "rank " + std::to_string(r));
    peers[static_cast<size_t>(r)] = std::move(s);
  }
  for (int accepted = 0; accepted < n - 1 - me; ++accepted) {
    net::Socket s = net::accept_until(listener, deadline);
    uint32_t hello[3] = {0, 0, 0};
    if (s.valid() && !net::recv_all(s, hello, sizeof hello, deadline, "a connecting rank")) s.close();
    if (!s.valid()) {
      std::vector<int> absent;
      for (int r = me + 1; r < n; ++r)
        if (!peers[static_cast<size_t>(r)].valid()) absent.push_back(r);
      EMBER_FAIL("tcp process group: ", ranks_str(absent), " did not connect to rank ", me, " within ",
                 seconds_str(timeout_s()));
    }
    const int from = static_cast<int>(hello[2]);
    EMBER_CHECK(hello[0] == kHandshakeMagic && static_cast<int>(hello[1]) == gid && from > me && from < n &&
                    !peers[static_cast<size_t>(from)].valid(),
                "tcp process group: rank ", me, " got an unexpected connection (magic ", hello[0], ", group ", hello[1],
                ", rank ", hello[2], "; expected group ", gid, " and a rank in (", me, ", ", n, "))");
    peers[static_cast<size_t>(from)] = std::move(s);
  }
  const char* env = std::getenv("EMBER_TCP_SEND_BUFFER");
  if (env == nullptr || *env == '\0') {
    io_ = std::make_unique<PeerIo>(std::move(peers), me, kSameHostSendBuffer, false);
  } else {
    char* end = nullptr;
    const long bytes = std::strtol(env, &end, 10);
    EMBER_CHECK(*end == '\0' && bytes >= 0 && bytes <= (1l << 30), "EMBER_TCP_SEND_BUFFER=", env,
                " is not a number of bytes in [0, 2^30] (0: the kernel's autotuning)");
    io_ = std::make_unique<PeerIo>(std::move(peers), me, static_cast<int>(bytes), true);
  }
}

std::shared_ptr<Work> TcpProcessGroup::enqueue(CollectiveCall call, Body body) {
  auto work = std::make_shared<HostWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    EMBER_CHECK(!stop_, op_kind_name(call.kind), ": the process group is being destroyed");
    const bool p2p = call.kind == OpKind::send || call.kind == OpKind::recv;
    call.seq = p2p ? ++p2p_seq_ : ++seq_;
    queue_.push_back({std::move(call), std::move(body), work});
  }
  cv_.notify_one();
  return work;
}

void TcpProcessGroup::run() noexcept {
  profiler::set_thread_name("comm (tcp group)");
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (Task& left : queue_) {
          left.work->finish(std::make_exception_ptr(Error(left.call.str() + " on rank " + std::to_string(rank()) +
                                                          " was cancelled: the process group was destroyed")));
        }
        queue_.clear();
        return;
      }
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(t);
  }
}

void TcpProcessGroup::execute(Task& t) {
  const CollectiveCall& c = t.call;
  if (!failed_.empty()) {
    t.work->finish(
        std::make_exception_ptr(Error(c.str() + " on rank " + std::to_string(rank()) +
                                      ": the process group is unusable after an earlier failure: " + failed_)));
    return;
  }
  const bool collective = c.kind != OpKind::send && c.kind != OpKind::recv;
  std::optional<profiler::RecordScope> span;  // "all_reduce #12 on (1181066,) f32", when profiling
  if (profiler::recording()) span.emplace(c.str(), profiler::Category::comm);
  t.work->start();
  try {
    io_->set_deadline(net::deadline_in(timeout_s()));
    if (collective) {
      std::string rec(CollectiveCall::kEncodedBytes, '\0');
      c.encode(rec.data());
      try {
        // Diagnostics only (what each rank last entered, for a timeout's message): rank 0 may
        // already have finished and closed the store while this rank runs its last collective.
        store_->set_nowait(key("last/" + std::to_string(rank())), rec);
      } catch (const Error&) {
      }
      if (options().debug) debug_check(c);
    }
    t.body(c);
    t.work->finish();
  } catch (const LinkError& e) {
    failed_ = explain(c, e);
    io_->clear();
    if (e.kind == LinkError::closed || e.kind == LinkError::reset) {
      // The first report wins and the others see it from their stall checks. A peer that closed
      // its connection may itself have failed because of another rank: then the first report
      // names the rank that really died, and this rank repeats it.
      try {
        const std::string mine =
            std::string(e.what()) + " (reported by rank " + std::to_string(rank()) + " during " + c.str() + ")";
        const std::string first = store_->compare_set(key("failure"), "", mine);
        if (first != mine) failed_ = explain(c, LinkError(LinkError::remote, -1, first));
      } catch (const std::exception&) {  // the store may be gone with the failed rank
      }
    }
    t.work->finish(std::make_exception_ptr(Error(failed_)));
  } catch (const Error& e) {
    failed_ = e.message();
    io_->clear();
    t.work->finish(std::current_exception());
  } catch (const std::exception& e) {
    failed_ = e.what();
    io_->clear();
    t.work->finish(std::current_exception());
  }
}

void TcpProcessGroup::check_reported_failure() {
  bool reported = false;
  std::string text;
  try {
    reported = store_->check({key("failure")});
    if (reported) text = store_->get(key("failure"));
  } catch (const Error& e) {
    throw LinkError(
        LinkError::closed, 0,
        "the store (hosted by rank 0) is unreachable, so rank 0 has most likely exited or been killed: " + e.message());
  }
  if (reported) throw LinkError(LinkError::remote, -1, text);
}

std::string TcpProcessGroup::explain(const CollectiveCall& c, const LinkError& e) {
  const std::string where = " on rank " + std::to_string(rank());
  switch (e.kind) {
    case LinkError::closed:
    case LinkError::reset:
    case LinkError::remote:
      return c.str() + " failed" + where + ": " + e.what();
    case LinkError::aborted:
      return c.str() + " was aborted" + where + ": " + e.what();
    case LinkError::timeout:
      break;
  }
  std::string out = c.str() + " timed out after " + seconds_str(timeout_s()) + where + ": " + who_is_missing(c);
  if (*e.what()) out += std::string(" (") + e.what() + ")";
  return out;
}

// Which ranks have not started collective `c`, from the records every rank leaves in the store.
std::string TcpProcessGroup::who_is_missing(const CollectiveCall& c) {
  if (c.kind == OpKind::send || c.kind == OpKind::recv) {
    return std::string("rank ") + std::to_string(c.root) + " has not posted the matching " +
           (c.kind == OpKind::send ? "recv" : "send");
  }
  std::string lagging;
  try {
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) continue;
      const std::string k = key("last/" + std::to_string(r));
      std::string last;
      if (store_->check({k})) last = store_->get(k);
      const bool started = last.size() == CollectiveCall::kEncodedBytes;
      const CollectiveCall other = started ? CollectiveCall::decode(last.data()) : CollectiveCall{};
      if (started && other.seq >= c.seq) continue;
      lagging +=
          (lagging.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " has not called it (" +
          (started ? "its last collective was " + other.str() : std::string("it has not started any collective")) + ")";
    }
  } catch (const Error& e) {
    return "cannot ask the store which ranks are behind: " + e.message();
  }
  return lagging.empty() ? "every rank has started it, but data stopped flowing" : lagging;
}

void TcpProcessGroup::debug_check(const CollectiveCall& c) {
  // Every rank's description of its call, gathered around the ring (fixed size, so ranks that
  // called different collectives still exchange exactly the same bytes here).
  const size_t rec = CollectiveCall::kEncodedBytes;
  std::vector<char> all(rec * static_cast<size_t>(world_size()));
  c.encode(all.data() + rec * static_cast<size_t>(rank()));
  TcpRingTransport tr(*io_, rank(), world_size());
  RingConfig cfg{rank(), world_size(), DType::u8, static_cast<int64_t>(rec), 1};
  ring_all_gather(tr, all.data(), static_cast<int64_t>(all.size()), cfg);
  for (int r = 0; r < world_size(); ++r) {
    const CollectiveCall other = CollectiveCall::decode(all.data() + rec * static_cast<size_t>(r));
    if (r == rank() || other.matches(c)) continue;
    const bool same_text = other.str() == c.str();
    EMBER_FAIL("rank ", r, " called ", same_text ? other.detailed() : other.str(), " while rank ", rank(), " called ",
               same_text ? c.detailed() : c.str(), " (EMBER_DISTRIBUTED_DEBUG check on rank ", rank(), ")");
  }
}

RingConfig TcpProcessGroup::ring_config(DType dtype, int64_t numel) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t chunk_bytes = (numel + world_size() - 1) / world_size() * esize;
  const int64_t slice_bytes =
      options().slice_bytes > 0 ? options().slice_bytes : std::clamp(chunk_bytes / 4, kMinSliceBytes, kMaxSliceBytes);
  return RingConfig{rank(), world_size(), dtype, std::max<int64_t>(1, slice_bytes / esize), kRingDepth};
}

void* TcpProcessGroup::staging(const RingConfig& cfg) {
  staging_.resize(std::max(staging_.size(), ring_staging_bytes(cfg)));
  return staging_.data();
}

std::shared_ptr<Work> TcpProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_collective_tensor(t, "all_reduce", "tensor", true);
  Tensor host = host_side(t, true);
  return enqueue({OpKind::all_reduce, 0, t.shape(), t.dtype(), op, -1}, [this, t, host, op](const CollectiveCall&) {
    const RingConfig cfg = ring_config(t.dtype(), t.numel());
    TcpRingTransport tr(*io_, rank(), world_size());
    auto red = make_host_reducer(t.dtype(), op);
    ring_all_reduce(tr, *red, host.data_ptr(), t.numel(), op == ReduceOp::avg, cfg, staging(cfg));
    copy_back(t, host);
  });
}

std::shared_ptr<Work> TcpProcessGroup::broadcast(const Tensor& t, int root) {
  check_collective_tensor(t, "broadcast", "tensor", false);
  check_root(root, world_size());
  Tensor host = host_side(t, rank() == root);
  return enqueue({OpKind::broadcast, 0, t.shape(), t.dtype(), ReduceOp::sum, root},
                 [this, t, host, root](const CollectiveCall&) {
                   TcpRingTransport tr(*io_, rank(), world_size());
                   const RingConfig cfg = ring_config(t.dtype(), t.numel());
                   ring_broadcast(tr, host.data_ptr(), t.numel(), root, cfg);
                   if (rank() != root) copy_back(t, host);
                 });
}

std::shared_ptr<Work> TcpProcessGroup::all_gather(const Tensor& out, const Tensor& input) {
  check_collective_tensor(input, "all_gather", "input", false);
  check_collective_tensor(out, "all_gather", "out", false);
  check_all_gather_sizes(out, input, world_size());
  Tensor in_h = host_side(input, true), out_h = host_side(out, false);
  return enqueue({OpKind::all_gather, 0, input.shape(), input.dtype(), ReduceOp::sum, -1},
                 [this, out, in_h, out_h](const CollectiveCall&) {
                   char* base = static_cast<char*>(out_h.data_ptr());
                   copy_bytes(base + nbytes(in_h) * static_cast<size_t>(rank()), in_h.data_ptr(), nbytes(in_h));
                   TcpRingTransport tr(*io_, rank(), world_size());
                   RingConfig cfg = ring_config(out_h.dtype(), out_h.numel());
                   ring_all_gather(tr, base, out_h.numel(), cfg);
                   copy_back(out, out_h);
                 });
}

std::shared_ptr<Work> TcpProcessGroup::reduce_scatter(const Tensor& out, const Tensor& input, ReduceOp op) {
  check_collective_tensor(input, "reduce_scatter", "input", true);
  check_collective_tensor(out, "reduce_scatter", "out", true);
  check_reduce_scatter_sizes(out, input, world_size());
  Tensor in_h = host_side(input, true), out_h = host_side(out, false);
  return enqueue({OpKind::reduce_scatter, 0, input.shape(), input.dtype(), op, -1}, [this, out, in_h, out_h,
                                                                                     op](const CollectiveCall&) {
    // The ring reduces in place; the caller's input stays untouched.
    std::vector<char> work(nbytes(in_h));
    copy_bytes(work.data(), in_h.data_ptr(), work.size());
    const RingConfig cfg = ring_config(in_h.dtype(), in_h.numel());
    TcpRingTransport tr(*io_, rank(), world_size());
    auto red = make_host_reducer(in_h.dtype(), op);
    ring_reduce_scatter(tr, *red, work.data(), in_h.numel(), op == ReduceOp::avg, cfg, staging(cfg));
    copy_bytes(out_h.data_ptr(), work.data() + nbytes(out_h) * static_cast<size_t>(rank()), nbytes(out_h));
    copy_back(out, out_h);
  });
}

std::shared_ptr<Work> TcpProcessGroup::barrier() {
  return enqueue({OpKind::barrier, 0, {}, DType::u8, ReduceOp::sum, -1}, [this](const CollectiveCall&) {
    // Completes only once every rank's byte has gone around the ring: every rank has arrived.
    std::vector<char> bytes(static_cast<size_t>(world_size()), 1);
    TcpRingTransport tr(*io_, rank(), world_size());
    ring_all_gather(tr, bytes.data(), world_size(), RingConfig{rank(), world_size(), DType::u8, 1, 1});
  });
}

std::shared_ptr<Work> TcpProcessGroup::send(const Tensor& t, int dst) {
  check_collective_tensor(t, "send", "tensor", false);
  check_peer(dst, rank(), world_size(), "send", "dst");
  Tensor host = host_side(t, true);
  return enqueue({OpKind::send, 0, t.shape(), t.dtype(), ReduceOp::sum, dst}, [this, host, dst](const CollectiveCall&) {
    io_->wait_send(dst, io_->post_send(dst, host.data_ptr(), nbytes(host)));
  });
}

std::shared_ptr<Work> TcpProcessGroup::recv(const Tensor& t, int src) {
  check_collective_tensor(t, "recv", "tensor", false);
  check_peer(src, rank(), world_size(), "recv", "src");
  Tensor host = host_side(t, false);
  return enqueue({OpKind::recv, 0, t.shape(), t.dtype(), ReduceOp::sum, src},
                 [this, t, host, src](const CollectiveCall&) {
                   io_->wait_recv(src, io_->post_recv(src, host.data_ptr(), nbytes(host)));
                   copy_back(t, host);
                 });
}

}  // namespace

std::shared_ptr<ProcessGroup> make_tcp_process_group(std::shared_ptr<Store> store, const RankInfo& info,
                                                     const GroupOptions& opts) {
  return std::make_shared<TcpProcessGroup>(store, info, opts);
}

}  // namespace ember::parallel
