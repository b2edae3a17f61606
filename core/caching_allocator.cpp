// The caching allocator's bookkeeping (design notes in core/caching_allocator.h).
//
// Segments come from the Backend and are cut into Blocks linked in address order (prev/next),
// so a freed block can merge with free neighbours of the same segment. Free blocks sit in one of
// two sets (small and large pool) ordered by (stream, size, address): a lookup is a lower_bound
// on (stream, size), i.e. the smallest free block of this stream that fits (best fit). One mutex
// guards everything; the backend is called under it (as cudaMalloc synchronizes anyway).
#include <ember/core/caching_allocator.h>

#include <cstdint>
#include <cstdio>
#include <exception>

#include <ember/core/error.h>

namespace ember {

struct CachingAllocator::Block {
  size_t size = 0;  // bytes, a multiple of kGranule (the whole segment when unsplit)
  void* ptr = nullptr;
  void* stream = nullptr;  // the stream whose pool owns this block's segment
  bool small = false;  // which pool the segment belongs to
  bool allocated = false;
  Block* prev = nullptr;  // neighbours inside the same segment, in address order
  Block* next = nullptr;
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
}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return addr(a->stream) < addr(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return addr(a->ptr) < addr(b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
  EMBER_CHECK(backend_ != nullptr, "CachingAllocator: a backend is required");
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
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

DataPtr CachingAllocator::allocate(size_t nbytes, void* stream) {
  if (nbytes == 0) return {};
  EMBER_CHECK(nbytes <= kMaxRequest, "out of memory on ", backend_->name(), ": cannot allocate ", nbytes,
              " bytes (more than any device holds)");
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallLimit;

  std::lock_guard<std::mutex> lock(mu_);
  Block* block = find_free(size, stream, small);
  if (block) {
    ++stats_.cache_hits;
  } else {
    const size_t seg = segment_size(size);
    void* p = backend_->alloc(seg);
    if (p == nullptr) {  // the cache may hold enough free segments: give them back and try once more
      release_free_segments();
      p = backend_->alloc(seg);
    }
    EMBER_CHECK(p != nullptr, "out of memory on ", backend_->name(), ": could not allocate ", nbytes,
                " bytes (a new segment of ", seg, " bytes), even after returning all cached blocks; ember has ",
                stats_.allocated, " bytes in use and ", stats_.reserved, " bytes reserved on this device");
    try {
      block = new Block{seg, p, stream, small, false, nullptr, nullptr};
    } catch (...) {
      backend_->free(p);
      throw;
    }
    stats_.reserved += seg;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.num_backend_allocs;
  }

  if (should_split(block->size - size, small)) {
    Block* rest =
        new Block{block->size - size, static_cast<char*>(block->ptr) + size, stream, small, false, block, block->next};
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    (small ? small_free_ : large_free_).insert(rest);
  }
  block->allocated = true;
  active_.emplace(block->ptr, block);
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.num_allocs;
  return DataPtr(block->ptr, this, &CachingAllocator::deleter);
}

CachingAllocator::Block* CachingAllocator::find_free(size_t size, void* stream, bool small) {
  auto& pool = small ? small_free_ : large_free_;
  Block key{size, nullptr, stream, small, false, nullptr, nullptr};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
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
  b->allocated = false;
  stats_.allocated -= b->size;
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
  for (auto* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment that still has blocks in use
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

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
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
}

}  // namespace ember
