// The "nccl" backend (see process_group_nccl.h). CUDA builds only.
#include <ember/parallel/process_group_nccl.h>

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <set>
#include <thread>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_check.h>
#include <ember/core/stream.h>
#include <ember/parallel/collective.h>
#include <ember/parallel/cuda/ring_reduce.h>
#include <ember/parallel/ring.h>

namespace ember::parallel {

namespace {

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);
constexpr int64_t kRingSliceBytes = int64_t(4) << 20;  // GPU slices: large, the per-step cost is a launch
constexpr int kRingDepth = 2;

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
  }
  EMBER_FAIL("nccl: unsupported dtype ", dtype_name(d));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:  // sum, then divided by world size (ncclAvg is for floating types only)
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// A collective queued on the communication stream. wait() orders the caller's current stream
// after it (the host does not block, except for barrier); is_completed() queries its event.
class NcclWork final : public Work {
 public:
  NcclWork(Device device, CollectiveCall call, bool host_blocking)
      : device_(device),
        call_(std::move(call)),
        host_blocking_(host_blocking),
        start_(std::chrono::steady_clock::now()) {}
  void wait() override;
  bool is_completed() override;

  double busy_seconds() override { return is_completed() && error().empty() ? started.elapsed_ms(done) / 1e3 : 0; }

  Event started, done;
  const CollectiveCall& call() const { return call_; }
  std::chrono::steady_clock::time_point start() const { return start_; }
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = why;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  Device device_;
  CollectiveCall call_;
  bool host_blocking_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::string error_;
};

// The ring transport over NCCL point-to-point: each exchange is one ncclGroupStart/End holding the
// send to the next rank and the receive from the previous one, on the communication stream.
// Exchanges and reductions are ordered by the stream, so waiting is a no-op on the host.
class NcclRingTransport final : public RingTransport {
 public:
  NcclRingTransport(ncclComm_t comm, cudaStream_t stream, int next, int prev)
      : comm_(comm), stream_(stream), next_(next), prev_(prev) {}
  void post(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) override {
    if (send_bytes == 0 && recv_bytes == 0) return;
    NCCL_CHECK(ncclGroupStart());
    if (send_bytes > 0) NCCL_CHECK(ncclSend(send, send_bytes, ncclUint8, next_, comm_, stream_));
    if (recv_bytes > 0) NCCL_CHECK(ncclRecv(recv, recv_bytes, ncclUint8, prev_, comm_, stream_));
    NCCL_CHECK(ncclGroupEnd());
  }
  void wait_recv() override {}
  void wait_sent(int64_t) override {}

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int next_, prev_;
};

class CudaRingReducer final : public RingReducer {
 public:
  CudaRingReducer(DType dtype, ReduceOp op, cudaStream_t stream) : dtype_(dtype), op_(op), stream_(stream) {}
  void reduce(void* dst, const void* src, int64_t count) override {
    cuda_ring::reduce(dst, src, count, dtype_, op_, stream_);
  }
  void divide(void* data, int64_t count, int64_t divisor) override {
    cuda_ring::divide(data, count, divisor, dtype_, stream_);
  }

 private:
  DType dtype_;
  ReduceOp op_;
  cudaStream_t stream_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const std::shared_ptr<Store>& store, const RankInfo& info, const GroupOptions& opts);
  ~NcclProcessGroup() override;

  std::string backend() const override { return "nccl"; }
  Device message_device() const override { return device_; }
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

  Device device() const { return device_; }
  /// The failure that made the group unusable ("" while it is fine).
  std::string failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  /// Stops the watchdog and destroys (or, with work still queued, aborts) the communicator; later
  /// collectives throw. Idempotent and never throws: called by the destructor and at process exit.
  void shut_down(const char* why) noexcept;

 private:
  using Launch = std::function<void(cudaStream_t)>;
  std::shared_ptr<Work> launch(CollectiveCall call, std::initializer_list<const Tensor*> tensors, const Launch& fn,
                               bool host_blocking = false);
  void check_tensor(const Tensor& t, const char* op, const char* arg, bool reducing) const;
  void watchdog() noexcept;
  void abort(const std::string& why);

  Device device_;
  Stream comm_stream_;
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<Store> store_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t seq_ = 0, p2p_seq_ = 0;
  std::string failed_;
  bool aborted_ = false, stop_ = false;
  std::list<std::shared_ptr<NcclWork>> in_flight_;
  std::thread watchdog_;
  std::mutex shut_down_mu_;  // serializes shut_down() (the destructor and the exit handler)
  bool shut_down_ = false;  // under shut_down_mu_
};

