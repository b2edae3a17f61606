// parallel_for: every index exactly once, chunks of at least `grain`, exceptions reach the caller,
// nested calls run inline, and several host threads may use the pool at once.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/thread_pool.h>

using ember::parallel_for;

namespace {

// Restores the pool size a test changed.
struct ThreadCountGuard {
  int saved = ember::num_threads();
  ~ThreadCountGuard() { ember::set_num_threads(saved); }
};

void check_coverage(int64_t begin, int64_t end, int64_t grain) {
  INFO("range [" << begin << ", " << end << ") grain " << grain);
  const int64_t n = std::max<int64_t>(end - begin, 0);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    }
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - begin)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i)
    if (hits[static_cast<size_t>(i)].load() != 1) FAIL("index " << begin + i << " ran " << hits[i].load() << " times");
  if (n == 0) CHECK(chunks.empty());
  CHECK(static_cast<int>(chunks.size()) <= ember::num_threads());
  for (auto [b, e] : chunks) {
    CHECK(b < e);
    if (n > grain) CHECK(e - b >= grain);  // no chunk below the grain
  }
  if (n > 0 && n <= grain) CHECK(chunks == std::vector<std::pair<int64_t, int64_t>>{{begin, end}});
}

// parallel_for over 3 chunks that each wait (up to 20 s) until all 3 have started: true only if 3
// threads ran them at once. `ids`, when given, receives the threads that ran them.
bool three_chunks_start_together(std::set<std::thread::id>* ids = nullptr) {
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool all_started = true;
  parallel_for(0, 3, 1, [&](int64_t, int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    if (ids) ids->insert(std::this_thread::get_id());
    ++started;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return started == 3; })) all_started = false;
  });
  return all_started;
}

}  // namespace

TEST_CASE("parallel_for covers every index exactly once", "[cpu]") {
  ThreadCountGuard restore;
  for (int threads : {1, 2, 3, 7}) {
    ember::set_num_threads(threads);
    REQUIRE(ember::num_threads() == threads);
    check_coverage(0, 0, 1);
    check_coverage(5, 3, 1);  // empty (end < begin)
    check_coverage(0, 1, 1);
    check_coverage(0, 10, 3);
    check_coverage(-17, 1000, 1);
    check_coverage(3, 1000003, 4096);
    check_coverage(0, 9, 100);  // below the grain: one inline call
    check_coverage(0, 12345, 0);  // grain 0 is treated as 1
  }
}

TEST_CASE("parallel_for really runs chunks on several threads", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(3);
  // Each of the 3 chunks waits until all 3 have started: that only finishes if 3 threads run them.
  std::set<std::thread::id> ids;
  CHECK(three_chunks_start_together(&ids));
  CHECK(ids.size() == 3);
}

TEST_CASE("parallel_for rethrows the chunk's exception and stays usable", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(4);
  for (int rep = 0; rep < 20; ++rep) {
    try {
      parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) {
        if (b <= 500 && 500 < e) throw std::invalid_argument("bad element 500");
      });
      FAIL("no exception");
    } catch (const std::invalid_argument& ex) {
      CHECK(std::string(ex.what()) == "bad element 500");
    }
  }
  // ember::Error also keeps its type, and inline (small) calls propagate as well.
  CHECK_THROWS_AS(parallel_for(0, 5, 10, [](int64_t, int64_t) { EMBER_FAIL("inline"); }), ember::Error);
  check_coverage(0, 100000, 7);
}

TEST_CASE("nested parallel_for runs inline on the calling thread", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(4);
  std::atomic<int> inner_calls{0}, wrong_thread{0}, total{0};
  parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto outer_id = std::this_thread::get_id();
      int calls = 0;
      parallel_for(0, 10000, 1, [&](int64_t ib, int64_t ie) {
        ++calls;
        if (std::this_thread::get_id() != outer_id) ++wrong_thread;
        total += static_cast<int>(ie - ib);
      });
      inner_calls += calls;
    }
  });
  CHECK(inner_calls == 8);  // one inline call per outer index
  CHECK(wrong_thread == 0);
  CHECK(total == 80000);
}

TEST_CASE("parallel_for from several host threads at once", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(3);
  const int kCallers = 4;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 50; ++rep) {
        std::atomic<int64_t> sum{0};
        parallel_for(0, 20000 + c, 100, [&](int64_t b, int64_t e) {
          int64_t s = 0;
          for (int64_t i = b; i < e; ++i) s += i;
          sum += s;
        });
        const int64_t n = 20000 + c;
        if (sum.load() != n * (n - 1) / 2) sums[c] = -1;
        else if (sums[c] >= 0) sums[c] += 1;
      }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) CHECK(sums[c] == 50);
}

TEST_CASE("set_num_threads validates its argument", "[cpu]") {
  CHECK_THROWS_AS(ember::set_num_threads(0), ember::Error);
  CHECK_THROWS_AS(ember::set_num_threads(-3), ember::Error);
  CHECK(ember::num_threads() >= 1);
}

TEST_CASE("a forked child gets a working pool of its own", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(3);
  std::atomic<int64_t> warm{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { warm += e - b; });  // parent's workers exist
  REQUIRE(warm == 1000);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: the parent's workers do not exist here. The 3 chunks wait for each other, so this
    // only succeeds if the child really got 3 running threads of its own.
    _exit(three_chunks_start_together() ? 0 : 1);
  }
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 600 && !exited; ++i) {  // up to 60 s
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(exited);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// fork() copies only the forking thread, and a lock any other thread held at that moment stays
// locked in the child for ever. A pool worker starting up or inside a chunk may hold locks of the
// C++ runtime or of a sanitizer runtime (GCC 12's ASan allocator: a child's new workers hung on it
// 8 times in 3500 forks right after the pool was made), so a fork waits until every worker is
// parked. Here the workers are inside 20 ms chunks nearly all the time; the child's copy of the
// counter shows whether any was inside one at the fork.
TEST_CASE("fork waits until no pool worker is inside a chunk", "[cpu]") {
  ThreadCountGuard restore;
  ember::set_num_threads(3);
  std::atomic<int> worker_chunks_running{0}, worker_chunks_done{0};
  std::atomic<bool> stop{false};
  std::thread caller([&] {
    const auto caller_id = std::this_thread::get_id();
    while (!stop.load()) {
      parallel_for(0, 3, 1, [&](int64_t, int64_t) {
        const bool on_worker = std::this_thread::get_id() != caller_id;
        if (on_worker) ++worker_chunks_running;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (on_worker) {
          --worker_chunks_running;
          ++worker_chunks_done;
        }
      });
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (worker_chunks_done.load() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const pid_t pid = fork();
  if (pid == 0) _exit(worker_chunks_running.load() == 0 ? 0 : 1);  // the count as it was at the fork
  const int done_at_fork = worker_chunks_done.load();
  stop.store(true);
  caller.join();
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(done_at_fork >= 4);  // the workers really were busy
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: a worker was inside a chunk when the process forked
  // The parent's workers work again after the fork: 3 chunks that wait for each other finish.
  CHECK(three_chunks_start_together());
}
