#pragma once
// Finite-difference gradient check (float64, central differences) usable by any test.
//
//   auto r = ember::testing::gradcheck(
//       [](const std::vector<Tensor>& x) { return ember::matmul(x[0], x[1]); },
//       {random_tensor({3, 4}, DType::f64, 1), random_tensor({4, 5}, DType::f64, 2, -1, 1, Layout::Transposed)});
//   INFO(r.message);
//   CHECK(r.ok);
//
// The scalar checked is L = sum(out * w) with fixed random weights w, so every output element
// contributes with a different weight. Analytic: out.backward(w) (dL/dout = w). Numeric: each input
// element is moved by +-eps in place (through the input's own strides, so non-contiguous inputs
// are exercised as they are) and L is recomputed under NoGradGuard.
//
// Inputs: CPU f64 tensors of any strides whose elements do not overlap (no expanded dims). Each is
// copied (whole storage, same sizes/strides/offset) into a fresh leaf, so fn sees exactly the input's
// geometry and inputs that alias each other are still perturbed independently.
// Tolerances follow from the output dtype: the numeric derivative carries a rounding error of
// about u * sum|out * w| / eps (u: unit roundoff of out's dtype) plus a truncation error of order
// eps^2; |analytic - numeric| <= atol + rtol * |numeric| with atol covering the former.
// This header uses no test framework and touches tensor memory directly (no ember kernels).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/core/half.h>
#include <ember/core/tensor.h>

namespace ember::testing {

struct GradcheckOptions {
  double eps = 0.0;  // step; 0: 1e-6 for f64 outputs, 1e-3 for lower precision outputs
  double atol = -1;  // < 0: derived from the output dtype (see the header comment)
  double rtol = -1;  // < 0: 1e-6 for f64 outputs, 1e-3 otherwise
  uint64_t seed = 0x5eed;
};

struct GradcheckResult {
  bool ok = false;
  double worst_ratio = 0.0;  // max over elements of |analytic - numeric| / allowed (ok iff <= 1)
  std::string message;  // the worst element (input, flat index, multi-index, both values)
};

namespace gradcheck_detail {

inline double load(DType dt, const void* p) {
  switch (dt) {
    case DType::f64:
      return *static_cast<const double*>(p);
    case DType::f32:
      return *static_cast<const float*>(p);
    case DType::f16:
      return static_cast<float>(*static_cast<const Half*>(p));
    case DType::bf16:
      return static_cast<float>(*static_cast<const BFloat16*>(p));
    default:
      return 0.0;
  }
}
inline void store(DType dt, void* p, double v) {
  switch (dt) {
    case DType::f64:
      *static_cast<double*>(p) = v;
      break;
    case DType::f32:
      *static_cast<float*>(p) = static_cast<float>(v);
      break;
    case DType::f16:
      *static_cast<Half*>(p) = Half(static_cast<float>(v));
      break;
    case DType::bf16:
      *static_cast<BFloat16*>(p) = BFloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}
/// Element offset (relative to data_ptr) of row-major linear index i of t.
inline int64_t offset_of(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.sizes()[d]) * t.strides()[d];
    i /= t.sizes()[d];
  }
  return off;
}
inline std::string index_str(const Shape& sizes, int64_t i) {
  Shape idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = i % sizes[d];
    i /= sizes[d];
  }
  return shape_str(idx);
}
/// Elements of a CPU floating tensor in row-major order, as doubles.
inline std::vector<double> values(const Tensor& t_in) {
  Tensor t = t_in.device().is_cpu() ? t_in : t_in.detach().to(Device::cpu());
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const auto* base = static_cast<const unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = load(t.dtype(), base + offset_of(t, i) * static_cast<int64_t>(t.element_size()));
  return v;
}
inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1.1102230246251565e-16;
    case DType::f32:
      return 5.960464477539063e-08;
    case DType::f16:
      return 4.8828125e-04;
    case DType::bf16:
      return 3.90625e-03;
    default:
      return 0.0;
  }
}

}  // namespace gradcheck_detail