// ---- process exit ----
// A group may still be alive when the program ends: init_process_group keeps the default group in
// a static, and a program need not call destroy_process_group. That static was constructed when
// libember was loaded, so it is destroyed after the CUDA runtime's exit-time teardown (whose
// handlers are registered at load or first use, after it): the watchdog's event queries and the
// destructor's NCCL and CUDA calls then fail with cudaErrorCudartUnloading, and before this handler
// existed an exception from the destructor terminated the process. So every live group is
// registered here, and a handler that std::atexit registers once the first communicator exists
// (after the CUDA runtime and NCCL were initialized, hence run before their teardown: exit handlers
// run in reverse order of registration) shuts them all down while CUDA still works. The registry is
// never destroyed: groups unregister from their destructors, which may run during static
// destruction.
struct LiveGroups {
  std::mutex mu;
  std::set<NcclProcessGroup*> groups;
  std::once_flag exit_handler;
};

LiveGroups& live_groups() {
  static LiveGroups* g = new LiveGroups;
  return *g;
}

void shut_down_live_groups() noexcept {
  LiveGroups& live = live_groups();
  std::lock_guard<std::mutex> lock(live.mu);  // a destructor running meanwhile waits, then finds it done
  for (NcclProcessGroup* g : live.groups) g->shut_down("the process is exiting");
  live.groups.clear();
}

void NcclWork::wait() {
  std::string err = error();
  EMBER_CHECK(err.empty(), err);
  if (host_blocking_) {
    // Polled rather than synchronized: if a rank never arrives, the watchdog aborts the
    // communicator and fails this work, and the loop ends with that error.
    while (!done.query()) {
      err = error();
      EMBER_CHECK(err.empty(), err);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } else {
    DeviceGuard guard(device_);
    done.wait(current_stream(device_));
  }
  err = error();
  EMBER_CHECK(err.empty(), err);
}

bool NcclWork::is_completed() { return !error().empty() || done.query(); }

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, const RankInfo& info, const GroupOptions& opts)
    : ProcessGroup(info, opts), store_(store) {
  EMBER_CHECK(store != nullptr, "nccl process group: no store");
  EMBER_CHECK(cuda_device_count() > 0, "nccl process group: no usable GPU on this machine (rank ", info.rank,
              "); use backend \"tcp\"");
  device_ = opts.device.is_cuda() ? opts.device : Device::cuda(std::max(0, info.local_rank) % cuda_device_count());
  device_.validate();
  DeviceGuard guard(device_);
  comm_stream_ = new_stream(device_);

  // Rank 0's unique id travels through the store; a barrier first, so that a missing rank is a
  // timeout naming it rather than a hang inside ncclCommInitRank.
  const std::string prefix = "nccl/" + std::to_string(next_group_id()) + "/";
  store_barrier(*store, prefix + "join", info.rank, info.world_size, opts.timeout_s);
  ncclUniqueId id;
  if (info.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    store->set(prefix + "id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
  }
  const std::string bytes = store->get(prefix + "id");
  EMBER_CHECK(bytes.size() == sizeof id, "nccl process group: the id in the store has ", bytes.size(),
              " bytes, expected ", sizeof id);
  std::memcpy(&id, bytes.data(), sizeof id);
  NCCL_CHECK(ncclCommInitRank(&comm_, info.world_size, id, info.rank));
  // Registered after the CUDA runtime and NCCL were initialized above, so it runs before their
  // exit-time teardown (see LiveGroups).
  LiveGroups& live = live_groups();
  std::call_once(live.exit_handler, [] {
    if (std::atexit(&shut_down_live_groups) != 0)
      std::fprintf(stderr, "ember: nccl process group: could not register the exit handler\n");
  });
  watchdog_ = std::thread([this] { watchdog(); });
  std::lock_guard<std::mutex> lock(live.mu);  // last: only a fully constructed group is registered
  live.groups.insert(this);
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    LiveGroups& live = live_groups();
    std::lock_guard<std::mutex> lock(live.mu);
    live.groups.erase(this);
  }
  shut_down("the process group was destroyed");
}

void NcclProcessGroup::shut_down(const char* why) noexcept {
  std::lock_guard<std::mutex> once(shut_down_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::list<std::shared_ptr<NcclWork>> works;
  std::lock_guard<std::mutex> lock(mu_);
  works.swap(in_flight_);
  const bool aborted = aborted_;
  try {
    if (failed_.empty()) failed_ = std::string("the nccl process group was shut down (") + why + ")";
  } catch (...) {  // out of memory for the message: NCCL then rejects the null communicator of later calls
  }
  if (aborted || comm_ == nullptr) return;
  // Defensive: a group the exit handler did not shut down, destroyed after the CUDA runtime began
  // unloading. NCCL cannot be called any more and the process is ending: the communicator is left
  // to the operating system.
  if (ember::detail::cuda_runtime_unloading()) return;
  bool pending = false;
  for (auto& w : works) {
    try {
      pending = pending || !w->is_completed();
    } catch (const std::exception&) {  // the event cannot be queried: treat the work as queued
      pending = true;
    }
  }
  // A communicator with work still queued (a rank that never came) cannot be destroyed
  // gracefully: ncclCommDestroy would wait for it. Abort instead.
  const ncclResult_t rc = pending ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  comm_ = nullptr;
  if (rc != ncclSuccess)
    std::fprintf(stderr, "ember: nccl process group: %s failed: %s\n", pending ? "ncclCommAbort" : "ncclCommDestroy",
                 ncclGetErrorString(rc));
}

void NcclProcessGroup::abort(const std::string& why) {
  // Called with mu_ held, from the watchdog.
  if (aborted_) return;
  aborted_ = true;
  failed_ = why;
  for (auto& w : in_flight_) w->fail(why);
  const ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess) std::fprintf(stderr, "ember: ncclCommAbort failed: %s\n", ncclGetErrorString(rc));
}

