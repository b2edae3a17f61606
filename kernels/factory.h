#pragma once
// Tensor factories (namespace ember, as users write them: ember::zeros(...)).
#include <cstdint>
#include <vector>

#include <ember/core/rng.h>
#include <ember/core/tensor.h>

namespace ember {

Tensor zeros(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& sizes, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/// [start, end) with `step` (1-D). dtype f32 by default; integral dtypes are exact.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32, Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = Device::cpu());
/// U[0, 1) and N(0, 1) from `gen` (the default generator when omitted).
Tensor rand(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu(),
            Generator& gen = default_generator());
Tensor randn(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu(),
             Generator& gen = default_generator());
/// Copies `values` (numel must match `sizes`) into a new tensor on `device`.
Tensor from_vector(const std::vector<float>& values, const Shape& sizes, Device device = Device::cpu());
Tensor from_vector(const std::vector<double>& values, const Shape& sizes, Device device = Device::cpu());
Tensor from_vector(const std::vector<int64_t>& values, const Shape& sizes, Device device = Device::cpu());
Tensor from_vector(const std::vector<int32_t>& values, const Shape& sizes, Device device = Device::cpu());
/// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());

}  // namespace ember
