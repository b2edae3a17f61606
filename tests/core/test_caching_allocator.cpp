// The caching allocator's bookkeeping, driven through a fake host-memory Backend that counts
// calls, can run out of memory on demand, and reports a settable current stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>

using ember::CachingAllocator;
using ember::DataPtr;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

struct FakeState {
  size_t capacity = SIZE_MAX;  // bytes the fake "device" holds
  size_t in_use = 0;
  int allocs = 0, frees = 0, failed_allocs = 0;
  std::map<char*, size_t> live;  // segment start -> size
  void* stream = nullptr;
  // Events (record_stream): handle i + 1 is event i, recorded on event_stream[i].
  std::vector<bool> event_done;
  std::vector<void*> event_stream;
  int event_waits = 0, event_releases = 0;
};

class FakeBackend final : public CachingAllocator::Backend {
 public:
  explicit FakeBackend(FakeState* s) : s_(s) {}
  void* alloc(size_t nbytes) override {
    if (s_->in_use + nbytes > s_->capacity) {
      ++s_->failed_allocs;
      return nullptr;
    }
    char* p = static_cast<char*>(std::aligned_alloc(512, nbytes));
    ++s_->allocs;
    s_->in_use += nbytes;
    s_->live[p] = nbytes;
    return p;
  }
  void free(void* ptr) override {
    auto it = s_->live.find(static_cast<char*>(ptr));
    REQUIRE(it != s_->live.end());  // only whole segments go back, by their start address
    s_->in_use -= it->second;
    s_->live.erase(it);
    ++s_->frees;
    std::free(ptr);
  }
  void* current_stream() override { return s_->stream; }
  std::string name() const override { return "fake:0"; }
  std::pair<size_t, size_t> memory_info() const override { return {s_->capacity - s_->in_use, s_->capacity}; }
  void* record_event(void* stream) override {
    s_->event_done.push_back(false);
    s_->event_stream.push_back(stream);
    return reinterpret_cast<void*>(s_->event_done.size());
  }
  bool event_done(void* e) override { return s_->event_done[index(e)]; }
  void event_wait(void* e) override {
    ++s_->event_waits;
    s_->event_done[index(e)] = true;
  }
  void event_release(void*) override { ++s_->event_releases; }

 private:
  static size_t index(void* e) { return reinterpret_cast<uintptr_t>(e) - 1; }
  FakeState* s_;
};

void* const kStreamA = reinterpret_cast<void*>(0x1000);
void* const kStreamB = reinterpret_cast<void*>(0x2000);

char* as_bytes(const DataPtr& p) { return static_cast<char*>(p.get()); }

}  // namespace

TEST_CASE("round_size uses 512-byte granules", "[cpu]") {
  CHECK(CachingAllocator::round_size(0) == 0);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(3 * MiB + 1) == 3 * MiB + 512);
}

TEST_CASE("segment sizes: 2 MiB small, 20 MiB mid, 2 MiB-rounded large", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  CHECK(a.allocate(0).get() == nullptr);
  CHECK(st.allocs == 0);
  DataPtr small = a.allocate(1000);
  REQUIRE(st.live.size() == 1);
  CHECK(st.live.begin()->second == 2 * MiB);
  // Separate streams, so that no request can be carved from another's segment.
  DataPtr mid = a.allocate(MiB + 1, kStreamA);
  CHECK(st.in_use == 2 * MiB + 20 * MiB);
  DataPtr large = a.allocate(10 * MiB + 1, kStreamB);
  CHECK(st.in_use == 2 * MiB + 20 * MiB + 12 * MiB);
  auto s = a.stats();
  CHECK(s.allocated == 1024 + (MiB + 512) + (10 * MiB + 512));
  CHECK(s.reserved == 34 * MiB);
  CHECK(s.num_backend_allocs == 3);
  CHECK(s.num_allocs == 3);
  CHECK(s.cache_hits == 0);
}

