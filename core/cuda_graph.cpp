// cuda::Graph and the capture bookkeeping (design notes in core/cuda_graph.h). The CUDA runtime
// calls are behind detail::cuda_* (core/cuda/graph.cpp; core/no_cuda.cpp throws), so this file
// compiles in every build and the errors' bookkeeping is tested on the CPU.
#include <ember/core/cuda_graph.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>
#include <ember/core/record.h>
#include <ember/core/rng.h>

namespace ember {
namespace detail {
namespace {

thread_local int t_capture_depth = 0;  // CaptureScopes open on this thread
thread_local const uint64_t* t_rng_extra = nullptr;  // the capturing Graph's device offset extra
thread_local std::vector<std::pair<Generator*, uint64_t>> t_rng_moves;  // generators moved in the capture
thread_local std::vector<std::function<void()>> t_replay_hooks;  // on_replay calls of the capture
std::mutex g_capture_mu;
int g_captures = 0;  // CaptureScopes open in the process (the scopes' flag word says whether > 0)

std::string in_op() {
  const std::string op = profiler::detail::innermost_capture_scope();
  return op.empty() ? std::string(" outside any op") : " in op " + op;
}

}  // namespace

bool capturing() noexcept { return t_capture_depth > 0; }

const uint64_t* capture_rng_extra() noexcept { return t_capture_depth > 0 ? t_rng_extra : nullptr; }

const uint64_t* capture_replay_index() noexcept {
  return t_capture_depth > 0 && t_rng_extra != nullptr ? t_rng_extra + 2 : nullptr;
}

void on_replay(std::function<void()> fn) {
  if (t_capture_depth > 0) t_replay_hooks.push_back(std::move(fn));
}

void note_capture_rng(Generator* gen, uint64_t blocks) {
  for (auto& [g, n] : t_rng_moves)
    if (g == gen) {
      n += blocks;
      return;
    }
  t_rng_moves.emplace_back(gen, blocks);
}

void check_not_capturing(const char* what) {
  if (t_capture_depth == 0) return;
  EMBER_FAIL(what, " cannot run while a CUDA graph is being captured (it makes the host wait for the GPU)", in_op(),
             "; move it out of the captured region (read values after replay())");
}

void check_capturable(const char* what, const char* why) {
  if (t_capture_depth == 0) return;
  EMBER_FAIL(what, " cannot be captured in a CUDA graph (", why, ")", in_op());
}

CaptureScope::CaptureScope() {
  if (t_capture_depth == 0) {
    t_rng_moves.clear();
    t_replay_hooks.clear();
  }
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (g_captures++ == 0) profiler::detail::set_capturing_flag(true);
  ++t_capture_depth;
}

CaptureScope::~CaptureScope() {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  --t_capture_depth;
  if (--g_captures == 0) profiler::detail::set_capturing_flag(false);
}

}  // namespace detail

namespace cuda {
namespace {

// The capture scope of each thread's Graph being captured (one capture per thread at a time).
thread_local detail::CaptureScope* t_scope = nullptr;

}  // namespace

Graph::~Graph() {
  if (capturing_) abort_capture();
  try {
    reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~cuda::Graph could not free its graph: %s\n", e.what());
  }
  if (rng_ != nullptr) detail::cuda_graph_rng_free(device_.index(), rng_);
}

void Graph::capture_begin(Device device) {
  EMBER_CHECK(device.is_cuda(), "cuda::Graph: capture needs a CUDA device; got ", device.str());
  device.validate();
  const Stream prev = current_stream(device);
  Stream s = new_stream(device);
  if (s == prev) s = new_stream(device);  // the pool is round-robin: never capture on the current stream itself
  capture_begin(s);
}

void Graph::capture_begin(Stream stream) {
  const Device device = stream.device();
  EMBER_CHECK(device.is_cuda(), "cuda::Graph: capture needs a CUDA device; got ", device.str());
  device.validate();
  EMBER_CHECK(stream.handle() != nullptr, "cuda::Graph: cannot capture on the legacy default stream of ", device.str(),
              "; pass a stream from new_stream()");
  EMBER_CHECK(!capturing_, "cuda::Graph::capture_begin: this graph is already capturing");
  EMBER_CHECK(t_scope == nullptr, "cuda::Graph::capture_begin: this thread is already capturing another graph");
  reset();
  device_ = device;
  stream_ = stream;
  prev_ = current_stream(device);
  failure_.clear();
  DeviceGuard guard(device);
  if (prev_ != stream_) {  // the capture stream starts after the work queued so far
    Event ready;
    ready.record(prev_);
    ready.wait(stream_);
  }
  if (rng_ != nullptr && device_of_rng_ != device.index()) {
    detail::cuda_graph_rng_free(device_of_rng_, rng_);
    rng_ = nullptr;
  }
  if (rng_ == nullptr) {
    rng_ = detail::cuda_graph_rng_alloc(device.index());
    device_of_rng_ = device.index();
  }
  detail::cuda_graph_rng_set(device.index(), rng_, 0, 0, 0);  // a capture-time launch never runs: 0 is safe
  CachingAllocator& alloc = cuda_caching_allocator(device.index());
  // The capture allocates only from its own new pool: blocks cached for other streams (the eager
  // warm-up steps' working set) could not serve it, so the first capture would need that much
  // again. They go back to the driver first, as torch.cuda.graph does (the device is waited for).
  synchronize(device);
  alloc.empty_cache();
  pool_ = CachingAllocator::new_pool_id();
  alloc.begin_capture(stream_.handle(), pool_);
  try {
    detail::cuda_stream_begin_capture(device.index(), stream_.handle());
  } catch (...) {
    alloc.end_capture(stream_.handle());
    alloc.release_pool(pool_);
    pool_ = 0;
    throw;
  }
  set_current_stream(stream_);
  t_scope = new detail::CaptureScope();
  detail::t_rng_extra = static_cast<const uint64_t*>(rng_);
  capturing_ = true;
  try {
    detail::cuda_graph_rng_advance(device.index(), stream_.handle(), rng_);  // the graph's first node
  } catch (...) {
    abort_capture();
    throw;
  }
}

void Graph::capture_end() {
  EMBER_CHECK(capturing_, "cuda::Graph::capture_end: no capture in progress (call capture_begin first)");
  DeviceGuard guard(device_);
  std::vector<std::pair<Generator*, uint64_t>> moves = std::move(detail::t_rng_moves);
  detail::t_rng_moves.clear();
  replay_hooks_ = std::move(detail::t_replay_hooks);
  detail::t_replay_hooks.clear();
  detail::t_rng_extra = nullptr;
  delete t_scope;
  t_scope = nullptr;
  capturing_ = false;
  std::string error;
  graph_ = detail::cuda_stream_end_capture(device_.index(), stream_.handle(), error);
  CachingAllocator& alloc = cuda_caching_allocator(device_.index());
  alloc.end_capture(stream_.handle());
  set_current_stream(prev_);
  if (graph_ == nullptr) {
    alloc.release_pool(pool_);
    pool_ = 0;
    failure_ = error;
    EMBER_FAIL("cuda::Graph::capture_end: the capture on ", device_.str(), " failed: ", error);
  }
  try {
    exec_ = detail::cuda_graph_instantiate(device_.index(), graph_);
  } catch (const Error& e) {
    failure_ = e.message();
    reset();
    throw;
  }
  if (prev_ != stream_) {  // later work on the previous stream follows the (empty) capture stream
    Event done;
    done.record(stream_);
    done.wait(prev_);
  }
  // Every generator the capture drew from moves by one stride per replay (the largest move, so the
  // ranges of replays never overlap); the first replay draws at the captured offsets themselves.
  rng_stride_ = 0;
  rng_generators_.clear();
  for (const auto& [g, n] : moves) rng_stride_ = std::max(rng_stride_, n);
  rng_expected_.clear();
  for (const auto& [g, n] : moves) {
    if (n < rng_stride_) g->reserve(4 * (rng_stride_ - n));
    rng_generators_.push_back(g);
    rng_expected_.push_back(g->state());
  }
  // extra = -stride and index = -1, so the first replay's own first node brings both to 0.
  detail::cuda_graph_rng_set(device_.index(), rng_, uint64_t(0) - rng_stride_, rng_stride_, ~uint64_t(0));
}

void Graph::abort_capture() noexcept {
  if (!capturing_) return;
  detail::t_rng_moves.clear();
  detail::t_replay_hooks.clear();
  detail::t_rng_extra = nullptr;
  delete t_scope;
  t_scope = nullptr;
  capturing_ = false;
  try {
    DeviceGuard guard(device_);
    std::string error;
    void* g = detail::cuda_stream_end_capture(device_.index(), stream_.handle(), error);
    detail::cuda_graph_destroy(device_.index(), g, nullptr);
    CachingAllocator& alloc = cuda_caching_allocator(device_.index());
    alloc.end_capture(stream_.handle());
    alloc.release_pool(pool_);
    set_current_stream(prev_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: cuda::Graph could not discard a failed capture: %s\n", e.what());
  }
  pool_ = 0;
  if (failure_.empty()) failure_ = "the capture was left by an exception";
}

void Graph::replay() {
  EMBER_CHECK(exec_ != nullptr, "cuda::Graph::replay: nothing captured",
              failure_.empty() ? std::string(" (call capture_begin and capture_end first)")
                               : " (the capture failed: " + failure_ + ")");
  EMBER_CHECK(!capturing_, "cuda::Graph::replay: the graph is still capturing");
  // The replay draws where the device's counter says, after the previous replay's numbers: a
  // generator moved on the host since then would hand the same numbers out twice.
  for (size_t i = 0; i < rng_generators_.size(); ++i) {
    const RngState now = rng_generators_[i]->state();
    EMBER_CHECK(now == rng_expected_[i], "cuda::Graph::replay: a generator the capture drew from moved since ",
                replays_ == 0 ? "the capture" : "the last replay", " (offset ", rng_expected_[i].offset, " -> ",
                now.offset, ", seed ", now.seed == rng_expected_[i].seed ? "unchanged" : "changed",
                ": an eager random op, manual_seed or set_state); the replay would repeat random numbers already "
                "drawn: capture again (train.cuda_graphs does after an eager step)");
  }
  DeviceGuard guard(device_);
  detail::cuda_graph_launch(device_.index(), exec_, current_stream(device_).handle());
  // The host generators follow (a checkpoint, an eager step after it draws where eager would).
  if (replays_ > 0) {
    for (Generator* g : rng_generators_) g->reserve(4 * rng_stride_);
    for (const auto& hook : replay_hooks_) hook();
  }
  for (size_t i = 0; i < rng_generators_.size(); ++i) rng_expected_[i] = rng_generators_[i]->state();
  ++replays_;
}

void Graph::reset() {
  EMBER_CHECK(!capturing_, "cuda::Graph::reset: the graph is capturing; end the capture first");
  if (graph_ == nullptr && exec_ == nullptr && pool_ == 0) return;
  DeviceGuard guard(device_);
  // A replay in flight still writes the pool: wait before its memory can go to anyone else.
  if (replays_ > 0) synchronize(device_);
  detail::cuda_graph_destroy(device_.index(), graph_, exec_);
  graph_ = exec_ = nullptr;
  if (pool_ != 0) {
    // The pool's free segments join the general cache of the capture stream, where nothing else
    // allocates: a new capture takes only from its own new pool, so each re-capture would keep one
    // more step's working set reserved. Give whole free segments back (the device is idle here).
    CachingAllocator& alloc = cuda_caching_allocator(device_.index());
    alloc.release_pool(pool_);
    alloc.empty_cache();
  }
  pool_ = 0;
  replays_ = 0;
  rng_stride_ = 0;
  rng_generators_.clear();
  rng_expected_.clear();
  replay_hooks_.clear();
}

GraphCapture::GraphCapture(Graph& graph, Device device) : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  graph_.capture_begin(device);
}

GraphCapture::GraphCapture(Graph& graph, Stream stream) : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  graph_.capture_begin(stream);
}

void GraphCapture::end() {
  if (graph_.capturing()) graph_.capture_end();
}

GraphCapture::~GraphCapture() {
  if (!graph_.capturing()) return;
  if (std::uncaught_exceptions() > uncaught_) {
    graph_.abort_capture();
    return;
  }
  try {
    graph_.capture_end();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: a CUDA graph capture failed at the end of its GraphCapture: %s\n", e.what());
  }
}

}  // namespace cuda
}  // namespace ember
