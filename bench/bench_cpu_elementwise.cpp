// CPU elementwise add bandwidth beside memcpy of the same bytes, measured in one run.
//
// GB/s counts bytes read plus bytes written: add reads a and b and writes out (3 * n * 4 bytes for
// f32), memcpy reads and writes one buffer of n * 4 bytes (2 * n * 4). Rows:
//   ember add            kernels::binary(Add): checks, broadcasting, allocates the output
//   ember add (out)      the CPU table entry into a preallocated output (the kernel alone)
//   ... (1 thread)       the same with set_num_threads(1), comparable with memcpy and the loop
//   plain loop           c[i] = a[i] + b[i], compiler-vectorized, 1 thread: the peer for add
//   memcpy               std::memcpy, 1 thread: the peer for any streaming kernel
// Flags: --quick (small sizes, few repetitions; used by the CTest smoke test).
#include <cmath>
#include <cstring>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;

namespace {

// Keeps the compiler from dropping the plain loop.
__attribute__((noinline)) void plain_add(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{1 << 16, 1 << 20} : std::vector<int64_t>{1 << 20, 1 << 24};
  const int reps = quick ? 5 : 30;
  const int threads = num_threads();
  std::printf("bench_cpu_elementwise: f32 add vs memcpy, median of %d reps, %d pool threads\n", reps, threads);

  bench::Table table({"op", "elements", "MiB moved", "time (us)", "GB/s", "vs memcpy"});
  bool ok = true;
  for (int64_t n : sizes) {
    manual_seed(1234);
    Tensor a = randn({n}), b = randn({n}), out = empty({n});
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    float* po = out.data<float>();
    std::vector<float> src(static_cast<size_t>(n), 1.0f), dst(static_cast<size_t>(n), 0.0f),
        loop(static_cast<size_t>(n));

    const double add_bytes = 3.0 * n * sizeof(float), copy_bytes = 2.0 * n * sizeof(float);
    double t_memcpy = bench::median_seconds([&] { std::memcpy(dst.data(), src.data(), n * sizeof(float)); }, reps);
    const double memcpy_gbs = copy_bytes / t_memcpy / 1e9;

    auto row = [&](const char* name, double bytes, double secs) {
      double gbs = bytes / secs / 1e9;
      table.add({name, fmt("%lld", static_cast<long long>(n)), fmt("%.1f", bytes / (1 << 20)), fmt("%.1f", secs * 1e6),
                 fmt("%.2f", gbs), fmt("%.0f%%", 100.0 * gbs / memcpy_gbs)});
    };
    Tensor keep;
    row("ember add", add_bytes,
        bench::median_seconds([&] { keep = kernels::binary(kernels::BinaryOp::Add, a, b); }, reps));
    auto add_out = [&] { kernels::binary_table(Device::cpu(), kernels::BinaryOp::Add, a, b, out); };
    row("ember add (out)", add_bytes, bench::median_seconds(add_out, reps));
    set_num_threads(1);
    row("ember add (out, 1 thread)", add_bytes, bench::median_seconds(add_out, reps));
    set_num_threads(threads);
    row("plain loop (1 thread)", add_bytes, bench::median_seconds([&] { plain_add(pa, pb, loop.data(), n); }, reps));
    row("memcpy (1 thread)", copy_bytes, t_memcpy);

    // The figures mean nothing if the kernel computed something else.
    for (int64_t i = 0; i < n; ++i) {
      if (po[i] != loop[static_cast<size_t>(i)] || keep.data<float>()[i] != loop[static_cast<size_t>(i)]) {
        std::printf("MISMATCH at %lld: ember %g, loop %g\n", static_cast<long long>(i), po[i],
                    loop[static_cast<size_t>(i)]);
        ok = false;
        break;
      }
    }
  }
  table.print();
  return ok ? 0 : 1;
}
