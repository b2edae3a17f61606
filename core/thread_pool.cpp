// The CPU thread pool behind parallel_for.
//
// Why it is shaped like this: kernels call parallel_for for every op, most of them on small
// tensors, so the inline path (range <= grain, nested call, one thread) must not touch a lock or
// the pool at all. Large ranges are cut into at most num_threads() chunks of >= grain elements;
// the caller runs chunks itself while num_threads() - 1 persistent workers help. Several host
// threads (DataLoader workers, DataParallel replicas) may call parallel_for at once, so jobs sit
// in a queue and workers take chunks from whichever job is at its front.
//
// Spin, then sleep: a training step issues a few hundred jobs a few microseconds apart, and a worker
// that slept on the condition variable after each one cost a futex wake and two context switches
// per job (about 300 a step on mnist_cnn at batch 64; docs/benchmarks.md, "CPU training"). A worker
// out of work, and a caller waiting for its job's last chunk, first poll for up to kSpin, yielding
// the core to any other runnable thread between polls, and only then sleep.
//
// fork(): the child has only the forking thread, and any lock another thread held at the fork
// stays locked there for ever. That includes locks inside the C/C++ runtime and the sanitizer
// runtimes (GCC 12's ASan takes its allocator's locks in a new thread's start-up and does not
// hold them across fork), so a pool worker that is starting up or running a chunk at the fork can
// leave the child unable to start threads or allocate. Before a fork the pool therefore waits
// until every worker is parked with nothing in hand (see Pool::quiesce_for_fork); the child
// abandons the old pool and builds a fresh one on first use.
#include <ember/core/thread_pool.h>

#include <sched.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/error.h>

namespace ember {
namespace {

// True on pool workers and on a caller while it runs chunks: nested parallel_for runs inline.
thread_local bool t_in_parallel_region = false;

constexpr auto kSpin = std::chrono::microseconds(100);

std::atomic<int64_t> g_wait_ns{0};  // pool_wait_seconds(), in nanoseconds

// Polls `ready` until it holds (true) or kSpin has passed (false), yielding between polls.
template <typename Ready> bool spin_until(const Ready& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  // Chunk i is [begin + i * base + min(i, rem), ...) of length base + (i < rem): near-equal
  // pieces, each at least base = n / nchunks >= grain long.
  int64_t begin = 0, base = 0, rem = 0, nchunks = 0;
  std::atomic<int64_t> next{0};  // next chunk index to claim
  std::atomic<int64_t> done{0};  // chunks finished (run or skipped after a failure)
  std::atomic<bool> failed{false};
  std::mutex mu;  // guards error and the done notification
  std::condition_variable done_cv;
  std::exception_ptr error;

  // Claims and runs chunks until none are left. Returns when this thread can claim no more.
  void run_chunks() {
    for (;;) {
      int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= nchunks) return;
      if (!failed.load(std::memory_order_relaxed)) {
        int64_t b = begin + i * base + std::min(i, rem);
        int64_t e = b + base + (i < rem ? 1 : 0);
        try {
          (*fn)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
          failed.store(true, std::memory_order_relaxed);
        }
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == nchunks) {
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_all();
      }
    }
  }
};

class Pool {
 public:
  explicit Pool(int nthreads) : nthreads_(std::max(1, nthreads)) {
    workers_.reserve(nthreads_ - 1);
    for (int i = 0; i + 1 < nthreads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int size() const { return nthreads_; }

  // pthread_atfork prepare: returns with mu_ held once every worker is parked in cv_.wait (started,
  // no chunk, no job reference, no lock, no allocation in flight), so fork() copies no pool worker
  // mid-operation. Workers finish the job they are in, then park instead of taking another:
  // callers run their own jobs' remaining chunks meanwhile, so the wait is bounded by the jobs
  // running at the fork. resume_after_fork() in the parent releases mu_ and lets them work again.
  void quiesce_for_fork() {
    std::unique_lock<std::mutex> lock(mu_);
    forking_ = true;
    parked_cv_.wait(lock, [&] { return parked_ == nthreads_ - 1; });
    lock.release();  // held across fork(); resume_after_fork() unlocks it in the parent
  }
  void resume_after_fork() {
    forking_ = false;
    mu_.unlock();
    cv_.notify_all();  // jobs queued meanwhile
  }

  void run(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
      pushed_.fetch_add(1, std::memory_order_release);
    }
    int64_t helpers = std::min<int64_t>(job->nchunks - 1, static_cast<int64_t>(workers_.size()));
    if (helpers >= static_cast<int64_t>(workers_.size())) {
      cv_.notify_all();
    } else {
      for (int64_t i = 0; i < helpers; ++i) cv_.notify_one();
    }
    t_in_parallel_region = true;
    job->run_chunks();
    t_in_parallel_region = false;
    const auto all_done = [&] { return job->done.load(std::memory_order_acquire) == job->nchunks; };
    if (!all_done()) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!spin_until(all_done)) {
        std::unique_lock<std::mutex> lock(job->mu);
        job->done_cv.wait(lock, all_done);
      }
      g_wait_ns.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
          std::memory_order_relaxed);
    }
    {
      // Usually a worker or the caller already popped it; remove it if it is still queued.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find(queue_.begin(), queue_.end(), job);
      if (it != queue_.end()) queue_.erase(it);
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void worker_loop() {
    t_in_parallel_region = true;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        bool spun = false;
        for (;;) {
          if (stop_) return;
          // Drop exhausted jobs from the front; take the first one with chunks left.
          while (!queue_.empty() && queue_.front()->next.load(std::memory_order_relaxed) >= queue_.front()->nchunks)
            queue_.pop_front();
          if (!queue_.empty() && !forking_) break;
          if (!spun && !forking_) {
            // Poll for a new job without the lock, then look at the queue again.
            spun = true;
            const uint64_t seen = pushed_.load(std::memory_order_acquire);
            lock.unlock();
            spin_until([&] { return pushed_.load(std::memory_order_acquire) != seen; });
            lock.lock();
            continue;
          }
          spun = false;
          if (++parked_ == nthreads_ - 1) parked_cv_.notify_all();
          cv_.wait(lock);
          --parked_;
        }
        job = queue_.front();
      }
      job->run_chunks();
    }
  }

  const int nthreads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<uint64_t> pushed_{0};  // jobs ever queued: what a spinning worker watches
  bool stop_ = false;
  bool forking_ = false;  // a fork is being prepared: workers park instead of taking jobs
  int parked_ = 0;  // workers waiting in cv_.wait; each dropped its job before counting itself
  std::condition_variable parked_cv_;
};

