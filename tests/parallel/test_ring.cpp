// The ring schedules on N threads over an in-memory transport, for every world size 1..5, sizes
// 0, 1, N-1, N+1 and odd ones, tiny and large slices, pipeline depths 1..3, every dtype and op.
//
// The transport is deliberately lazy: a posted send reads its memory only when it leaves (at a
// random later point: at the latest when wait_sent covers it or the rank is about to block), and a
// posted receive writes only when waited for. A schedule that touched a buffer before its exchange completed would
// therefore send or read wrong values, and the element-by-element checks would fail.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ember/parallel/ring.h>

#include "parallel/collective_check.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::coll_compare_rank;
using ember::testing::coll_compare_reduced;
using ember::testing::coll_fill;

namespace {

// Byte pipes between neighbours: pipe r carries rank r-1 -> rank r.
struct Pipes {
  explicit Pipes(int n) : bytes(static_cast<size_t>(n)), mu(static_cast<size_t>(n)), cv(static_cast<size_t>(n)) {}
  std::vector<std::deque<char>> bytes;
  std::vector<std::mutex> mu;
  std::vector<std::condition_variable> cv;
};

// Catch2's assertions are not thread-safe (ThreadSanitizer saw the rank threads' REQUIREs race on
// its counters): a rank thread throws instead, and on_ring reports the text as that rank's failure.
void expect_on_rank(bool ok, const char* what) {
  if (!ok) throw std::logic_error(what);
}

class LazyTransport final : public RingTransport {
 public:
  LazyTransport(Pipes& pipes, int rank, int world, uint64_t seed)
      : pipes_(pipes), next_((rank + 1) % world), me_(rank), rng_(seed) {}

  void post(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) override {
    sends_.push_back({static_cast<const char*>(send), send_bytes, false});
    recvs_.push_back({static_cast<char*>(recv), recv_bytes});
    // Sometimes the posted sends leave right away, sometimes much later.
    if (rng_() % 3 == 0) flush(sends_.size());
  }
  void wait_recv() override {
    expect_on_rank(!recvs_.empty(), "wait_recv with no receive posted");
    const auto recv = recvs_.front();  // not a structured binding: the lambda below uses it (clang 14)
    char* const dst = recv.first;
    const size_t bytes = recv.second;
    recvs_.pop_front();
    std::unique_lock<std::mutex> lock(pipes_.mu[size_t(me_)]);
    auto& in = pipes_.bytes[size_t(me_)];
    if (in.size() < bytes) {
      // About to block: a real transport keeps sending while it waits, so the ring never stalls.
      lock.unlock();
      flush(sends_.size());
      lock.lock();
    }
    pipes_.cv[size_t(me_)].wait(lock, [&] { return in.size() >= bytes; });
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(bytes), dst);
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(bytes));
  }
  void wait_sent(int64_t count) override {
    expect_on_rank(count <= static_cast<int64_t>(sends_.size()), "wait_sent past the sends posted");
    flush(static_cast<size_t>(count));
  }

 private:
  struct Send {
    const char* p;
    size_t bytes;
    bool sent;
  };
  // Sends exchanges 0 .. count-1 that have not left yet, in order, reading their memory now.
  void flush(size_t count) {
    for (size_t k = 0; k < count; ++k) {
      Send& e = sends_[k];
      if (e.sent) continue;
      {
        std::lock_guard<std::mutex> lock(pipes_.mu[size_t(next_)]);
        pipes_.bytes[size_t(next_)].insert(pipes_.bytes[size_t(next_)].end(), e.p, e.p + e.bytes);
      }
      pipes_.cv[size_t(next_)].notify_all();
      e.sent = true;
    }
  }
  Pipes& pipes_;
  int next_, me_;
  std::mt19937_64 rng_;
  std::vector<Send> sends_;  // every exchange's send, by number
  std::deque<std::pair<char*, size_t>> recvs_;  // receives not yet waited for
};

// Runs fn(rank, transport, config) on `world` threads and returns each rank's failure text.
template <typename Fn> std::vector<std::string> on_ring(int world, DType dt, int64_t slice, int depth, Fn fn) {
  Pipes pipes(world);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      LazyTransport tr(pipes, r, world, 1234 + uint64_t(r));
      RingConfig cfg{r, world, dt, slice, depth};
      try {
        errors[size_t(r)] = fn(r, tr, cfg);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    auto& in = pipes.bytes[size_t(r)];
    if (errors[size_t(r)].empty() && !in.empty())
      errors[size_t(r)] = std::to_string(in.size()) + " bytes sent to rank " + std::to_string(r) + " never received";
  }
  return errors;
}

const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

std::vector<int64_t> sizes_for(int world) { return {0, 1, world - 1, world + 1, 97, 1000}; }

void require_clean(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

}  // namespace

TEST_CASE("ring_chunk: N chunks cover 0..n-1 in order, lengths differ by at most one", "[cpu][parallel]") {
  for (int parts : {1, 2, 3, 4, 7}) {
    for (int64_t n : {0, 1, 2, 5, 6, 7, 100, 1000003}) {
      int64_t at = 0, lo = n, hi = 0;
      for (int c = 0; c < parts; ++c) {
        const auto [b, e] = ring_chunk(n, parts, c);
        CHECK(b == at);
        lo = std::min(lo, e - b), hi = std::max(hi, e - b);
        at = e;
      }
      CHECK(at == n);
      CHECK(hi - lo <= 1);
    }
  }
}

