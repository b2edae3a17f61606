// Tensor factories. Values are produced on the host only where that is unavoidable (arange, the
// literal and host-data factories); everything else is allocated on the target device and filled there.
#include <ember/kernels/factory.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/kernels/convert.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/random.h>

namespace ember {

namespace {

// Factories that fill a fresh tensor make it without requires_grad (filling a leaf that requires
// grad is refused) and set the flag last.
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_();
  return t;
}

// `options` with `dtype` and without requires_grad, for the tensor a factory fills before finish().
TensorOptions no_grad(DType dtype, const TensorOptions& options) {
  return {.dtype = dtype, .device = options.device_or(Device::cpu())};
}

}  // namespace

Tensor full(const Shape& sizes, double value, const TensorOptions& options) {
  Tensor t = empty(sizes, no_grad(options.dtype_or(DType::f32), options));
  kernels::fill(t, value);
  return finish(t, options);
}
Tensor full_like(const Tensor& t, double value, const TensorOptions& options) {
  const TensorOptions o = options_like(t, options);
  Tensor out = empty_like(t, no_grad(o.dtype_or(DType::f32), o));
  kernels::fill(out, value);
  return finish(out, options);
}
Tensor zeros(const Shape& sizes, const TensorOptions& options) { return full(sizes, 0.0, options); }
Tensor ones(const Shape& sizes, const TensorOptions& options) { return full(sizes, 1.0, options); }
// The *_like factories keep `t`'s layout (a channels-last tensor's state stays channels-last).
Tensor zeros_like(const Tensor& t, const TensorOptions& options) { return full_like(t, 0.0, options); }
Tensor ones_like(const Tensor& t, const TensorOptions& options) { return full_like(t, 1.0, options); }

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  EMBER_CHECK(step != 0.0, "arange: step must be nonzero");
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ", end,
              " and step ", step, " must be finite");
  EMBER_CHECK(start == end || (end - start > 0) == (step > 0), "arange: the range [", start, ", ", end,
              ") is not reachable with step ", step, " (wrong sign)");
  const double count = std::ceil((end - start) / step);
  EMBER_CHECK(count < 9.0e15, "arange: ", count, " elements is too many");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  const DType dtype = options.dtype_or(DType::f32);
  Tensor host = empty({n}, {.dtype = dtype});
  const bool integral_args = start == std::floor(start) && step == std::floor(step);
  EMBER_DISPATCH_ALL(dtype, "arange", [&]<typename T>() {
    T* p = host.data<T>();
    if (!is_floating(dtype) && integral_args) {
      // Exact integer arithmetic, no trip through double for large values.
      const int64_t s0 = static_cast<int64_t>(start), st = static_cast<int64_t>(step);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(s0 + i * st);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = kernels::convert<T>(start + static_cast<double>(i) * step);
    }
  });
  if (options.device_or(Device::cpu()).is_cpu()) return finish(host, options);
  return detail::from_host(host.data_ptr(), dtype, n, {n}, options, "arange");
}

Tensor arange(int64_t end, const TensorOptions& options) {
  TensorOptions o = options;
  o.dtype = options.dtype_or(DType::i64);
  return arange(0.0, static_cast<double>(end), 1.0, o);
}

Tensor rand(const Shape& sizes, const TensorOptions& options, Generator& gen) {
  Tensor t = empty(sizes, no_grad(options.dtype_or(DType::f32), options));
  kernels::uniform_(t, 0.0, 1.0, gen);
  return finish(t, options);
}

Tensor randn(const Shape& sizes, const TensorOptions& options, Generator& gen) {
  Tensor t = empty(sizes, no_grad(options.dtype_or(DType::f32), options));
  kernels::normal_(t, 0.0, 1.0, gen);
  return finish(t, options);
}

Tensor scalar_tensor(double value, const TensorOptions& options) { return full({}, value, options); }

Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& options, const Shape& strides) {
  const DType dtype = options.dtype_or(DType::f32);
  const Shape st = strides.empty() ? contiguous_strides(sizes) : strides;
  EMBER_CHECK(st.size() == sizes.size(), "from_blob: ", strides.size(), " strides for the ", sizes.size(), "-d shape ",
              shape_str(sizes));
  // Elements the view can reach: 1 + the offset of the last element (0 when the shape is empty).
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    EMBER_CHECK(sizes[d] >= 0 && st[d] >= 0, "from_blob: negative size or stride in shape ", shape_str(sizes),
                " strides ", shape_str(st));
    if (sizes[d] == 0) extent = 0;
  }
  if (extent > 0)
    for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * st[d];
  EMBER_CHECK(data != nullptr || extent == 0, "from_blob: null data for shape ", shape_str(sizes));
  EMBER_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0, "from_blob: data at ", data,
              " is not aligned to the ", dtype_size(dtype), "-byte elements of dtype ", dtype_name(dtype));
  // A DataPtr without a deleter: the storage never frees the caller's memory.
  const size_t nbytes = static_cast<size_t>(extent) * dtype_size(dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(DataPtr(data, nullptr, nullptr), nbytes, options.device_or(Device::cpu()));
  impl->sizes = sizes;
  impl->strides = st;
  impl->dtype = dtype;
  return finish(Tensor(std::move(impl)), options);
}

