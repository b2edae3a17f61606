#pragma once
// The caching allocator, for CUDA device memory and (core/allocator.cpp) CPU tensors' host memory.
// Device memory is expensive to get (cudaMalloc synchronizes), so freed blocks are kept in
// per-stream pools and handed out again. Blocks are rounded to size classes (512 B granules);
// small requests (≤ 1 MiB) are carved from 2 MiB segments, those below 10 MiB from 20 MiB
// segments, larger ones from a segment of their size rounded up to 2 MiB. A larger free block is
// split and the remainder returned to the pool; on free, adjacent free blocks of one segment merge.
// A block is only reused by the stream it was allocated on, so no cross-stream sync is needed.
//
// The cross-stream rule (as PyTorch's): memory is handed out for one stream, the current stream
// of the allocating thread, and a freed block goes back to that stream's pool. Work on that
// stream is ordered before any later user of the block, so freeing early is safe. Work queued on
// ANOTHER stream is not: the block could be reused and overwritten while that work still reads or
// writes it. Whoever uses a tensor on another stream (a side-stream copy, an NCCL collective on a
// communication stream) must call record_stream(storage, that_stream) before the tensor is freed;
// the block then returns to its pool only once events recorded on every such stream at free time
// have completed (checked without waiting at the next allocation). Debug builds (!NDEBUG), or
// EMBER_DEBUG_STREAMS=1, report a freed block whose last use noted by a kernel launch was on
// another stream and that was not recorded (stderr, and AllocatorStats::unrecorded_cross_stream_frees).
//
// CUDA graphs (core/cuda_graph.h): between begin_capture(S, pool) and end_capture(S), what the
// capturing thread allocates for stream S comes from private pool `pool` (blocks keyed by the pool
// as well as the stream), and blocks of that pool freed meanwhile go back to it, to be reused
// later in the same capture. After the capture, the pool's blocks, free or not, are handed to no
// one else until release_pool(pool) (the graph's reset or destruction); then, once free, its
// segments join S's general cache. A block of the general cache freed inside a capture may still
// be read by the graph's replays: it is held back until its pool is released. During a capture the
// allocator returns nothing to the backend, and the capturing thread neither polls nor waits for
// the events of deferred frees (both are illegal in a stream capture). An allocation by the
// capturing thread for another stream is an error naming both streams.
//
// The bookkeeping is independent of CUDA: the raw memory and the events come from a Backend: the
// CUDA runtime for a GPU, aligned host memory for the CPU (core/allocator.cpp), a fake in the tests.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ember/core/allocator.h>
#include <ember/core/storage.h>
#include <ember/core/stream.h>

namespace ember {

struct AllocatorStats {
  size_t allocated = 0;  // bytes in blocks handed out (rounded sizes)
  size_t reserved = 0;  // bytes held from the backend (segments)
  size_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset_peak()
  size_t peak_reserved = 0;
  size_t requested = 0;  // bytes the live blocks were asked for (before rounding and unsplit tails)
  size_t peak_requested = 0;  // high-water mark of `requested` since the last reset_peak()
  uint64_t num_allocs = 0;  // allocate() calls served
  uint64_t num_backend_allocs = 0;  // segments requested from the backend
  uint64_t num_backend_frees = 0;
  uint64_t cache_hits = 0;  // allocate() calls served without a backend allocation
  uint64_t pending_frees = 0;  // freed blocks waiting for their recorded streams (still in `allocated`)
  uint64_t deferred_frees = 0;  // frees that had to wait for recorded streams, in all
  uint64_t unrecorded_cross_stream_frees = 0;  // debug check: last used on another stream, not recorded
  size_t private_pool_reserved = 0;  // bytes of segments owned by CUDA graphs' private pools (in `reserved`)
  uint64_t private_pool_allocs = 0;  // allocate() calls served from a private pool, in all
};

class CachingAllocator : public Allocator {
 public:
  /// Where raw segments come from.
  class Backend {
   public:
    virtual ~Backend() = default;
    /// Returns nullptr when out of memory (the allocator then frees its cache and retries once).
    virtual void* alloc(size_t nbytes) = 0;
    virtual void free(void* ptr) = 0;
    /// The stream the next allocation is for (the device's current stream in production).
    virtual void* current_stream() = 0;
    /// Where the memory lives, for error messages ("cuda:1").
    virtual std::string name() const { return "device"; }
    /// The device's free and total bytes as its driver sees them, for out-of-memory messages
    /// ({0, 0}: unknown).
    virtual std::pair<size_t, size_t> memory_info() const { return {0, 0}; }
    /// An event that completes once the work queued so far on `stream` is done (null: the
    /// backend's work is synchronous and already done, as for host memory).
    virtual void* record_event(void* /*stream*/) { return nullptr; }
    /// Whether `event` has completed; never waits. Null events have.
    virtual bool event_done(void* /*event*/) { return true; }
    /// Blocks the host until `event` completes.
    virtual void event_wait(void* /*event*/) {}
    /// `event` is no longer needed.
    virtual void event_release(void* /*event*/) {}
  };

