// The caching allocator's bookkeeping (design notes in core/caching_allocator.h).
//
// Segments come from the Backend and are cut into Blocks linked in address order (prev/next),
// so a freed block can merge with free neighbours of the same segment. Free blocks sit in one of
// two sets (small and large pool) ordered by (stream, size, address): a lookup is a lower_bound
// on (stream, size), i.e. the smallest free block of this stream that fits (best fit). One mutex
// guards everything; the backend is called under it (as cudaMalloc synchronizes anyway).
//
// record_stream: a block remembers the other streams recorded on it. Freeing it then records one
// event per such stream and parks it in deferred_ (still counted as allocated, never merged); the
// next allocate() or empty_cache() polls those events and returns the block to its pool once all
// have completed. Before failing for lack of memory, the allocator waits for every deferred block.
#include <ember/core/caching_allocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include <ember/core/error.h>
#include <ember/core/record.h>

namespace ember {

struct CachingAllocator::Block {
  size_t size = 0;  // bytes, a multiple of kGranule (the whole segment when unsplit)
  void* ptr = nullptr;
  void* stream = nullptr;  // the stream whose pool owns this block's segment
  bool small = false;  // which pool the segment belongs to
  bool allocated = false;
  Block* prev = nullptr;  // neighbours inside the same segment, in address order
  Block* next = nullptr;
  std::vector<void*> stream_uses;  // other streams recorded (record_stream) since it was handed out
  void* last_use = nullptr;  // the stream of the last noted use (stream checks), when use_noted
  bool use_noted = false;
  size_t requested = 0;  // bytes asked for, while allocated
  uint64_t pool = 0;  // the CUDA graph pool owning the segment (0: the general cache)
};

namespace {
uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Bytes of the segment that serves a block of `size` (already rounded) bytes.
size_t segment_size(size_t size) {
  if (size <= CachingAllocator::kSmallLimit) return CachingAllocator::kSmallSegment;
  if (size < CachingAllocator::kMidLimit) return CachingAllocator::kMidSegment;
  const size_t r = CachingAllocator::kLargeRound;
  return (size + r - 1) / r * r;
}

// Whether the tail left after carving `size` bytes out of a free block is worth keeping apart.
// Large-pool tails of ≤ 1 MiB stay attached: they could only ever serve small-pool-sized requests,
// which the large pool never sees.
bool should_split(size_t remaining, bool small) {
  return small ? remaining >= CachingAllocator::kGranule : remaining > CachingAllocator::kSmallLimit;
}

// Requests beyond this cannot be rounded without overflow and could never be served anyway.
constexpr size_t kMaxRequest = size_t(1) << 56;

bool initial_stream_checks() {
#ifndef NDEBUG
  return true;
#else
  const char* v = std::getenv("EMBER_DEBUG_STREAMS");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
#endif
}

std::atomic<bool> g_stream_checks{initial_stream_checks()};

bool contains(const std::vector<void*>& v, void* x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

bool stream_checks_enabled() { return g_stream_checks.load(std::memory_order_relaxed); }
void set_stream_checks(bool on) { g_stream_checks.store(on, std::memory_order_relaxed); }

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->pool != b->pool) return a->pool < b->pool;
  if (a->stream != b->stream) return addr(a->stream) < addr(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return addr(a->ptr) < addr(b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
  EMBER_CHECK(backend_ != nullptr, "CachingAllocator: a backend is required");
  counter_name_ = "memory " + backend_->name();
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    process_deferred(true);
    release_free_segments();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~CachingAllocator could not return cached segments: %s\n", e.what());
  }
  if (!active_.empty())
    std::fprintf(stderr,
                 "ember: CachingAllocator destroyed with %zu blocks (%zu bytes) still in use; their memory is "
                 "leaked\n",
                 active_.size(), stats_.allocated);
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) return 0;
  return (nbytes + kGranule - 1) / kGranule * kGranule;
}

DataPtr CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return {};
  return allocate(nbytes, backend_->current_stream());
}

namespace {
std::string bytes_text(size_t n) {  // "12.0 MiB"
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 5) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}
}  // namespace