void NcclProcessGroup::watchdog() noexcept {
  try {
    DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && !aborted_) {
      cv_.wait_for(lock, kWatchdogPeriod);
      if (stop_) break;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
      if (rc != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        const std::string what = ncclGetErrorString(rc != ncclSuccess ? rc : async);
        std::string op = in_flight_.empty() ? std::string("a collective") : in_flight_.front()->call().str();
        abort(op + " failed on rank " + std::to_string(rank()) + ": NCCL reported an error (" + what +
              "); a peer rank has probably failed. The communicator was aborted.");
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        if ((*it)->done.query()) {
          it = in_flight_.erase(it);
          continue;
        }
        if (std::chrono::duration<double>(now - (*it)->start()).count() > timeout_s()) {
          abort((*it)->call().str() + " timed out after " + seconds_str(timeout_s()) + " on rank " +
                std::to_string(rank()) +
                ": some rank has not called it or has failed; the NCCL communicator was aborted");
          break;
        }
        ++it;
      }
    }
  } catch (const std::exception& e) {
    // The CUDA runtime unloading under a group that outlived the exit handler: the process is
    // ending, which is no failure worth a message.
    if (!ember::detail::cuda_runtime_unloading()) std::fprintf(stderr, "ember: nccl watchdog stopped: %s\n", e.what());
  }
}

void NcclProcessGroup::check_tensor(const Tensor& t, const char* op, const char* arg, bool reducing) const {
  check_collective_tensor(t, op, arg, reducing);
  EMBER_CHECK(t.device() == device_, op, ": '", arg, "' is on ", t.device().str(),
              ", but this nccl process group runs on ", device_.str(),
              t.device().is_cpu() ? " (the nccl backend takes CUDA tensors; use backend \"tcp\" or "
                                    "\"auto\" for CPU tensors)"
                                  : "");
}