  static constexpr size_t kGranule = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;  // ≤ 1 MiB: small pool
  static constexpr size_t kSmallSegment = size_t(2) << 20;  // small segments are 2 MiB
  static constexpr size_t kMidLimit = size_t(10) << 20;  // < 10 MiB: 20 MiB segments
  static constexpr size_t kMidSegment = size_t(20) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;  // ≥ 10 MiB: rounded to 2 MiB

  explicit CachingAllocator(std::unique_ptr<Backend> backend);
  ~CachingAllocator() override;

  DataPtr allocate(size_t nbytes) override;
  /// Allocation for an explicit stream.
  DataPtr allocate(size_t nbytes, void* stream);
  /// Returns all free segments to the backend (after taking back the deferred frees whose
  /// streams are done).
  void empty_cache();
  /// Marks the block at `ptr` (a pointer this allocator returned) as used by work queued on
  /// `stream`: when it is freed, it waits for that work before it can be reused (see the top
  /// comment). Recording the block's own stream does nothing. Returns false when `ptr` is not a
  /// live block of this allocator (memory from elsewhere: nothing to do).
  bool record_stream(void* ptr, void* stream);
  /// Debug check: notes that work on `stream` uses the block at `ptr` (kernel launches call it
  /// through note_stream_use when stream checks are on). Unknown pointers are ignored.
  void note_use(void* ptr, void* stream);
  AllocatorStats stats() const;
  void reset_peak();

  /// A fresh private pool id (never 0, unique in the process).
  static uint64_t new_pool_id();
  /// From now on, allocations the calling thread makes for `stream` come from private pool
  /// `pool`, until end_capture(stream). One capture per stream at a time.
  void begin_capture(void* stream, uint64_t pool);
  void end_capture(void* stream);
  /// The pool's graph is gone: its free blocks, and its others once freed, return to the
  /// general cache of their stream; the blocks held back during its capture are freed for reuse.
  void release_pool(uint64_t pool);
  /// Whether the calling thread is capturing into a pool of this allocator.
  bool thread_capturing() const;
  /// Rounded size a request of `nbytes` occupies.
  static size_t round_size(size_t nbytes);

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  /// A freed block whose recorded streams' events have not all completed.
  struct DeferredFree {
    Block* block;
    std::vector<void*> events;
  };
  static void deleter(void* ctx, void* ptr);
  [[noreturn]] void throw_out_of_memory(size_t nbytes, size_t segment) const;  // mu_ held
  void free_block(void* ptr);
  void return_block(Block* b);  // merges b with free neighbours into its pool
  /// A freed block (mu_ held): deferred until events on the other streams recorded on it complete,
  /// else returned at once.
  void defer_or_return(Block* b);
  void process_deferred(bool wait);  // returns the blocks whose events completed (all, if wait)
  Block* find_free(size_t size, void* stream, uint64_t pool, bool small);
  struct Capture {
    uint64_t pool;
    std::thread::id thread;
  };
  uint64_t capture_pool_locked(void* stream);  // the pool the calling thread allocates from (0: none)
  bool thread_capturing_locked() const;
  void release_free_segments();

  mutable std::mutex mu_;
  std::unique_ptr<Backend> backend_;
  std::string counter_name_;  // "memory cpu": its bytes-in-use track in a profile (core/record.h)
  std::set<Block*, BlockLess> small_free_, large_free_;
  std::unordered_map<void*, Block*> active_;
  std::vector<DeferredFree> deferred_;
  std::unordered_map<void*, Capture> captures_;  // by capture stream
  std::set<uint64_t> live_pools_;  // pools not yet released
  std::map<uint64_t, size_t> pool_bytes_;  // segment bytes per live pool
  std::map<uint64_t, std::vector<Block*>> held_;  // per pool: general blocks freed in its capture
  AllocatorStats stats_;
};

/// The caching allocator of CUDA device `index` (created on first use; requires CUDA).
CachingAllocator& cuda_caching_allocator(int index);
/// Frees cached blocks on every CUDA device (no-op without CUDA).
void cuda_empty_cache();

/// Declares that work queued on `stream` uses `storage`'s memory (PyTorch's
/// Tensor.record_stream): once the storage is freed, its block is not reused until that work is
/// done. Required for every stream other than the one the storage was allocated on (the
/// allocating thread's current stream) that touches it before it is freed, e.g. an NCCL
/// collective on a communication stream: `record_stream(t.storage(), comm_stream)`. No-op for
/// CPU storages and for memory not from the caching allocator; the stream must be on the
/// storage's device.
void record_stream(const Storage& storage, const Stream& stream);

/// Whether launches note which stream uses which block, so that a free after a cross-stream use
/// without record_stream is reported (on in debug builds or with EMBER_DEBUG_STREAMS=1).
bool stream_checks_enabled();
void set_stream_checks(bool on);
/// Notes a use of `storage` by work on `stream` for that check (no-op when it is off, or for CPU
/// storages). Kernel launchers call it for the tensors they write.
void note_stream_use(const Storage& storage, const Stream& stream);

}  // namespace ember