// The message users know from other frameworks: what was asked, what ember holds, what the device
// has free, and what to change.
void CachingAllocator::throw_out_of_memory(size_t nbytes, size_t segment) const {
  const auto [free, total] = backend_->memory_info();
  const std::string device_part =
      total > 0 ? "; the device has " + bytes_text(free) + " free of " + bytes_text(total) : std::string();
  EMBER_FAIL("out of memory on ", backend_->name(), ": could not allocate ", nbytes, " bytes (", bytes_text(nbytes),
             "; a new segment of ", segment, " bytes), even after returning all cached blocks; ember has ",
             stats_.allocated, " bytes (", bytes_text(stats_.allocated), ") in use and ", stats_.reserved,
             " bytes reserved (", bytes_text(stats_.reserved), ") on this device", device_part,
             ". Try a smaller batch size (data.batch_size in a config, --batch-size in the examples), "
             "precision bf16 or fp16, or fewer processes sharing the device");
}

DataPtr CachingAllocator::allocate(size_t nbytes, void* stream) {
  if (nbytes == 0) return {};
  EMBER_CHECK(nbytes <= kMaxRequest, "out of memory on ", backend_->name(), ": cannot allocate ", nbytes,
              " bytes (more than any device holds)");
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallLimit;

  std::lock_guard<std::mutex> lock(mu_);
  // A capturing thread's allocations for its capture stream come from the graph's pool; it must not
  // query or wait for events (illegal during a stream capture), nor may anyone free segments.
  const uint64_t pool = captures_.empty() ? 0 : capture_pool_locked(stream);
  const bool may_poll = captures_.empty() || (pool == 0 && !thread_capturing_locked());
  if (!deferred_.empty() && may_poll) process_deferred(false);
  Block* block = find_free(size, stream, pool, small);
  const size_t seg = segment_size(size);
  void* p = nullptr;
  if (!block) {
    p = backend_->alloc(seg);
    if (p == nullptr && !deferred_.empty() && may_poll) {  // blocks waiting for other streams: wait, look again
      process_deferred(true);
      block = find_free(size, stream, pool, small);
    }
    if (!block && p == nullptr && captures_.empty()) {  // the cache may hold enough free segments: give them back
      release_free_segments();
      p = backend_->alloc(seg);
    }
  }
  if (block) {
    ++stats_.cache_hits;
  } else {
    if (p == nullptr) throw_out_of_memory(nbytes, seg);
    try {
      block = new Block{seg, p, stream, small, false, nullptr, nullptr, {}, nullptr, false, 0, pool};
    } catch (...) {
      backend_->free(p);
      throw;
    }
    if (pool != 0) {
      pool_bytes_[pool] += seg;
      stats_.private_pool_reserved += seg;
    }
    stats_.reserved += seg;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.num_backend_allocs;
  }

  if (should_split(block->size - size, small)) {
    Block* rest = new Block{block->size - size,
                            static_cast<char*>(block->ptr) + size,
                            stream,
                            small,
                            false,
                            block,
                            block->next,
                            {},
                            nullptr,
                            false,
                            0,
                            pool};
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    (small ? small_free_ : large_free_).insert(rest);
  }
  block->allocated = true;
  block->stream_uses.clear();
  block->use_noted = false;
  active_.emplace(block->ptr, block);
  block->requested = nbytes;
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  if (profiler::recording()) profiler::record_counter(counter_name_, static_cast<double>(stats_.allocated));
  stats_.requested += nbytes;
  stats_.peak_requested = std::max(stats_.peak_requested, stats_.requested);
  ++stats_.num_allocs;
  if (pool != 0) ++stats_.private_pool_allocs;
  return DataPtr(block->ptr, this, &CachingAllocator::deleter);
}

CachingAllocator::Block* CachingAllocator::find_free(size_t size, void* stream, uint64_t pool, bool small) {
  auto& set = small ? small_free_ : large_free_;
  Block key{size, nullptr, stream, small, false, nullptr, nullptr, {}, nullptr, false, 0, pool};
  auto it = set.lower_bound(&key);
  if (it == set.end() || (*it)->stream != stream || (*it)->pool != pool) return nullptr;
  Block* b = *it;
  set.erase(it);
  return b;
}

