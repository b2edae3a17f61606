#pragma once
// Small helpers shared by the benchmark programs: wall-clock timing (median of repetitions after
// a warm-up), a plain-text table, and command-line flags. Header-only so each benchmark stays one
// file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// The raw Fortran BLAS entry point, for the benchmarks that time OpenBLAS itself as the peer.
#ifdef EMBER_BENCH_HAVE_BLAS
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc, size_t transa_len, size_t transb_len);
#endif

namespace ember::bench {

/// Median seconds of one call of fn, over `reps` timed calls after `warmup` untimed ones.
inline double median_seconds(const std::function<void()>& fn, int reps, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t(static_cast<size_t>(std::max(reps, 1)));
  for (double& s : t) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

/// True when argv holds `flag` (e.g. "--quick").
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
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

/// printf-style formatting into a std::string.
template <typename... Args> std::string fmt(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

}  // namespace ember::bench