TEST_CASE("freed blocks are reused without a new backend allocation", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  void* first;
  {
    DataPtr p = a.allocate(1000);
    first = p.get();
    std::memset(p.get(), 0xab, 1000);  // the memory is really usable
    CHECK(a.stats().allocated == 1024);
  }
  CHECK(a.stats().allocated == 0);
  CHECK(a.stats().reserved == 2 * MiB);
  DataPtr q = a.allocate(700);  // same size class
  CHECK(q.get() == first);
  CHECK(st.allocs == 1);
  CHECK(a.stats().cache_hits == 1);
  // Two more small blocks are carved from the same segment, back to back.
  DataPtr r = a.allocate(512);
  DataPtr t = a.allocate(100);
  CHECK(st.allocs == 1);
  CHECK(as_bytes(r) == as_bytes(q) + 1024);
  CHECK(as_bytes(t) == as_bytes(r) + 512);
}

TEST_CASE("blocks are only reused by the stream they were allocated on", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  void* on_a;
  {
    DataPtr p = a.allocate(4096, kStreamA);
    on_a = p.get();
  }
  DataPtr q = a.allocate(4096, kStreamB);
  CHECK(q.get() != on_a);
  CHECK(st.allocs == 2);  // stream B got its own segment
  DataPtr r = a.allocate(4096, kStreamA);
  CHECK(r.get() == on_a);
  CHECK(st.allocs == 2);
  // The one-argument allocate() uses the backend's current stream.
  r.reset();
  st.stream = kStreamA;
  DataPtr s = a.allocate(4096);
  CHECK(s.get() == on_a);
  st.stream = kStreamB;
  DataPtr u = a.allocate(4096);
  CHECK(u.get() != on_a);
  CHECK(as_bytes(u) == as_bytes(q) + 4096);  // next block of stream B's segment
}

TEST_CASE("a big free block is split and neighbours merge on free", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  DataPtr x = a.allocate(100 * KiB), y = a.allocate(100 * KiB), z = a.allocate(100 * KiB);
  char* base = as_bytes(x);
  CHECK(as_bytes(y) == base + 100 * KiB);
  CHECK(as_bytes(z) == base + 200 * KiB);
  y.reset();
  x.reset();  // x merges with y: a free 200 KiB block at base
  DataPtr w = a.allocate(200 * KiB);
  CHECK(as_bytes(w) == base);
  CHECK(st.allocs == 1);
  w.reset();
  z.reset();  // everything merges back into the single 2 MiB segment
  a.empty_cache();
  CHECK(st.frees == 1);  // only possible if the segment is whole again
  CHECK(st.live.empty());
  CHECK(a.stats().reserved == 0);

  // Large pool: a 12 MiB segment serves two 2 MiB requests after it is freed.
  DataPtr big = a.allocate(12 * MiB);
  char* big_base = as_bytes(big);
  big.reset();
  const int allocs_before = st.allocs;
  DataPtr p = a.allocate(2 * MiB), q = a.allocate(2 * MiB);
  CHECK(st.allocs == allocs_before);
  CHECK(as_bytes(p) == big_base);
  CHECK(as_bytes(q) == big_base + 2 * MiB);
  CHECK(a.stats().allocated == 4 * MiB);
  // Freeing in the "wrong" order still merges: q with the tail, then p with both.
  q.reset();
  p.reset();
  DataPtr whole = a.allocate(12 * MiB);
  CHECK(as_bytes(whole) == big_base);
  CHECK(st.allocs == allocs_before);
}

TEST_CASE("large-pool remainders of 1 MiB or less stay with the block", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  a.allocate(12 * MiB).reset();
  DataPtr p = a.allocate(11 * MiB + 512 * KiB);  // leaves 0.5 MiB: not split
  CHECK(a.stats().allocated == 12 * MiB);
  CHECK(a.stats().requested == 11 * MiB + 512 * KiB);  // what was asked for, without the tail
  CHECK(st.allocs == 1);
  DataPtr q = a.allocate(2 * MiB);  // nothing free in the large pool any more
  CHECK(st.allocs == 2);
}