uint64_t CachingAllocator::new_pool_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool CachingAllocator::thread_capturing_locked() const {
  const std::thread::id me = std::this_thread::get_id();
  for (const auto& [s, c] : captures_)
    if (c.thread == me) return true;
  return false;
}

bool CachingAllocator::thread_capturing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_capturing_locked();
}

uint64_t CachingAllocator::capture_pool_locked(void* stream) {
  const std::thread::id me = std::this_thread::get_id();
  auto it = captures_.find(stream);
  if (it != captures_.end() && it->second.thread == me) return it->second.pool;
  for (const auto& [s, c] : captures_) {
    if (c.thread != me) continue;
    const std::string op = profiler::detail::innermost_capture_scope();
    EMBER_FAIL("allocation outside the graph's pool on ", backend_->name(),
               ": this thread is capturing a CUDA graph on ", "stream ", s, " and asked for memory for stream ", stream,
               op.empty() ? std::string() : " in op " + op,
               "; inside a capture, allocate on the capture stream (the current stream) only");
  }
  return 0;
}

void CachingAllocator::begin_capture(void* stream, uint64_t pool) {
  EMBER_CHECK(pool != 0, "CachingAllocator::begin_capture: pool 0 is the general cache; use new_pool_id()");
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(captures_.find(stream) == captures_.end(), "CachingAllocator::begin_capture: stream ", stream, " of ",
              backend_->name(), " is already being captured");
  captures_.emplace(stream, Capture{pool, std::this_thread::get_id()});
  live_pools_.insert(pool);
}

void CachingAllocator::end_capture(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  captures_.erase(stream);
}

void CachingAllocator::release_pool(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  if (live_pools_.erase(pool) == 0) return;
  // Free blocks of the pool join the general cache of their stream (whole segments stay together:
  // a segment's blocks all belong to one pool).
  for (auto* set : {&small_free_, &large_free_}) {
    std::vector<Block*> moved;
    for (auto it = set->begin(); it != set->end();) {
      if ((*it)->pool == pool) {
        moved.push_back(*it);
        it = set->erase(it);
      } else {
        ++it;
      }
    }
    for (Block* b : moved) {
      b->pool = 0;
      set->insert(b);
    }
  }
  if (auto it = pool_bytes_.find(pool); it != pool_bytes_.end()) {
    stats_.private_pool_reserved -= it->second;
    pool_bytes_.erase(it);
  }
  auto held = held_.find(pool);
  if (held == held_.end()) return;
  std::vector<Block*> blocks = std::move(held->second);
  held_.erase(held);
  for (Block* b : blocks) {
    b->pool = 0;
    --stats_.pending_frees;
    defer_or_return(b);
  }
}

void CachingAllocator::deleter(void* ctx, void* ptr) { static_cast<CachingAllocator*>(ctx)->free_block(ptr); }

void CachingAllocator::free_block(void* ptr) {
  // Runs from DataPtr's destructor: must not throw.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end()) {
    std::fprintf(stderr, "ember: internal error: CachingAllocator asked to free %p, which it did not allocate\n", ptr);
    return;
  }
  Block* b = it->second;
  active_.erase(it);
  if (b->pool != 0 && live_pools_.count(b->pool) == 0) b->pool = 0;  // its graph is gone: general cache
  if (!captures_.empty() || b->pool != 0) {
    // Held until the pool is released: a general block freed by a capturing thread (the graph's
    // replays may still read it), and a pool block that other streams used (no events can be
    // recorded or polled during a capture; they are recorded at release).
    uint64_t hold = 0;
    if (b->pool != 0) {
      if (!b->stream_uses.empty()) hold = b->pool;
    } else {
      const std::thread::id me = std::this_thread::get_id();
      for (const auto& [s, c] : captures_)
        if (c.thread == me) hold = c.pool;
    }
    if (hold != 0) {
      try {
        held_[hold].push_back(b);
        ++stats_.pending_frees;
        return;
      } catch (...) {  // no memory for the bookkeeping: leak the block rather than reuse it early
        std::fprintf(stderr, "ember: a block of %zu bytes freed during a CUDA graph capture is leaked\n", b->size);
        return;
      }
    }
  }
  if (b->use_noted && b->last_use != b->stream && !contains(b->stream_uses, b->last_use) && stream_checks_enabled()) {
    ++stats_.unrecorded_cross_stream_frees;
    std::fprintf(stderr,
                 "ember: a block of %zu bytes on %s allocated for stream %p was last used on stream %p and freed "
                 "without record_stream(storage, that stream): it may be reused while that stream still uses it\n",
                 b->size, backend_->name().c_str(), b->stream, b->last_use);
  }
  defer_or_return(b);
}