TEST_CASE("ring_all_reduce: every world size, size, dtype and op, element by element", "[cpu][parallel]") {
  for (int world = 1; world <= 5; ++world) {
    for (int64_t n : sizes_for(world)) {
      for (DType dt : kDtypes) {
        for (ReduceOp op : kOps) {
          // Tiny slices (many pipeline stages, short last slices) and one slice per chunk.
          for (auto [slice, depth] : {std::pair<int64_t, int>{3, 2}, {7, 3}, {1 << 20, 1}}) {
            INFO("world " << world << ", n " << n << ", " << dtype_name(dt) << " " << reduce_op_name(op) << ", slice "
                          << slice << ", depth " << depth);
            const uint64_t salt = uint64_t(n) * 131 + uint64_t(world);
            require_clean(on_ring(world, dt, slice, depth, [&](int r, RingTransport& tr, const RingConfig& cfg) {
              std::vector<char> data(size_t(n) * dtype_size(dt)), staging(ring_staging_bytes(cfg));
              coll_fill(data.data(), dt, n, salt, r);
              auto red = make_host_reducer(dt, op);
              ring_all_reduce(tr, *red, data.data(), n, op == ReduceOp::avg, cfg, staging.data());
              return coll_compare_reduced(data.data(), dt, n, op, salt, world);
            }));
          }
        }
      }
    }
  }
}

TEST_CASE("ring_reduce_scatter and ring_all_gather: blocks land on the right ranks", "[cpu][parallel]") {
  for (int world = 1; world <= 5; ++world) {
    for (int64_t m : {int64_t(0), int64_t(1), int64_t(world + 1), int64_t(333)}) {
      const int64_t n = m * world;
      for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
        INFO("world " << world << ", block " << m << ", " << dtype_name(dt));
        const uint64_t salt = 77 + uint64_t(m);
        for (ReduceOp op : kOps) {
          INFO(reduce_op_name(op));
          require_clean(on_ring(world, dt, 5, 2, [&](int r, RingTransport& tr, const RingConfig& cfg) {
            std::vector<char> data(size_t(n) * dtype_size(dt)), staging(ring_staging_bytes(cfg));
            coll_fill(data.data(), dt, n, salt, r);
            auto red = make_host_reducer(dt, op);
            ring_reduce_scatter(tr, *red, data.data(), n, op == ReduceOp::avg, cfg, staging.data());
            const size_t at = size_t(r * m) * dtype_size(dt);
            return coll_compare_reduced(data.data() + at, dt, m, op, salt, world, r * m);
          }));
        }
        require_clean(on_ring(world, dt, 5, 3, [&](int r, RingTransport& tr, const RingConfig& cfg) {
          std::vector<char> data(size_t(n) * dtype_size(dt), 0);
          coll_fill(data.data() + size_t(r * m) * dtype_size(dt), dt, m, salt, r);
          ring_all_gather(tr, data.data(), n, cfg);
          std::string err;
          for (int q = 0; q < world && err.empty(); ++q)
            err = coll_compare_rank(data.data() + size_t(q * m) * dtype_size(dt), dt, m, salt, q);
          return err;
        }));
      }
    }
  }
}

TEST_CASE("ring_broadcast: every root's data reaches every rank", "[cpu][parallel]") {
  for (int world = 1; world <= 5; ++world) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(world + 1), int64_t(1001)}) {
      for (int root = 0; root < world; ++root) {
        for (int depth : {1, 3}) {
          INFO("world " << world << ", n " << n << ", root " << root << ", depth " << depth);
          require_clean(on_ring(world, DType::i32, 4, depth, [&](int r, RingTransport& tr, const RingConfig& cfg) {
            std::vector<int32_t> data(size_t(n), -7);
            if (r == root) coll_fill(data.data(), DType::i32, n, 5, root);
            ring_broadcast(tr, data.data(), n, root, cfg);
            return coll_compare_rank(data.data(), DType::i32, n, 5, root);
          }));
        }
      }
    }
  }
}

TEST_CASE("make_host_reducer: f16 and bf16 are combined in float and rounded once", "[cpu][parallel]") {
  // 1 + 2^-11 is not a half: adding 2^-11 to 1 in half rounds to even (1); 1.5 * 2^-10 steps are
  // exact. The reducer must agree with rounding the float sum once.
  std::vector<Half> a = {Half(1.0f), Half(2048.0f), Half(-3.5f)};
  std::vector<Half> b = {Half(0.00048828125f), Half(1.0f), Half(1.25f)};
  make_host_reducer(DType::f16, ReduceOp::sum)->reduce(a.data(), b.data(), 3);
  CHECK(float(a[0]) == float(Half(1.0f + 0.00048828125f)));
  CHECK(float(a[1]) == 2048.0f);  // 2049 is not a half: ties to even
  CHECK(float(a[2]) == -2.25f);
  std::vector<BFloat16> x = {BFloat16(3.0f), BFloat16(-1.0f)};
  std::vector<BFloat16> y = {BFloat16(2.0f), BFloat16(-5.0f)};
  make_host_reducer(DType::bf16, ReduceOp::max)->reduce(x.data(), y.data(), 2);
  CHECK(float(x[0]) == 3.0f);
  CHECK(float(x[1]) == -1.0f);
  auto avg = make_host_reducer(DType::i32, ReduceOp::avg);
  std::vector<int32_t> s = {7, -7};
  avg->divide(s.data(), 2, 2);
  CHECK(s == std::vector<int32_t>{3, -3});  // truncation toward zero
  CHECK_THROWS_WITH(make_host_reducer(DType::u8, ReduceOp::sum),
                    Catch::Contains("u8") && Catch::Contains("f32, f64, f16, bf16, i32, i64"));
}