inline GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                 const std::vector<Tensor>& inputs, GradcheckOptions opt = {}) {
  namespace gd = gradcheck_detail;
  GradcheckResult res;
  std::ostringstream err;
  std::vector<Tensor> leaves;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.defined() || in.dtype() != DType::f64 || !in.device().is_cpu()) {
      res.message = "gradcheck: input " + std::to_string(k) + " must be a defined CPU f64 tensor";
      return res;
    }
    for (int64_t d = 0; d < in.dim(); ++d) {
      if (in.sizes()[d] > 1 && in.strides()[d] == 0) {
        res.message = "gradcheck: input " + std::to_string(k) + " has overlapping elements (stride 0 in dim " +
                      std::to_string(d) + "); pass the unexpanded tensor and expand inside fn";
        return res;
      }
    }
    // A private copy of the input's whole storage with the same geometry: non-contiguous inputs stay
    // non-contiguous, and perturbing one input never moves another that aliased it.
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = Storage(in.storage().nbytes(), Device::cpu());
    std::memcpy(impl->storage.data(), in.storage().data(), in.storage().nbytes());
    impl->sizes = in.sizes();
    impl->strides = in.strides();
    impl->offset = in.offset();
    impl->dtype = in.dtype();
    Tensor leaf(std::move(impl));
    leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }

  // Analytic gradients: dL/dout = w.
  Tensor out = fn(leaves);
  if (!out.defined() || !is_floating(out.dtype())) {
    res.message = "gradcheck: fn must return a defined floating tensor";
    return res;
  }
  const DType odt = out.dtype();
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> w(static_cast<size_t>(out.numel()));
  for (double& x : w) x = dist(rng);
  if (out.requires_grad()) {
    Tensor wt = empty(out.sizes(), {.dtype = odt});
    for (int64_t i = 0; i < wt.numel(); ++i)
      gd::store(odt, static_cast<unsigned char*>(wt.data_ptr()) + i * static_cast<int64_t>(wt.element_size()),
                w[static_cast<size_t>(i)]);
    out.backward(out.device().is_cpu() ? wt : wt.to(out.device()));
  }

  const double eps = opt.eps > 0 ? opt.eps : (odt == DType::f64 ? 1e-6 : 1e-3);
  const double rtol = opt.rtol >= 0 ? opt.rtol : (odt == DType::f64 ? 1e-6 : 1e-3);
  auto weighted = [&](double* abs_sum) {
    NoGradGuard no_grad;
    std::vector<double> v = gd::values(fn(leaves));
    double s = 0.0, a = 0.0;
    for (size_t i = 0; i < v.size(); ++i) {
      s += v[i] * w[i];
      a += std::fabs(v[i] * w[i]);
    }
    if (abs_sum) *abs_sum = a;
    return s;
  };
  double base_abs = 0.0;
  weighted(&base_abs);
  // Rounding in L (each term carries a few u of relative error; allow 16) divided by 2*eps.
  const double atol = opt.atol >= 0 ? opt.atol : 16.0 * gd::unit_roundoff(odt) * (base_abs + 1.0) / eps;

  double worst = 0.0;
  for (size_t k = 0; k < leaves.size(); ++k) {
    Tensor x = leaves[k];
    Tensor g = x.grad();
    std::vector<double> ga(static_cast<size_t>(x.numel()), 0.0);
    if (g.defined()) {
      if (g.sizes() != x.sizes()) {
        res.message = "gradcheck: gradient of input " + std::to_string(k) + " has shape " + g.shape_str() +
                      ", expected " + x.shape_str();
        return res;
      }
      ga = gd::values(g);
    }
    auto* base = static_cast<unsigned char*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double* p = reinterpret_cast<double*>(base + gd::offset_of(x, i) * 8);
      const double orig = *p;
      *p = orig + eps;
      const double fp = weighted(nullptr);
      *p = orig - eps;
      const double fm = weighted(nullptr);
      *p = orig;
      const double num = (fp - fm) / (2.0 * eps);
      const double ana = ga[static_cast<size_t>(i)];
      const double allowed = atol + rtol * std::fabs(num);
      const double ratio = std::isfinite(ana) && std::isfinite(num) ? std::fabs(ana - num) / allowed : INFINITY;
      if (ratio > worst || k + i == 0) {
        worst = std::max(worst, ratio);
        err.str("");
        err << "worst element: input " << k << " (shape " << x.shape_str() << ") flat index " << i << " index "
            << gd::index_str(x.sizes(), i) << ": analytic " << ana << ", numeric " << num << ", |diff| "
            << std::fabs(ana - num) << ", allowed " << allowed << " (atol " << atol << ", rtol " << rtol << ", eps "
            << eps << ", output " << out.shape_str() << " " << dtype_name(odt) << ")";
      }
    }
  }
  res.worst_ratio = worst;
  res.ok = worst <= 1.0;
  res.message = (res.ok ? "gradcheck passed; " : "gradcheck FAILED; ") + err.str();
  return res;
}

}  // namespace ember::testing

/// For Catch2 tests: runs gradcheck(fn, inputs[, options]) and CHECKs it, printing the worst element.
#define EMBER_CHECK_GRADIENTS(fn, ...)                                    \
  do {                                                                    \
    auto ember_gc_result_ = ::ember::testing::gradcheck(fn, __VA_ARGS__); \
    INFO(ember_gc_result_.message);                                       \
    CHECK(ember_gc_result_.ok);                                           \
  } while (0)