namespace detail {

Tensor from_host(const void* data, DType src_dtype, int64_t count, const Shape& sizes, const TensorOptions& options,
                 const char* who) {
  EMBER_CHECK(count == numel_of(sizes), who, ": ", count, " values do not fill shape ", shape_str(sizes), " (expected ",
              numel_of(sizes), ")");
  // The caller's values viewed in place, then copied (and converted) into the new tensor.
  const Tensor src = from_blob(const_cast<void*>(data), sizes, {.dtype = src_dtype});
  Tensor out = empty(sizes, no_grad(options.dtype_or(src_dtype), options));
  kernels::copy(out, src);
  return finish(out, options);
}

std::string row_name(const std::vector<int64_t>& path, size_t depth) {
  if (depth == 1) return std::to_string(path[0]);
  std::string s;
  for (size_t d = 0; d < depth; ++d) s += "[" + std::to_string(path[d]) + "]";
  return s;
}

namespace {

// The flattened elements of a mixed literal, converted to the promoted type and copied as from_host
// copies a typed list: the highest kind present decides (f64 > f32 > integer > bool, where a bool
// among integers reads as 0 or 1); an empty list is f32, as torch.tensor([]) is.
Tensor from_mixed(const std::vector<MixedLiteral>& flat, const Shape& sizes, const TensorOptions& options,
                  const char* who) {
  using Kind = MixedLiteral::Kind;
  Kind top = flat.empty() ? Kind::f32 : Kind::boolean;
  for (const MixedLiteral& v : flat) top = std::max(top, v.kind());
  const auto count = static_cast<int64_t>(flat.size());
  if (top == Kind::f64 || top == Kind::f32) {
    std::vector<double> d(flat.size());
    for (size_t k = 0; k < flat.size(); ++k) d[k] = flat[k].real_value();
    if (top == Kind::f64) return from_host(d.data(), DType::f64, count, sizes, options, who);
    // f32 is the promoted type, so its values are rounded to f32 first, as a typed list is.
    const std::vector<float> f(d.begin(), d.end());
    return from_host(f.data(), DType::f32, count, sizes, options, who);
  }
  std::vector<int64_t> i(flat.size());
  for (size_t k = 0; k < flat.size(); ++k) i[k] = flat[k].int_value();
  if (top == Kind::integer) return from_host(i.data(), DType::i64, count, sizes, options, who);
  const std::vector<uint8_t> b(i.begin(), i.end());
  return from_host(b.data(), DType::boolean, count, sizes, options, who);
}

template <typename L> Tensor tensor_from_mixed(const L& values, size_t depth, const TensorOptions& options) {
  Shape sizes(depth, -1);
  std::vector<int64_t> path(depth, 0);
  std::vector<MixedLiteral> flat;
  flatten_literal(values, 0, sizes, path, flat);
  for (int64_t& s : sizes) s = s < 0 ? 0 : s;  // dims below an empty list: size 0
  return from_mixed(flat, sizes, options, "tensor");
}

}  // namespace

}  // namespace detail

Tensor tensor(std::initializer_list<MixedLiteral> values, const TensorOptions& options) {
  return detail::tensor_from_mixed(values, 1, options);
}
Tensor tensor(std::initializer_list<std::initializer_list<MixedLiteral>> values, const TensorOptions& options) {
  return detail::tensor_from_mixed(values, 2, options);
}
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<MixedLiteral>>> values,
              const TensorOptions& options) {
  return detail::tensor_from_mixed(values, 3, options);
}
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<MixedLiteral>>>> values,
    const TensorOptions& options) {
  return detail::tensor_from_mixed(values, 4, options);
}
Tensor from_vector(std::initializer_list<MixedLiteral> values, const Shape& sizes, const TensorOptions& options) {
  return detail::from_mixed(std::vector<MixedLiteral>(values), sizes, options, "from_vector");
}

}  // namespace ember
