#pragma once
// Internal helpers shared by autograd/ops_*.cpp (not part of the public API).
#include <utility>
#include <vector>

#include <ember/autograd/function.h>
#include <ember/autograd/meta.h>
#include <ember/core/tensor.h>
#include <ember/kernels/copy.h>

namespace ember::autograd::detail {

/// Error naming both operands' devices when they differ.
inline void check_same_device(const char* op, const Tensor& a, const Tensor& b, const char* an = "a",
                              const char* bn = "b") {
  EMBER_CHECK(a.device() == b.device(), op, ": operands on different devices: ", an, " (shape ", a.shape_str(), ") on ",
              a.device().str(), ", ", bn, " (shape ", b.shape_str(), ") on ", b.device().str());
}

inline void check_defined(const char* op, const Tensor& t, const char* name) {
  EMBER_CHECK(t.defined(), op, ": argument ", name, " is an undefined tensor");
}

/// Where one input's gradient goes: turns a gradient of the op's output shape into one of the
/// input's shape (summing broadcast dims) and dtype. Holds the input's shape only when it differs
/// from the output's, so the common case records no allocation.
struct GradSink {
  bool needed = false;
  bool reduce = false;
  DType dtype = DType::f32;
  Shape shape;

  GradSink() = default;
  GradSink(const Tensor& in, const Shape& out_sizes) : needed(tensor_requires_grad(in)), dtype(in.dtype()) {
    if (needed && in.sizes() != out_sizes) {
      reduce = true;
      shape = in.sizes();
    }
  }
  Tensor operator()(Tensor g) const {
    if (!needed || !g.defined()) return Tensor();
    if (reduce) g = sum_to(g, shape);
    if (g.dtype() != dtype) g = kernels::cast(g, dtype, g.suggest_memory_format());
    return g;
  }
};

/// Normalized (wrapped, sorted) reduction dims of an ndim-d tensor; empty `dims` means all.
inline std::vector<int64_t> normalize_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<bool> red(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    if (ndim == 0) {
      wrap_dim(d, 1, op);
      continue;
    }
    red[wrap_dim(d, ndim, op)] = true;
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ndim; ++i)
    if (red[i]) out.push_back(i);
  return out;
}

/// `sizes` with the (normalized) reduced dims set to 1: the keepdim shape of a reduction.
inline Shape keepdim_shape(const Shape& sizes, const std::vector<int64_t>& norm_dims) {
  Shape s = sizes;
  for (int64_t d : norm_dims) s[d] = 1;
  return s;
}

/// g (the reduction's result, with or without keepdim) viewed in the keepdim shape.
inline Tensor as_keepdim(const Tensor& g, const Shape& kd_shape) {
  return g.sizes() == kd_shape ? g : g.reshape(kd_shape);
}

}  // namespace ember::autograd::detail
