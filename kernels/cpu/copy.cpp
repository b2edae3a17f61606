// CPU copy (with cast, any strides on both sides) and fill.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/convert.h"
#include "kernels/copy.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <typename S, typename D>
void copy_typed(const Tensor& src, const Tensor& dst) {
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
  EMBER_CHECK(src.sizes() == dst.sizes(), "copy (cpu): source shape ", src.shape_str(),
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
