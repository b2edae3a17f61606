#pragma once
// Automatic mixed precision (autocast): a scoped, thread-local guard under which the differentiable
// ops choose their own compute dtype. No global switch: like NoGradGuard, the state belongs to the
// calling thread and the guard restores the previous state when it leaves scope.
//
//   {
//     amp::Autocast guard(DeviceType::CUDA, DType::f16);
//     Tensor loss = layers::cross_entropy(model->forward(x), y);  // f16 GEMMs, f32 loss
//   }
//   loss.backward();  // f32 .grad() on the f32 parameters
//
// Op classes (docs/amp.md lists every op):
//   low precision: matmul (so Linear) and conv2d cast their floating inputs to the guard's dtype;
//   f32:           softmax, log_softmax, cross_entropy, sum and mean cast f16 / bf16 inputs up to f32;
//   own dtype:     batch_norm keeps its input's dtype (its kernels compute in f32 with f32
//                  parameters and round the output once);
//   promote:       binary elementwise ops already run in promote_types of their inputs.
// Only tensors on the guard's device type are touched; f64 tensors never are.
//
// Parameters stay f32 (the master weights). Casting a leaf that requires grad to the low dtype is
// cached for the life of the outermost guard, so a weight used several times in one forward is cast
// once; the cast is differentiable, so its gradient arrives in the parameter as f32. Wrap the
// forward and the loss only: an optimizer step inside the guard would leave stale casts in the cache.
#include <cstddef>

#include <ember/core/device.h>
#include <ember/core/dtype.h>
#include <ember/core/tensor.h>

namespace ember::amp {

/// Turns autocast on (or off, with enabled = false) for tensors on `device_type` on this thread
/// until the guard leaves scope, then restores the previous setting. Nestable. `dtype` must be
/// f16 or bf16; anything else is an error naming it.
class Autocast {
 public:
  Autocast(DeviceType device_type, DType dtype, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  DType prev_dtype_;
};

/// True when an Autocast guard is enabled for `device_type` on this thread.
bool autocast_enabled(DeviceType device_type);
/// The low dtype autocast uses for `device_type` on this thread (the innermost guard's; bf16 on
/// the CPU and f16 on CUDA when no guard set one).
DType autocast_dtype(DeviceType device_type);

/// How an op treats its floating inputs under autocast.
enum class OpClass {
  LowPrecision,  ///< cast to autocast_dtype (f32 / f16 / bf16 inputs; f64 untouched)
  Float32,  ///< cast f16 / bf16 up to f32
};

/// The tensor an op of class `cls` should compute with: `t` itself when autocast is off for its
/// device type, when it is undefined, not floating, or already of the wanted dtype; else a
/// differentiable cast of it (taken from this thread's cast cache for an f32 leaf that requires
/// grad). Every autocast hook in autograd/ops_*.cpp goes through here.
Tensor cast_for(OpClass cls, const Tensor& t);

/// Number of cached casts on this thread (cleared when the outermost guard ends); for tests.
size_t autocast_cache_size();

}  // namespace ember::amp
