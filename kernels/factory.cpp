// Tensor factories. Values are produced on the host only where that is unavoidable (arange,
// from_vector); everything else is allocated on the target device and filled there.
#include <ember/kernels/factory.h>

#include <cmath>
#include <cstring>

#include <ember/kernels/convert.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/random.h>

namespace ember {

namespace {

// A contiguous host tensor copied to `device` (returned as is for the CPU).
Tensor to_device(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
  Tensor out = empty(host.sizes(), host.dtype(), device);
  kernels::copy(out, host);
  return out;
}

template <typename T> Tensor from_vector_impl(const std::vector<T>& values, const Shape& sizes, Device device) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == numel_of(sizes), "from_vector: ", values.size(),
              " values do not fill shape ", shape_str(sizes), " (expected ", numel_of(sizes), ")");
  Tensor host = empty(sizes, dtype_of<T>(), Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return to_device(host, device);
}

}  // namespace

Tensor full(const Shape& sizes, double value, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  kernels::fill(t, value);
  return t;
}
Tensor zeros(const Shape& sizes, DType dtype, Device device) { return full(sizes, 0.0, dtype, device); }
Tensor ones(const Shape& sizes, DType dtype, Device device) { return full(sizes, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  EMBER_CHECK(step != 0.0, "arange: step must be nonzero");
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ", end,
              " and step ", step, " must be finite");
  EMBER_CHECK(start == end || (end - start > 0) == (step > 0), "arange: the range [", start, ", ", end,
              ") is not reachable with step ", step, " (wrong sign)");
  const double count = std::ceil((end - start) / step);
  EMBER_CHECK(count < 9.0e15, "arange: ", count, " elements is too many");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor host = empty({n}, dtype, Device::cpu());
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
  return to_device(host, device);
}

Tensor arange(int64_t end, DType dtype, Device device) {
  return arange(0.0, static_cast<double>(end), 1.0, dtype, device);
}

Tensor rand(const Shape& sizes, DType dtype, Device device, Generator& gen) {
  Tensor t = empty(sizes, dtype, device);
  kernels::uniform_(t, 0.0, 1.0, gen);
  return t;
}

Tensor randn(const Shape& sizes, DType dtype, Device device, Generator& gen) {
  Tensor t = empty(sizes, dtype, device);
  kernels::normal_(t, 0.0, 1.0, gen);
  return t;
}

Tensor from_vector(const std::vector<float>& values, const Shape& sizes, Device device) {
  return from_vector_impl(values, sizes, device);
}
Tensor from_vector(const std::vector<double>& values, const Shape& sizes, Device device) {
  return from_vector_impl(values, sizes, device);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& sizes, Device device) {
  return from_vector_impl(values, sizes, device);
}
Tensor from_vector(const std::vector<int32_t>& values, const Shape& sizes, Device device) {
  return from_vector_impl(values, sizes, device);
}

Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

}  // namespace ember