TEST_CASE("stats track allocated, reserved and their peaks", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  {
    DataPtr p = a.allocate(300 * KiB);
    DataPtr q = a.allocate(15 * MiB);
    auto s = a.stats();
    CHECK(s.allocated == 300 * KiB + 16 * MiB);
    CHECK(s.requested == 300 * KiB + 15 * MiB);
    CHECK(s.reserved == 2 * MiB + 16 * MiB);
  }
  auto s = a.stats();
  CHECK(s.allocated == 0);
  CHECK(s.requested == 0);
  CHECK(s.peak_allocated == 300 * KiB + 16 * MiB);
  CHECK(s.peak_requested == 300 * KiB + 15 * MiB);
  CHECK(s.reserved == 18 * MiB);
  CHECK(s.peak_reserved == 18 * MiB);
  a.empty_cache();
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().peak_reserved == 18 * MiB);
  a.reset_peak();
  CHECK(a.stats().peak_allocated == 0);
  CHECK(a.stats().peak_reserved == 0);
  CHECK(a.stats().peak_requested == 0);
  DataPtr r = a.allocate(1);
  CHECK(a.stats().peak_allocated == 512);
  CHECK(a.stats().requested == 1);
  CHECK(a.stats().peak_requested == 1);
  CHECK(a.stats().num_backend_frees == 2);
}

TEST_CASE("empty_cache returns only segments with nothing in use", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  DataPtr keep = a.allocate(1000);
  DataPtr drop = a.allocate(3 * MiB);
  DataPtr other_stream = a.allocate(1000, kStreamB);
  drop.reset();
  other_stream.reset();
  a.empty_cache();
  CHECK(st.frees == 2);
  CHECK(st.live.size() == 1);
  CHECK(st.live.begin()->first == as_bytes(keep));  // keep's segment starts at its block
  CHECK(a.stats().reserved == 2 * MiB);
  keep.reset();
  a.empty_cache();
  CHECK(st.live.empty());
}

TEST_CASE("out of memory: empty the cache, retry, then fail naming the size", "[cpu]") {
  FakeState st;
  st.capacity = 24 * MiB;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  a.allocate(1000).reset();  // 2 MiB cached
  a.allocate(12 * MiB).reset();  // 12 MiB cached
  DataPtr p = a.allocate(12 * MiB, kStreamB);  // needs 12 MiB more than fit next to the cache
  REQUIRE(p.get() != nullptr);
  CHECK(st.failed_allocs == 1);
  CHECK(st.frees == 2);  // both cached segments went back before the retry
  CHECK(a.stats().reserved == 12 * MiB);

  try {
    a.allocate(100 * MiB);
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("out of memory on fake:0") != std::string::npos);
    CHECK(msg.find(std::to_string(100 * MiB) + " bytes") != std::string::npos);
    CHECK(msg.find(std::to_string(12 * MiB) + " bytes reserved (12.0 MiB)") != std::string::npos);
    CHECK(msg.find("(100.0 MiB; a new segment") != std::string::npos);
    CHECK(msg.find("the device has 12.0 MiB free of 24.0 MiB") != std::string::npos);
    CHECK(msg.find("Try a smaller batch size") != std::string::npos);
  }
  // Still consistent afterwards.
  DataPtr q = a.allocate(MiB);
  CHECK(q.get() != nullptr);
  CHECK(a.stats().allocated == 12 * MiB + MiB);
  CHECK_THROWS_AS(a.allocate(SIZE_MAX), ember::Error);
}

