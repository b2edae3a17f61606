// CPU copy (with cast, any strides on both sides) and fill.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include <ember/core/thread_pool.h>
#include <ember/kernels/convert.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/cpu/loops.h>

namespace ember::kernels::cpu {
namespace {

// Square tiles for transposing copies: a 32 x 32 tile of both operands stays in L1.
constexpr int64_t kTile = 32;

// Copies tile by tile when one side walks the last dim with unit stride and the other walks the
// second-to-last one with unit stride (a transpose, e.g. contiguous() of x.t()). Element by element,
// one of the two would touch a new cache line per element. Returns false when the geometry is not
// such a transpose or too small to gain.
template <typename S, typename D> bool copy_transposed_tiles(const LoopGeometry<2>& g, const S* sp, D* dp) {
  if (g.ndim < 2) return false;
  const int l = g.ndim - 1;
  const int64_t do1 = g.strides[0][l - 1], do2 = g.strides[0][l];
  const int64_t so1 = g.strides[1][l - 1], so2 = g.strides[1][l];
  const bool transpose = (do2 == 1 && so1 == 1 && so2 != 1) || (so2 == 1 && do1 == 1 && do2 != 1);
  const int64_t rows = g.sizes[l - 1], cols = g.sizes[l];
  if (!transpose || rows < kTile || cols < kTile) return false;
  int64_t outer = 1;
  for (int d = 0; d < l - 1; ++d) outer *= g.sizes[d];
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  const int64_t tiles = outer * tiles_r * tiles_c;
  parallel_for(0, tiles, std::max<int64_t>(1, kGrain / (kTile * kTile)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t rest = t / (tiles_r * tiles_c);
      const int64_t in_mat = t % (tiles_r * tiles_c);
      const int64_t r0 = (in_mat / tiles_c) * kTile, c0 = (in_mat % tiles_c) * kTile;
      int64_t od = 0, os = 0;  // offsets of this matrix in dst and src
      for (int d = l - 2; d >= 0; --d) {
        const int64_t i = rest % g.sizes[d];
        rest /= g.sizes[d];
        od += i * g.strides[0][d];
        os += i * g.strides[1][d];
      }
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        D* o = dp + od + r * do1;
        const S* s = sp + os + r * so1;
        for (int64_t c = c0; c < c1; ++c) o[c * do2] = convert<D>(s[c * so2]);
      }
    }
  });
  return true;
}

template <typename S, typename D> void copy_typed(const Tensor& src, const Tensor& dst) {
  const S* sp = static_cast<const S*>(src.data_ptr());
  D* dp = static_cast<D*>(dst.data_ptr());
  const int64_t n = dst.numel();
  if (src.is_contiguous() && dst.is_contiguous()) {
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(dp + b, sp + b, static_cast<size_t>(e - b) * sizeof(D));
      } else {
        for (int64_t i = b; i < e; ++i) dp[i] = convert<D>(sp[i]);
      }
    });
    return;
  }
  const auto g = make_geometry<2>(dst.sizes(), {&dst.strides(), &src.strides()});
  if (copy_transposed_tiles(g, sp, dp)) return;
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    strided_runs(g, b, e, [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t cnt) {
      D* o = dp + off[0];
      const S* s = sp + off[1];
      if (st[0] == 1 && st[1] == 1) {
        for (int64_t j = 0; j < cnt; ++j) o[j] = convert<D>(s[j]);
      } else {
        const int64_t so = st[0], ss = st[1];
        for (int64_t j = 0; j < cnt; ++j) o[j * so] = convert<D>(s[j * ss]);
      }
    });
  });
}

void copy_impl(const Tensor& src, const Tensor& dst) {
  // The front (kernels/copy.cpp: copy, cast and its staging copies) expands src to dst's shape: debug-only.
  EMBER_DEBUG_ASSERT(src.sizes() == dst.sizes(), "copy (cpu): source shape ", src.shape_str(),
                     " differs from destination shape ", dst.shape_str());
  EMBER_DISPATCH_ALL(src.dtype(), "copy", [&]<typename S>() {
    EMBER_DISPATCH_ALL(dst.dtype(), "copy", [&]<typename D>() { copy_typed<S, D>(src, dst); });
  });
}

void fill_impl(const Tensor& dst, double value) {
  EMBER_DISPATCH_ALL(dst.dtype(), "fill", [&]<typename T>() {
    const T v = convert<T>(value);
    T* p = static_cast<T*>(dst.data_ptr());
    const int64_t n = dst.numel();
    if (dst.is_contiguous()) {
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
      return;
    }
    const auto g = make_geometry<1>(dst.sizes(), {&dst.strides()});
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      strided_runs(g, b, e, [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st, int64_t cnt) {
        T* o = p + off[0];
        for (int64_t j = 0; j < cnt; ++j) o[j * st[0]] = v;
      });
    });
  });
}

}  // namespace

void register_copy() {
  copy_table.set(DeviceType::CPU, &copy_impl);
  fill_table.set(DeviceType::CPU, &fill_impl);
}

}  // namespace ember::kernels::cpu
