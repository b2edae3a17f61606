#pragma once
// A sampling profiler of the host side, for the GPU machine, which has no perf, nsys or gdb: a
// SIGPROF timer (process CPU time) takes a backtrace of the running thread at `hz`, into
// preallocated memory (the handler only calls backtrace(), which glibc makes safe there once it
// has been called outside). write() names each frame as module+offset (dladdr) plus the nearest
// dynamic symbol; bench/host_profile_summary.py symbolizes ember's frames offline with addr2line
// on the unstripped binaries that scripts/gpu/prebuild.sh keeps, and sums self and inclusive time.
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ember::bench {

class HostSampler {
 public:
  static constexpr int kDepth = 64;
  static constexpr int kMaxSamples = 100000;

  explicit HostSampler(int hz) : stacks_(kMaxSamples) {
    void* warm[2];
    (void)backtrace(warm, 2);  // loads the unwinder outside the handler
    self() = this;
    struct sigaction sa {};
    sa.sa_sigaction = &HostSampler::on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, nullptr);
    const long us = 1000000L / hz;
    itimerval t{{0, us}, {0, us}};
    setitimer(ITIMER_PROF, &t, nullptr);
  }
  ~HostSampler() {
    stop();
    self() = nullptr;
  }
  HostSampler(const HostSampler&) = delete;
  HostSampler& operator=(const HostSampler&) = delete;

  void stop() {
    itimerval off{};
    setitimer(ITIMER_PROF, &off, nullptr);
    signal(SIGPROF, SIG_IGN);
  }
  int samples() const { return std::min(count_.load(), kMaxSamples); }

  /// One line per sample, innermost frame first: `module+0xoffset:symbol` separated by ';'.
  bool write(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return false;
    for (int i = 0; i < samples(); ++i) {
      const Stack& s = stacks_[static_cast<size_t>(i)];
      // Frames 0 and 1 are this handler and the kernel's signal trampoline.
      for (int k = 2; k < s.depth; ++k) {
        // A return address points after the call: step back into the calling instruction.
        const auto pc = reinterpret_cast<uintptr_t>(s.pc[static_cast<size_t>(k)]) - (k > 2 ? 1 : 0);
        Dl_info info{};
        if (dladdr(reinterpret_cast<void*>(pc), &info) == 0 || info.dli_fname == nullptr) {
          std::fprintf(f, "%s?+0x%lx:?", k > 2 ? ";" : "", static_cast<unsigned long>(pc));
          continue;
        }
        const char* base = info.dli_fname;
        for (const char* c = info.dli_fname; *c != 0; ++c)
          if (*c == '/') base = c + 1;
        std::fprintf(f, "%s%s+0x%lx:%s", k > 2 ? ";" : "", base,
                     static_cast<unsigned long>(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)),
                     info.dli_sname != nullptr ? info.dli_sname : "?");
      }
      std::fputc('\n', f);
    }
    return std::fclose(f) == 0;
  }

 private:
  struct Stack {
    int depth = 0;
    std::array<void*, kDepth> pc{};
  };

  static HostSampler*& self() {
    static HostSampler* s = nullptr;
    return s;
  }
  static void on_signal(int, siginfo_t*, void*) {
    HostSampler* s = self();
    if (s == nullptr) return;
    const int i = s->count_.fetch_add(1, std::memory_order_relaxed);
    if (i >= kMaxSamples) return;
    Stack& st = s->stacks_[static_cast<size_t>(i)];
    st.depth = backtrace(st.pc.data(), kDepth);
  }

  std::vector<Stack> stacks_;
  std::atomic<int> count_{0};
};

}  // namespace ember::bench