TEST_CASE("random allocate/free keeps blocks disjoint and the accounting exact", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size_dist(1, 300 * KiB);
  std::vector<std::pair<DataPtr, size_t>> live;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      size_t n = size_dist(rng);
      DataPtr p = a.allocate(n, (rng() % 4 == 0) ? kStreamB : kStreamA);
      std::memset(p.get(), step & 0xff, n);
      live.emplace_back(std::move(p), n);
    } else {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));
    }
    if (step % 97 == 0) {
      // Live blocks never overlap, lie inside backend segments, and `allocated` is their sum.
      std::vector<std::pair<char*, size_t>> spans;
      size_t total = 0;
      for (auto& [p, n] : live) {
        spans.emplace_back(as_bytes(p), CachingAllocator::round_size(n));
        total += CachingAllocator::round_size(n);
      }
      std::sort(spans.begin(), spans.end());
      for (size_t i = 1; i < spans.size(); ++i) REQUIRE(spans[i - 1].first + spans[i - 1].second <= spans[i].first);
      for (auto& [p, n] : spans) {
        auto seg = st.live.upper_bound(p);
        REQUIRE(seg != st.live.begin());
        --seg;
        REQUIRE(p + n <= seg->first + seg->second);
      }
      REQUIRE(a.stats().allocated == total);
      REQUIRE(a.stats().reserved == st.in_use);
    }
  }
  live.clear();
  CHECK(a.stats().allocated == 0);
  a.empty_cache();
  CHECK(st.live.empty());  // every segment merged back whole
  CHECK(a.stats().reserved == 0);
  CHECK(a.stats().cache_hits > 1000);
}

