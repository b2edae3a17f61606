#pragma once
// StridedIndexer maps a linear (row-major) element index of a tensor's logical shape to the
// element offset in its storage. Plain data, so it can be passed by value into a CUDA kernel.
#include <cstdint>

#include <ember/core/half.h>
#include <ember/core/tensor.h>

namespace ember::kernels {

constexpr int kMaxDims = 12;

struct StridedIndexer {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  /// Element offset (relative to the tensor's own data_ptr()) of linear index `i`.
  EMBER_HOST_DEVICE int64_t operator()(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t s = sizes[d];
      off += (i % s) * strides[d];
      i /= s;
    }
    return off;
  }
};

/// Indexer over `t`'s logical shape, with adjacent dims merged where the strides allow so the
/// per-element division loop is as short as possible. Throws if t.dim() > kMaxDims.
StridedIndexer make_indexer(const Tensor& t);

}  // namespace ember::kernels
