#pragma once
// Small helpers shared by the benchmark programs: wall-clock timing (median of repetitions after
// a warm-up), a plain-text table, and command-line flags. Header-only so each benchmark stays one
// file.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/device.h>

// The raw Fortran BLAS entry point, for the benchmarks that time OpenBLAS itself as the peer.
#ifdef EMBER_BENCH_HAVE_BLAS
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc, size_t transa_len, size_t transb_len);
// OpenBLAS's extension (weak: another BLAS may lack it). ember's first GEMM sets it to 1 and splits
// the work on its own pool (kernels/cpu/matmul.cpp); rows that time raw BLAS give it the same cores.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
#endif

namespace ember::bench {

/// True (after printing "<program>: SKIPPED: ..." ) when no CUDA device is usable: the GPU
/// benchmarks then exit 77, which CTest reports as skipped.
inline bool no_usable_gpu(const char* program) {
  if (cuda_device_count() > 0) return false;
  std::printf("%s: SKIPPED: no usable CUDA device (%s)\n", program,
              cuda_compiled() ? "CUDA build, but no GPU found" : "this build has no CUDA support");
  return true;
}

#ifdef EMBER_BENCH_HAVE_BLAS
/// While alive, OpenBLAS runs its own `threads` threads (as a program using it directly would);
/// afterwards single-threaded again, as ember leaves it.
struct RawBlasThreads {
  explicit RawBlasThreads(int threads) {
    if (openblas_set_num_threads) openblas_set_num_threads(threads);
  }
  ~RawBlasThreads() {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  }
  RawBlasThreads(const RawBlasThreads&) = delete;
  RawBlasThreads& operator=(const RawBlasThreads&) = delete;
};
#endif

/// The median of v (the upper one of an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

/// Median seconds of one call of fn, over `reps` timed calls after `warmup` untimed ones.
inline double median_seconds(const std::function<void()>& fn, int reps, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t(static_cast<size_t>(std::max(reps, 1)));
  for (double& s : t) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return median(std::move(t));
}

/// True when argv holds `flag` (e.g. "--quick").
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

/// The integer after `flag` in argv (e.g. --batch 32), else `fallback`.
inline int64_t int_flag(int argc, char** argv, const char* flag, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

/// A left-aligned first column and right-aligned figures, printed with a rule under the header.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print() const {
    std::vector<size_t> w(rows_[0].size(), 0);
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    for (size_t k = 0; k < rows_.size(); ++k) {
      for (size_t i = 0; i < rows_[k].size() && i < w.size(); ++i)
        std::printf(i == 0 ? "%-*s" : "  %*s", static_cast<int>(w[i]), rows_[k][i].c_str());
      std::printf("\n");
      if (k == 0) {
        size_t total = 0;
        for (size_t x : w) total += x + 2;
        std::printf("%s\n", std::string(total - 2, '-').c_str());
      }
    }
    std::fflush(stdout);
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// Runs the peer script bench/peers/<script> with `args` (in the same run as ember's figures) and
/// returns its `peer <key> <value>` lines as a map; its other lines are echoed. An empty map when
/// the peer cannot run (no python3/torch, no GPU, or EMBER_BENCH_PEER=0). EMBER_PEER_PYTHON picks
/// the interpreter (default python3).
inline std::map<std::string, double> run_peer_script(const std::string& script, const std::string& args) {
  std::map<std::string, double> out;
  const char* off = std::getenv("EMBER_BENCH_PEER");
  if (off != nullptr && std::string(off) == "0") return out;
#ifdef EMBER_SOURCE_DIR
  // EMBER_SOURCE_DIR in the environment (bench/gpu_check.sh sets it) wins over the tree this was
  // built from: scripts/gpu/prebuild.sh builds on another machine.
  const char* py = std::getenv("EMBER_PEER_PYTHON");
  const char* src = std::getenv("EMBER_SOURCE_DIR");
  const std::string cmd = std::string(py != nullptr ? py : "python3") + " " +
                          (src != nullptr ? src : EMBER_SOURCE_DIR) + "/bench/peers/" + script + " " + args + " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    char key[128];
    double value = 0;
    if (std::sscanf(line, "peer %127s %lf", key, &value) == 2) {
      out[key] = value;
    } else if (line[0] != '\n') {
      std::printf("  | %s", line);
    }
  }
  const int status = pclose(pipe);
  if (status != 0) std::printf("  | (the peer exited with status %d)\n", status);
#else
  (void)script;
  (void)args;
#endif
  return out;
}

/// run_peer_script for bench/peers/torch_gpu.py.
inline std::map<std::string, double> run_torch_peer(const std::string& args) {
  return run_peer_script("torch_gpu.py", args);
}

/// A peer's figure as text, or "-" when it has none.
inline std::string peer_figure(const std::map<std::string, double>& peer, const std::string& key, const char* f) {
  const auto it = peer.find(key);
  if (it == peer.end()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, it->second);
  return buf;
}

/// printf-style formatting into a std::string.
template <typename... Args> std::string fmt(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

}  // namespace ember::bench
