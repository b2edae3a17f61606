// CPU index_select / index_add on (outer, D, inner) tensors.
// index_select moves whole inner rows with memcpy, so it is dtype-agnostic. index_add splits work
// over (outer, inner range) tiles and walks the index in order inside each tile: duplicate indices
// accumulate without races or atomics, and the summation order is fixed.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/index.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kGrainBytes = 64 * 1024;
constexpr int64_t kInnerTile = 4096;  // elements of inner per index_add task

void index_select_cpu(const Tensor& x, const Tensor& index, const Tensor& out) {
  const int64_t outer = x.size(0), D = x.size(1), inner = x.size(2), K = out.size(1);
  const int64_t* idx = index.data<int64_t>();
  const size_t row_bytes = static_cast<size_t>(inner) * x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t grain = std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(static_cast<int64_t>(row_bytes), 1));
  parallel_for(0, outer * K, grain, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int64_t o = j / K, k = j % K;
      std::memcpy(dst + j * row_bytes, src + (o * D + idx[k]) * row_bytes, row_bytes);
    }
  });
}

template <typename T> void index_add_typed(const Tensor& out, const Tensor& index, const Tensor& src) {
  T* o = static_cast<T*>(out.data_ptr());
  const T* s = static_cast<const T*>(src.data_ptr());
  const int64_t* idx = index.data<int64_t>();
  const int64_t outer = out.size(0), D = out.size(1), inner = out.size(2), K = src.size(1);
  const int64_t tiles_per_outer = (inner + kInnerTile - 1) / kInnerTile;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(K * std::min(inner, kInnerTile), 1));
  parallel_for(0, outer * tiles_per_outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t oi = t / tiles_per_outer, i0 = (t % tiles_per_outer) * kInnerTile;
      const int64_t n = std::min(kInnerTile, inner - i0);
      for (int64_t k = 0; k < K; ++k) {
        T* drow = o + (oi * D + idx[k]) * inner + i0;
        const T* srow = s + (oi * K + k) * inner + i0;
        if constexpr (std::is_same_v<T, bool>) {
          for (int64_t i = 0; i < n; ++i) drow[i] = drow[i] || srow[i];
        } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          for (int64_t i = 0; i < n; ++i) drow[i] = T(static_cast<float>(drow[i]) + static_cast<float>(srow[i]));
        } else {
          for (int64_t i = 0; i < n; ++i) drow[i] = static_cast<T>(drow[i] + srow[i]);
        }
      }
    }
  });
}

void index_add_cpu(const Tensor& out, const Tensor& index, const Tensor& src) {
  EMBER_DISPATCH_ALL(out.dtype(), "index_add (cpu)", [&]<typename T>() { index_add_typed<T>(out, index, src); });
}

}  // namespace

void register_index() {
  index_select_table.set(DeviceType::CPU, &index_select_cpu);
  index_add_table.set(DeviceType::CPU, &index_add_cpu);
}

}  // namespace ember::kernels::cpu