int default_num_threads() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    EMBER_CHECK(end && *end == '\0' && v >= 1 && v <= 4096, "EMBER_NUM_THREADS='", env,
                "' is not valid (expected an integer from 1 to 4096)");
    return static_cast<int>(v);
  }
  return available_cores();
}

// The pool is created on first parallel use and replaced by set_num_threads. Callers hold a
// shared_ptr while they run, so a replaced pool lives until its last job is done. The holder is
// never destroyed: at exit the workers just die with the process, so static destructors that
// still run kernels (or a worker stuck in user code) cannot hang or touch a dead pool.
struct PoolHolder {
  std::mutex mu;
  std::shared_ptr<Pool> pool;
};
PoolHolder& holder() {
  static PoolHolder* h = new PoolHolder;
  return *h;
}
std::atomic<int> g_num_threads{0};  // 0: not yet read from the environment

// After fork() the child has only the forking thread: the parent's workers are gone, so the
// child must not wait on them. It abandons (leaks) the old pool and makes a fresh one on demand.
// Before the fork the pool's workers are parked (Pool::quiesce_for_fork), so none of them holds a
// lock the child could need. A fork from inside a parallel region (a chunk, or a worker) cannot
// wait for the pool to go idle, since it is part of the pool's work: it forks as before.
thread_local bool t_quiesced_for_fork = false;  // this thread's prepare quiesced holder().pool
void atfork_prepare() {
  PoolHolder& h = holder();
  h.mu.lock();
  t_quiesced_for_fork = h.pool && !t_in_parallel_region;
  if (t_quiesced_for_fork) h.pool->quiesce_for_fork();
}
void atfork_parent() {
  PoolHolder& h = holder();
  if (t_quiesced_for_fork) h.pool->resume_after_fork();
  t_quiesced_for_fork = false;
  h.mu.unlock();
}
void atfork_child() {
  PoolHolder& h = holder();
  if (h.pool) new std::shared_ptr<Pool>(std::move(h.pool));  // intentionally leaked: its threads are gone
  t_quiesced_for_fork = false;
  h.mu.unlock();
}

std::shared_ptr<Pool> get_pool() {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  PoolHolder& h = holder();
  std::lock_guard<std::mutex> lock(h.mu);
  if (!h.pool) h.pool = std::make_shared<Pool>(num_threads());
  return h.pool;
}

}  // namespace

int available_cores() {
  // Slurm, HTCondor, taskset and cgroup cpusets restrict a process to some of the machine's cores.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

double pool_wait_seconds() { return static_cast<double>(g_wait_ns.load(std::memory_order_relaxed)) * 1e-9; }

int num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  n = default_num_threads();
  int expected = 0;
  if (!g_num_threads.compare_exchange_strong(expected, n)) return expected;
  return n;
}

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1 && n <= 4096, "set_num_threads: expected 1..4096 threads, got ", n);
  std::shared_ptr<Pool> old;
  {
    PoolHolder& h = holder();
    std::lock_guard<std::mutex> lock(h.mu);
    g_num_threads.store(n, std::memory_order_relaxed);
    old = std::move(h.pool);  // the next parallel_for builds a pool of the new size
  }
  // `old` is joined here unless a running parallel_for still holds it.
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || t_in_parallel_region) {
    fn(begin, end);
    return;
  }
  const int nthreads = num_threads();
  if (nthreads <= 1) {
    fn(begin, end);
    return;
  }
  // At most one chunk per thread, each at least `grain` long.
  const int64_t nchunks = std::min<int64_t>(nthreads, n / grain);
  if (nchunks <= 1) {
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->begin = begin;
  job->base = n / nchunks;
  job->rem = n % nchunks;
  job->nchunks = nchunks;
  get_pool()->run(job);
}

}  // namespace ember
