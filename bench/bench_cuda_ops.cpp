// GPU bandwidth of ember's elementwise add, sum, softmax, cross-entropy and fused Adam step beside a
// device-to-device cudaMemcpy of the same size and beside PyTorch's same ops on the same GPU
// (bench/peers/torch_gpu.py ops), and the caching allocator's alloc+free beside cudaMalloc+cudaFree,
// in one run.
//
// Timing: CUDA events on the current stream around `kIters` back-to-back launches, after a warm-up;
// the figure is the median over `reps` such windows. GB/s counts bytes read plus bytes written:
// add 3 * n * 4, sum n * 4 (the scalar written is negligible), softmax 2 * n * 4 (one read, one
// write: what a fused kernel needs), cross-entropy n * 4 (the logits read once; the per-row loss
// written is negligible), Adam 7 * n * 4 (p, g, m, v read; p, m, v written), memcpy 2 * n * 4.
// The target for every op is >= 80% of memcpy.
// Allocator rows are host wall-clock per alloc+free pair (both are host-side calls).
// Exits 77 ("skipped" for CTest) with a message when no GPU is usable.
// Flags: --quick (one size, few repetitions).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_check.h>
#include <ember/core/stream.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/optim.h>
#include <ember/kernels/reduce.h>
#include <ember/kernels/softmax.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;

namespace {

constexpr int kIters = 20;

// Median milliseconds of one call of fn, timed with events on `stream`.
template <typename Fn> double median_ms(cudaStream_t stream, int reps, Fn&& fn) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();  // warm-up: kernels loaded, allocator cache filled
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kIters; ++i) fn();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(static_cast<double>(t) / kIters);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return bench::median(std::move(ms));
}

// Largest |x - y| / (atol + rtol * |y|) over two tensors' elements (<= 1 passes).
double worst(const Tensor& x, const Tensor& y, double rtol, double atol) {
  std::vector<double> a = x.to_vector<double>(), b = y.to_vector<double>();
  double w = a.size() == b.size() ? 0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    w = std::max(w, std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i])));
  return w;
}

// Median microseconds of one host call of fn.
template <typename Fn> double host_us(int reps, Fn&& fn) {
  return 1e6 * bench::median_seconds([&] { fn(); }, reps, 3);
}

}  // namespace

