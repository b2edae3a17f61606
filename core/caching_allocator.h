#pragma once
// The CUDA caching allocator. Device memory is expensive to get (cudaMalloc synchronizes), so freed
// blocks are kept in per-stream pools and handed out again. Blocks are rounded to size classes
// (512 B granules); small requests (≤ 1 MiB) are carved from 2 MiB segments, large ones from
// segments of their rounded size (or 20 MiB-aligned for 1-10 MiB). A larger free block is split
// and the remainder returned to the pool; on free, adjacent free blocks of one segment merge.
// A block is only reused by the stream it was allocated on, so no cross-stream sync is needed.
//
// The bookkeeping is independent of CUDA: the raw memory comes from a Backend, which is cudaMalloc
// in production and a host-memory fake in the CPU tests.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include <ember/core/allocator.h>

namespace ember {

struct AllocatorStats {
  size_t allocated = 0;  // bytes in blocks handed out (rounded sizes)
  size_t reserved = 0;  // bytes held from the backend (segments)
  size_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset_peak()
  size_t peak_reserved = 0;
  uint64_t num_allocs = 0;  // allocate() calls served
  uint64_t num_backend_allocs = 0;  // segments requested from the backend
  uint64_t num_backend_frees = 0;
  uint64_t cache_hits = 0;  // allocate() calls served without a backend allocation
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
  /// Returns all free segments to the backend.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  /// Rounded size a request of `nbytes` occupies.
  static size_t round_size(size_t nbytes);

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  static void deleter(void* ctx, void* ptr);
  void free_block(void* ptr);
  Block* find_free(size_t size, void* stream, bool small);
  void release_free_segments();

  mutable std::mutex mu_;
  std::unique_ptr<Backend> backend_;
  std::set<Block*, BlockLess> small_free_, large_free_;
  std::unordered_map<void*, Block*> active_;
  AllocatorStats stats_;
};

/// The caching allocator of CUDA device `index` (created on first use; requires CUDA).
CachingAllocator& cuda_caching_allocator(int index);
/// Frees cached blocks on every CUDA device (no-op without CUDA).
void cuda_empty_cache();

}  // namespace ember