TEST_CASE("concurrent allocate/free from several threads", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  const int kThreads = 4;
  std::vector<int> errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<std::pair<DataPtr, size_t>> mine;
      for (int step = 0; step < 3000; ++step) {
        if (mine.size() < 8 && rng() % 2 == 0) {
          size_t n = 1 + rng() % (64 * KiB);
          DataPtr p = a.allocate(n, kStreamA);
          std::memset(p.get(), t + 1, n);
          mine.emplace_back(std::move(p), n);
        } else if (!mine.empty()) {
          auto& [p, n] = mine.back();
          const char* c = as_bytes(p);
          for (size_t i = 0; i < n; i += 97)
            if (c[i] != t + 1) ++errors[t];  // another thread wrote into our block
          mine.pop_back();
        }
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(errors[t] == 0);
  CHECK(a.stats().allocated == 0);
  a.empty_cache();
  CHECK(st.live.empty());
}

TEST_CASE("record_stream: a block used on another stream is reused only once that stream's work is done", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  void* first;
  {
    DataPtr p = a.allocate(4096, kStreamA);
    first = p.get();
    CHECK(a.record_stream(first, kStreamA));  // its own stream: nothing to wait for
    CHECK(a.record_stream(first, kStreamB));
    CHECK(a.record_stream(first, kStreamB));  // recorded once
  }
  // Freed: one event on stream B, and the block waits (still counted as allocated).
  REQUIRE(st.event_stream.size() == 1);
  CHECK(st.event_stream[0] == kStreamB);
  CHECK(a.stats().pending_frees == 1);
  CHECK(a.stats().allocated == 4096);
  DataPtr q = a.allocate(4096, kStreamA);  // B's work is not done: another block
  CHECK(q.get() != first);
  st.event_done[0] = true;
  DataPtr r = a.allocate(4096, kStreamA);  // the next allocation finds the event complete
  CHECK(r.get() == first);
  CHECK(a.stats().pending_frees == 0);
  CHECK(a.stats().deferred_frees == 1);
  CHECK(st.event_releases == 1);
  CHECK(st.event_waits == 0);  // polled, never waited for
  CHECK(a.stats().allocated == 2 * 4096);
  // The recording does not outlive the block: freed again, r goes straight back to the pool.
  r.reset();
  CHECK(st.event_stream.size() == 1);
  CHECK(a.allocate(4096, kStreamA).get() == first);
  CHECK_FALSE(a.record_stream(reinterpret_cast<void*>(0x10), kStreamB));  // not ours: nothing to do
}

TEST_CASE("record_stream: every recorded stream must be done, and empty_cache leaves waiting blocks alone", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  void* const kStreamC = reinterpret_cast<void*>(0x3000);
  {
    DataPtr p = a.allocate(3 * MiB, kStreamA);  // a segment of its own (20 MiB pool)
    a.record_stream(p.get(), kStreamB);
    a.record_stream(p.get(), kStreamC);
  }
  REQUIRE(st.event_stream.size() == 2);
  st.event_done[0] = true;  // B done, C not
  a.empty_cache();
  CHECK(a.stats().pending_frees == 1);
  CHECK(st.frees == 0);  // the segment is still in use until C is done
  st.event_done[1] = true;
  a.empty_cache();
  CHECK(a.stats().pending_frees == 0);
  CHECK(st.frees == 1);
  CHECK(a.stats().reserved == 0);
  CHECK(st.event_releases == 2);
}

TEST_CASE("record_stream: out of memory waits for the deferred blocks before failing", "[cpu]") {
  FakeState st;
  st.capacity = 30 * MiB;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  void* big;
  {
    DataPtr p = a.allocate(12 * MiB, kStreamA);
    big = p.get();
    a.record_stream(big, kStreamB);
  }
  DataPtr q = a.allocate(12 * MiB, kStreamB);  // another stream's pool: 24 MiB reserved
  CHECK(st.event_waits == 0);
  // 12 MiB more do not fit next to 24 MiB reserved: the allocator waits for stream B, then
  // reuses the 12 MiB block rather than fail.
  DataPtr r = a.allocate(12 * MiB, kStreamA);
  CHECK(st.event_waits == 1);
  CHECK(r.get() == big);
  CHECK(a.stats().pending_frees == 0);
}

TEST_CASE("stream checks: a free after an unrecorded use on another stream is reported", "[cpu]") {
  FakeState st;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  const bool was = ember::stream_checks_enabled();
  ember::set_stream_checks(true);
  {
    DataPtr p = a.allocate(1000, kStreamA);
    a.note_use(p.get(), kStreamA);  // its own stream: fine
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == 0);
  {
    DataPtr p = a.allocate(1000, kStreamA);
    a.note_use(p.get(), kStreamB);
    a.record_stream(p.get(), kStreamB);  // recorded: fine (and deferred)
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == 0);
  {
    DataPtr p = a.allocate(1000, kStreamA);
    a.note_use(p.get(), kStreamB);
    a.note_use(p.get(), kStreamA);  // the last use counts
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == 0);
  {
    DataPtr p = a.allocate(1000, kStreamA);
    a.note_use(p.get(), kStreamB);
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == 1);
  ember::set_stream_checks(false);
  {
    DataPtr p = a.allocate(1000, kStreamA);
    a.note_use(p.get(), kStreamB);
  }
  CHECK(a.stats().unrecorded_cross_stream_frees == 1);  // off: not looked at
  ember::set_stream_checks(was);
}

TEST_CASE("record_stream on CPU storages is a no-op", "[cpu]") {
  ember::Storage s(100, ember::Device::cpu());
  CHECK_NOTHROW(ember::record_stream(s, ember::Stream()));
  CHECK_NOTHROW(ember::note_stream_use(s, ember::Stream()));
  CHECK_NOTHROW(ember::record_stream(ember::Storage(), ember::Stream()));
}

// ---- CUDA graphs' private pools (core/cuda_graph.h), on the fake backend ----

namespace {
bool inside(const void* p, const char* seg, size_t n) {
  const char* c = static_cast<const char*>(p);
  return c >= seg && c < seg + n;
}
}  // namespace

TEST_CASE("a graph's pool: reused inside its capture, kept from everyone else until released", "[cpu]") {
  FakeState st;
  st.stream = kStreamA;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  { DataPtr general = a.allocate(4 * KiB); }  // a free general block of stream A the capture must not take
  REQUIRE(st.allocs == 1);
  const uint64_t pool = CachingAllocator::new_pool_id();
  CHECK(pool != 0);
  a.begin_capture(kStreamA, pool);
  CHECK(a.thread_capturing());
  char* first;
  {
    DataPtr x = a.allocate(4 * KiB);
    first = as_bytes(x);
  }  // freed inside the capture: back to the pool
  CHECK(st.allocs == 2);  // the pool's own segment
  DataPtr y = a.allocate(4 * KiB);
  CHECK(as_bytes(y) == first);  // reused later in the same capture
  CHECK(a.stats().private_pool_allocs == 2);
  CHECK(a.stats().private_pool_reserved == 2 * MiB);
  a.empty_cache();  // nothing goes back to the backend during a capture
  CHECK(st.frees == 0);
  a.end_capture(kStreamA);
  CHECK_FALSE(a.thread_capturing());
  y.reset();  // after the capture: still the pool's
  std::vector<DataPtr> others;
  for (int i = 0; i < 6; ++i) others.push_back(a.allocate(512 * KiB));  // more than the general segment holds
  for (const DataPtr& p : others) CHECK_FALSE(inside(p.get(), first, 2 * MiB));
  const int allocs_before = st.allocs;
  others.clear();
  a.empty_cache();  // general segments go back; the live pool's does not
  CHECK(st.live.size() == 1);
  CHECK(st.live.count(first) == 1);
  CHECK(a.stats().private_pool_reserved == 2 * MiB);
  a.release_pool(pool);  // the graph is gone: its free segment joins stream A's cache
  CHECK(a.stats().private_pool_reserved == 0);
  DataPtr z = a.allocate(4 * KiB);
  CHECK(inside(z.get(), first, 2 * MiB));
  CHECK(st.allocs == allocs_before);
  z.reset();
  a.empty_cache();
  CHECK(st.live.empty());
}

TEST_CASE("a graph's pool: a general block freed inside the capture is held until the pool is released", "[cpu]") {
  FakeState st;
  st.stream = kStreamA;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  DataPtr outside = a.allocate(8 * KiB);  // used by the graph, freed during its capture
  char* held = as_bytes(outside);
  const uint64_t pool = CachingAllocator::new_pool_id();
  a.begin_capture(kStreamA, pool);
  outside.reset();
  CHECK(a.stats().pending_frees == 1);
  a.end_capture(kStreamA);
  DataPtr again = a.allocate(8 * KiB);  // replays may still read `held`: not handed out
  CHECK(as_bytes(again) != held);
  again.reset();
  a.release_pool(pool);
  CHECK(a.stats().pending_frees == 0);
  CHECK(a.stats().allocated == 0);
  DataPtr reused = a.allocate(8 * KiB);
  CHECK(as_bytes(reused) == held);  // the smallest free block of stream A at the lowest address
}

TEST_CASE("a graph's pool: the capturing thread allocating for another stream is an error naming it", "[cpu]") {
  FakeState st;
  st.stream = kStreamA;
  CachingAllocator a(std::make_unique<FakeBackend>(&st));
  const uint64_t pool = CachingAllocator::new_pool_id();
  a.begin_capture(kStreamA, pool);
  REQUIRE_THROWS_WITH(a.allocate(KiB, kStreamB), Catch::Contains("allocation outside the graph's pool") &&
                                                     Catch::Contains("fake:0") && Catch::Contains("0x2000"));
  // Another thread (a loader worker) allocates as usual, from the general cache.
  bool general = false;
  std::thread other([&] {
    DataPtr p = a.allocate(KiB, kStreamB);
    general = p.get() != nullptr;
  });
  other.join();
  CHECK(general);
  CHECK(a.stats().private_pool_allocs == 0);
  a.end_capture(kStreamA);
  a.release_pool(pool);
  DataPtr fine = a.allocate(KiB, kStreamB);  // no capture: any stream
  CHECK(fine.get() != nullptr);
}