int main(int argc, char** argv) {
  if (bench::no_usable_gpu("bench_cuda_ops")) return 77;
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int reps = quick ? 5 : 25;
  const Device dev = Device::cuda(0);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const cudaStream_t stream = static_cast<cudaStream_t>(current_stream(dev).handle());
  std::printf("bench_cuda_ops: %s, f32, median of %d windows of %d launches\n", prop.name, reps, kIters);

  bench::Table table({"op", "elements", "time (us)", "GB/s", "vs memcpy", "target >= 80%"});
  bool all_ok = true;
  std::map<std::string, double> largest_gbs;  // op -> GB/s at the largest size, beside the peer
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{1 << 24} : std::vector<int64_t>{1 << 24, 1 << 26};
  for (int64_t n : sizes) {
    manual_seed(7);
    Tensor a = randn({n}, {.dtype = DType::f32, .device = dev}), b = randn({n}, {.dtype = DType::f32, .device = dev});
    Tensor dst = empty({n}, {.dtype = DType::f32, .device = dev});
    const int64_t cols = 4096;
    Tensor rows = a.view({n / cols, cols});
    const double elem = sizeof(float);

    const double memcpy_ms = median_ms(stream, reps, [&] {
      CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), a.data_ptr(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    });
    const double memcpy_gbs = 2.0 * n * elem / (memcpy_ms * 1e-3) / 1e9;
    auto row = [&](const std::string& name, double bytes, double ms, bool has_target) {
      const double gbs = bytes / (ms * 1e-3) / 1e9, frac = gbs / memcpy_gbs;
      const bool ok = frac >= 0.8;
      if (has_target) all_ok = all_ok && ok;
      if (n == sizes.back()) largest_gbs[name] = gbs;
      table.add({name, fmt("%lld", static_cast<long long>(n)), fmt("%.1f", ms * 1e3), fmt("%.0f", gbs),
                 fmt("%.0f%%", 100 * frac), has_target ? (ok ? "yes" : "NO") : "-"});
    };
    row("cudaMemcpy D2D", 2.0 * n * elem, memcpy_ms, false);
    Tensor keep;
    row("add", 3.0 * n * elem, median_ms(stream, reps, [&] { keep = kernels::binary(kernels::BinaryOp::Add, a, b); }),
        true);
    row("add (into out)", 3.0 * n * elem,
        median_ms(stream, reps, [&] { kernels::binary_table(dev, kernels::BinaryOp::Add, a, b, dst); }), true);
    row("sum (all)", 1.0 * n * elem,
        median_ms(stream, reps, [&] { keep = kernels::reduce(kernels::ReduceOp::Sum, a); }), true);
    row("softmax (rows of 4096)", 2.0 * n * elem, median_ms(stream, reps, [&] { keep = kernels::softmax(rows, -1); }),
        true);
    std::vector<int64_t> targets(static_cast<size_t>(n / cols));
    for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int64_t>((i * 131) % cols);
    const Tensor target = from_vector(targets, {n / cols}, {.device = dev});
    kernels::CrossEntropyRows ce;
    row("cross_entropy (rows of 4096)", 1.0 * n * elem,
        median_ms(stream, reps, [&] { ce = kernels::cross_entropy_rows(rows, target); }), true);
    // Adam over one parameter of n elements: reads p, g, m, v; writes p, m, v.
    Tensor p = randn({n}, {.device = dev}), g = randn({n}, {.device = dev});
    Tensor m = zeros({n}, {.device = dev}), v = zeros({n}, {.device = dev});
    int64_t step = 0;
    row("adam step (fused)", 7.0 * n * elem,
        median_ms(stream, reps,
                  [&] {
                    kernels::adam_step({{.param = p, .grad = g, .exp_avg = m, .exp_avg_sq = v, .step = ++step}},
                                       {.lr = 1e-3});
                  }),
        true);
  }
  table.print();

  // PyTorch on the same GPU, same sizes (its largest), same byte counts.
  std::printf("\nPyTorch peer (bench/peers/torch_gpu.py ops), same GPU, same run:\n");
  const auto peer = bench::run_torch_peer(quick ? "ops --quick" : "ops");
  bench::Table vs(
      {"op, 2^" + std::to_string(quick ? 24 : 26) + " f32 elements", "ember GB/s", "PyTorch GB/s", "ember / PyTorch"});
  const std::vector<std::pair<std::string, std::string>> pairs = {{"cudaMemcpy D2D", "copy_gbs"},
                                                                  {"add", "add_gbs"},
                                                                  {"add (into out)", "add_out_gbs"},
                                                                  {"sum (all)", "sum_gbs"},
                                                                  {"softmax (rows of 4096)", "softmax_gbs"},
                                                                  {"cross_entropy (rows of 4096)", "cross_entropy_gbs"},
                                                                  {"adam step (fused)", "adam_fused_gbs"}};
  for (const auto& [name, key] : pairs) {
    const double e = largest_gbs[name];
    const auto it = peer.find(key);
    vs.add({name + (key == "copy_gbs" ? " (PyTorch: copy_)" : ""), fmt("%.0f", e),
            bench::peer_figure(peer, key, "%.0f"), it == peer.end() ? "-" : fmt("%.2f", e / it->second)});
  }
  vs.add({"adam step (PyTorch foreach, its default)", "", bench::peer_figure(peer, "adam_foreach_gbs", "%.0f"), ""});
  vs.print();

  // The figures mean nothing if the kernels computed something else: compare with the CPU twins
  // (add exact up to rounding; sum over n terms and softmax with f32 tolerances).
  {
    const int64_t n = 1 << 20;
    Tensor x = randn({n / 512, 512}, {.dtype = DType::f32, .device = dev}),
           y = randn({n / 512, 512}, {.dtype = DType::f32, .device = dev});
    Tensor xc = x.to(Device::cpu()), yc = y.to(Device::cpu());
    const double e_add =
        worst(kernels::binary(kernels::BinaryOp::Add, x, y), kernels::binary(kernels::BinaryOp::Add, xc, yc), 1e-6, 0);
    const double e_sum = worst(kernels::reduce(kernels::ReduceOp::Sum, x), kernels::reduce(kernels::ReduceOp::Sum, xc),
                               1e-5 * std::sqrt(double(n)), 1e-5 * std::sqrt(double(n)));
    const double e_soft = worst(kernels::softmax(x, -1), kernels::softmax(xc, -1), 1e-5, 1e-7);
    std::printf("check vs CPU (error/tolerance, <= 1 passes): add %.3f, sum %.3f, softmax %.3f\n", e_add, e_sum,
                e_soft);
    if (!(e_add <= 1 && e_sum <= 1 && e_soft <= 1)) {
      std::printf("bench_cuda_ops: MISMATCH between the CUDA kernels and their CPU twins\n");
      return 1;
    }
  }

  // Allocation: the caching allocator serves a freed block again without touching the driver.
  bench::Table alloc({"alloc + free", "bytes", "us per pair"});
  CachingAllocator& cache = cuda_caching_allocator(0);
  for (size_t bytes : {size_t(4) << 10, size_t(1) << 20, size_t(64) << 20}) {
    const double cached = host_us(reps * 40, [&] { DataPtr p = cache.allocate(bytes); });
    const double raw = host_us(reps * 4, [&] {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, bytes));
      CUDA_CHECK(cudaFree(p));
    });
    alloc.add({"caching allocator", fmt("%zu", bytes), fmt("%.2f", cached)});
    alloc.add({"cudaMalloc + cudaFree", fmt("%zu", bytes), fmt("%.2f", raw)});
  }
  alloc.print();
  if (!all_ok) std::printf("bench_cuda_ops: some op is below 80%% of memcpy bandwidth\n");
  return 0;
}