std::shared_ptr<Work> NcclProcessGroup::launch(CollectiveCall call, std::initializer_list<const Tensor*> tensors,
                                               const Launch& fn, bool host_blocking) {
  std::unique_lock<std::mutex> lock(mu_);
  EMBER_CHECK(failed_.empty(), call.str(), " on rank ", rank(),
              ": the process group is unusable after an earlier failure: ", failed_);
  const bool p2p = call.kind == OpKind::send || call.kind == OpKind::recv;
  call.seq = p2p ? ++p2p_seq_ : ++seq_;
  auto work = std::make_shared<NcclWork>(device_, call, host_blocking);
  lock.unlock();

  DeviceGuard guard(device_);
  // The communication stream waits for what the caller queued before (the tensors' producers).
  Event ready;
  ready.record(current_stream(device_));
  ready.wait(comm_stream_);
  work->started.record(comm_stream_);
  fn(raw(comm_stream_));
  // Their memory must not be reused by the caller's stream while NCCL still uses it.
  for (const Tensor* t : tensors) record_stream(t->storage(), comm_stream_);
  work->done.record(comm_stream_);

  lock.lock();
  in_flight_.push_back(work);
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce", "tensor", true);
  const int64_t n = t.numel();
  const DType dt = t.dtype();
  return launch({OpKind::all_reduce, 0, t.shape(), dt, op, -1}, {&t}, [&](cudaStream_t s) {
    if (options().algorithm == "ring") {
      const RingConfig cfg{rank(), world_size(), dt, std::max<int64_t>(1, kRingSliceBytes / int64_t(dtype_size(dt))),
                           kRingDepth};
      // Staging from the caching allocator for the communication stream: stream-ordered reuse.
      DataPtr staging = cuda_caching_allocator(device_.index()).allocate(ring_staging_bytes(cfg), s);
      NcclRingTransport tr(comm_, s, (rank() + 1) % world_size(), (rank() + world_size() - 1) % world_size());
      CudaRingReducer red(dt, op, s);
      ring_all_reduce(tr, red, t.data_ptr(), n, op == ReduceOp::avg, cfg, staging.get());
      return;
    }
    NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), n, nccl_dtype(dt), nccl_op(op), comm_, s));
    if (op == ReduceOp::avg) cuda_ring::divide(t.data_ptr(), n, world_size(), dt, s);
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "tensor", false);
  check_root(root, world_size());
  return launch({OpKind::broadcast, 0, t.shape(), t.dtype(), ReduceOp::sum, root}, {&t}, [&](cudaStream_t s) {
    NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_dtype(t.dtype()), root, comm_, s));
  });
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(const Tensor& out, const Tensor& input) {
  check_tensor(input, "all_gather", "input", false);
  check_tensor(out, "all_gather", "out", false);
  check_all_gather_sizes(out, input, world_size());
  return launch(
      {OpKind::all_gather, 0, input.shape(), input.dtype(), ReduceOp::sum, -1}, {&out, &input}, [&](cudaStream_t s) {
        NCCL_CHECK(ncclAllGather(input.data_ptr(), out.data_ptr(), input.numel(), nccl_dtype(input.dtype()), comm_, s));
      });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(const Tensor& out, const Tensor& input, ReduceOp op) {
  check_tensor(input, "reduce_scatter", "input", true);
  check_tensor(out, "reduce_scatter", "out", true);
  check_reduce_scatter_sizes(out, input, world_size());
  return launch({OpKind::reduce_scatter, 0, input.shape(), input.dtype(), op, -1}, {&out, &input}, [&](cudaStream_t s) {
    NCCL_CHECK(ncclReduceScatter(input.data_ptr(), out.data_ptr(), out.numel(), nccl_dtype(out.dtype()), nccl_op(op),
                                 comm_, s));
    if (op == ReduceOp::avg) cuda_ring::divide(out.data_ptr(), out.numel(), world_size(), out.dtype(), s);
  });
}

std::shared_ptr<Work> NcclProcessGroup::barrier() {
  // An all-reduce of one element; wait() blocks the host until every rank has joined it.
  Tensor one = empty({1}, {.dtype = DType::i32, .device = device_});
  return launch(
      {OpKind::barrier, 0, {}, DType::u8, ReduceOp::sum, -1}, {&one},
      [&](cudaStream_t s) {
        NCCL_CHECK(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclInt32, ncclSum, comm_, s));
      },
      /*host_blocking=*/true);
}

std::shared_ptr<Work> NcclProcessGroup::send(const Tensor& t, int dst) {
  check_tensor(t, "send", "tensor", false);
  check_peer(dst, rank(), world_size(), "send", "dst");
  return launch({OpKind::send, 0, t.shape(), t.dtype(), ReduceOp::sum, dst}, {&t}, [&](cudaStream_t s) {
    NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), nccl_dtype(t.dtype()), dst, comm_, s));
  });
}

std::shared_ptr<Work> NcclProcessGroup::recv(const Tensor& t, int src) {
  check_tensor(t, "recv", "tensor", false);
  check_peer(src, rank(), world_size(), "recv", "src");
  return launch({OpKind::recv, 0, t.shape(), t.dtype(), ReduceOp::sum, src}, {&t}, [&](cudaStream_t s) {
    NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), nccl_dtype(t.dtype()), src, comm_, s));
  });
}

}  // namespace

bool nccl_usable(int local_world_size) {
  const int gpus = cuda_device_count();
  return gpus > 0 && local_world_size <= gpus;
}

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, const RankInfo& info,
                                                      const GroupOptions& opts) {
  return std::make_shared<NcclProcessGroup>(store, info, opts);
}

namespace detail {

void nccl_ring_self_exchange(const Tensor& src, const Tensor& dst, ReduceOp op) {
  EMBER_CHECK(src.device().is_cuda() && dst.device() == src.device() && src.dtype() == dst.dtype() &&
                  src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
              "nccl_ring_self_exchange: expected two contiguous CUDA tensors of one size, dtype and device");
  DeviceGuard guard(src.device());
  ncclComm_t comm;
  const int dev = src.device().index();
  NCCL_CHECK(ncclCommInitAll(&comm, 1, &dev));
  const cudaStream_t s = raw(current_stream(src.device()));
  const size_t bytes = static_cast<size_t>(src.numel()) * src.element_size();
  DataPtr staging = cuda_caching_allocator(dev).allocate(bytes, s);
  NcclRingTransport tr(comm, s, 0, 0);  // this rank is its own next and previous rank
  tr.post(src.data_ptr(), bytes, staging.get(), bytes);
  tr.wait_recv();
  CudaRingReducer red(src.dtype(), op, s);
  red.reduce(dst.data_ptr(), staging.get(), src.numel());
  CUDA_CHECK(cudaStreamSynchronize(s));
  NCCL_CHECK(ncclCommDestroy(comm));
}

}  // namespace detail

}  // namespace ember::parallel