void CachingAllocator::defer_or_return(Block* b) {
  if (!b->stream_uses.empty()) {
    // Not reusable until the work queued so far on every recorded stream is done.
    DeferredFree d{b, {}};
    try {
      d.events.reserve(b->stream_uses.size());
      for (void* s : b->stream_uses) d.events.push_back(backend_->record_event(s));
      deferred_.push_back(std::move(d));
      ++stats_.pending_frees;
      ++stats_.deferred_frees;
      return;
    } catch (const std::exception& e) {
      // Nothing can say when the other streams are done: wait for what was recorded, and report.
      for (void* ev : d.events) {
        try {
          backend_->event_wait(ev);
          backend_->event_release(ev);
        } catch (...) {
        }
      }
      std::fprintf(stderr, "ember: could not record the streams of a freed block on %s (%s); it is reused now\n",
                   backend_->name().c_str(), e.what());
    }
  }
  return_block(b);
}

void CachingAllocator::return_block(Block* b) {
  b->allocated = false;
  b->stream_uses.clear();
  stats_.allocated -= b->size;
  if (profiler::recording()) profiler::record_counter(counter_name_, static_cast<double>(stats_.allocated));
  stats_.requested -= b->requested;
  b->requested = 0;
  auto& pool = b->small ? small_free_ : large_free_;
  // Merge with free neighbours; a free neighbour is in the pool, keyed by its size, so take it
  // out before its size changes.
  if (Block* p = b->prev; p && !p->allocated) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n && !n->allocated) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  if (!captures_.empty()) return;  // no backend free during a stream capture
  for (auto* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next || b->pool != 0) {  // a segment with blocks in use, or a live graph's
        ++it;
        continue;
      }
      backend_->free(b->ptr);
      stats_.reserved -= b->size;
      ++stats_.num_backend_frees;
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::process_deferred(bool wait) {
  for (size_t i = 0; i < deferred_.size();) {
    DeferredFree& d = deferred_[i];
    bool done = true;
    for (void* ev : d.events) {
      if (wait) backend_->event_wait(ev);
      else if (!backend_->event_done(ev)) done = false;
      if (!done) break;
    }
    if (!done) {
      ++i;
      continue;
    }
    for (void* ev : d.events) backend_->event_release(ev);
    Block* b = d.block;
    std::swap(d, deferred_.back());
    deferred_.pop_back();
    --stats_.pending_frees;
    return_block(b);
  }
}

bool CachingAllocator::record_stream(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return false;
  Block* b = it->second;
  if (stream != b->stream && !contains(b->stream_uses, stream)) b->stream_uses.push_back(stream);
  return true;
}

void CachingAllocator::note_use(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return;
  it->second->last_use = stream;
  it->second->use_noted = true;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_capturing_locked()) process_deferred(false);
  release_free_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
  stats_.peak_requested = stats_.requested;
}

void record_stream(const Storage& storage, const Stream& stream) {
  if (!storage.defined() || storage.data() == nullptr || storage.device().is_cpu()) return;  // the CPU is synchronous
  EMBER_CHECK(stream.device() == storage.device(), "record_stream: the storage is on ", storage.device().str(),
              " but the stream on ", stream.device().str(), "; record a stream of the storage's own device");
  cuda_caching_allocator(storage.device().index()).record_stream(storage.data(), stream.handle());
}

void note_stream_use(const Storage& storage, const Stream& stream) {
  if (!stream_checks_enabled() || !storage.defined() || storage.data() == nullptr || storage.device().is_cpu() ||
      stream.device() != storage.device())
    return;
  cuda_caching_allocator(storage.device().index()).note_use(storage.data(), stream.handle());
}

}  // namespace ember
