// CPU twin of the fused unscale pass (kernels/amp.h). The tensors are cut into blocks of kBlock
// elements and the whole list of blocks is spread over the thread pool, so one huge and many tiny
// gradients keep all cores busy; each block notes whether it saw a non-finite value in its own
// byte, and the flag is written once at the end.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/amp.h>
#include <ember/kernels/cpu/cpu_kernels.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kBlock = 16384;

/// x[b, e) *= inv, in M (f32, or f64 for f64 tensors); returns true when any x was inf or NaN.
template <typename T> bool unscale_range(T* x, int64_t b, int64_t e, double inv_scale) {
  using M = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const M inv = static_cast<M>(inv_scale);
  bool bad = false;
  for (int64_t i = b; i < e; ++i) {
    const M v = static_cast<M>(x[i]);
    bad = bad || !std::isfinite(v);
    x[i] = static_cast<T>(v * inv);
  }
  return bad;
}

void non_finite_unscale_cpu(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale) {
  struct Piece {
    size_t tensor;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t t = 0; t < tensors.size(); ++t)
    for (int64_t b = 0, n = tensors[t].numel(); b < n; b += kBlock) pieces.push_back({t, b, std::min(n, b + kBlock)});
  std::atomic<bool> found{false};
  parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
    bool bad = false;
    for (int64_t k = first; k < last; ++k) {
      const Piece& p = pieces[static_cast<size_t>(k)];
      const Tensor& t = tensors[p.tensor];
      const bool b = EMBER_DISPATCH_FLOAT(t.dtype(), "non_finite_check_and_unscale_ (cpu)", [&]<typename T>() {
        return unscale_range(static_cast<T*>(t.data_ptr()), p.begin, p.end, inv_scale);
      });
      bad = bad || b;
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  if (found.load()) *found_inf.data<float>() = 1.0f;
}

}  // namespace

void register_amp() { non_finite_unscale_table.set(DeviceType::CPU, &non_finite_unscale_cpu); }

}  // namespace ember::kernels::cpu
