#pragma once
// TensorOptions: the dtype, device and requires_grad flag of a tensor a factory makes, passed as one
// argument so a call names only what differs from the defaults:
//
//   zeros({4}, {.dtype = DType::f64});
//   randn({3, 2}, {.device = dev, .requires_grad = true});
//
// It is an aggregate (designated initialisers, in field order). dtype and device are optional
// because their defaults depend on the factory: the element type for from_vector/tensor, i64 for
// arange(end), the other tensor's for *_like, else f32 on the CPU. Every field has a default
// member initialiser, so GCC's -Wmissing-field-initializers stays quiet about the omitted ones.
#include <optional>

#include <ember/core/device.h>
#include <ember/core/dtype.h>

namespace ember {

/// Options of a tensor factory. Unset fields take the factory's default (see above).
struct TensorOptions {
  /// Element type; unset: the factory's default (f32 for zeros, ones, full, empty, rand, randn, ...).
  std::optional<DType> dtype{};
  /// Where the tensor lives; unset: the CPU (or the other tensor's device for *_like).
  std::optional<Device> device{};
  /// Makes the result a leaf that requires grad (floating dtypes only).
  bool requires_grad = false;

  /// dtype when set, else `fallback`.
  constexpr DType dtype_or(DType fallback) const { return dtype.value_or(fallback); }
  /// device when set, else `fallback`.
  constexpr Device device_or(Device fallback) const { return device.value_or(fallback); }
};

}  // namespace ember
