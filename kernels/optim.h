#pragma once
// Fused optimizer updates and the global gradient norm: every parameter of a step updated by one
// multi-tensor pass instead of a handful of elementwise ops per tensor. No autograd here; the
// optimizers in optim/ call these under NoGradGuard.
//
// Dtypes: parameters are f32 or f64; a gradient has its parameter's dtype, or f16/bf16 for an f32
// parameter (mixed precision with f32 master weights); optimizer state (momentum buffers, Adam
// moments) has the parameter's dtype. Math runs in the parameter's dtype (f32 or f64), with the
// per-element formulas of kernels/optim_math.h shared by the CPU and CUDA implementations.
#include <cstdint>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// SGD hyperparameters (PyTorch semantics, see sgd_step).
struct SgdHyper {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};
/// One parameter's tensors for a fused SGD step. momentum_buffer is undefined iff momentum == 0.
/// init_buffer: the buffer is (re)initialised to this step's (decayed) gradient, as PyTorch does on
/// a parameter's first step with momentum; otherwise it is updated with momentum and dampening.
struct SgdSlot {
  Tensor param;  // updated in place
  Tensor grad;  // param's shape
  Tensor momentum_buffer;  // param's shape and dtype, updated in place
  bool init_buffer = false;
};
/// For every slot, elementwise:
///   g = grad + weight_decay * p
///   if momentum != 0: buf = init_buffer ? g : momentum * buf + (1 - dampening) * g
///                     g   = nesterov ? g + momentum * buf : buf
///   p = p - lr * g
/// Checks dtypes, shapes and devices (errors name the slot); non-contiguous params and buffers are
/// updated through a contiguous copy. Slots may be on different devices (one pass per device).
void sgd_step(const std::vector<SgdSlot>& slots, const SgdHyper& h);

/// Adam / AdamW hyperparameters. decoupled: AdamW (p *= 1 - lr * weight_decay before the update)
/// instead of Adam's L2 term (g += weight_decay * p).
struct AdamHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;
};
/// One parameter's tensors for a fused Adam step; `step` is the parameter's step count including
/// this one (>= 1), which sets its bias corrections.
struct AdamSlot {
  Tensor param;  // updated in place
  Tensor grad;  // param's shape
  Tensor exp_avg;  // m: param's shape and dtype, updated in place
  Tensor exp_avg_sq;  // v: param's shape and dtype, updated in place
  int64_t step = 1;
};
/// For every slot, elementwise (PyTorch's Adam/AdamW, amsgrad off):
///   decoupled && wd != 0: p = p * (1 - lr * wd);   !decoupled && wd != 0: g = g + wd * p
///   m = m + (1 - beta1) * (g - m);   v = beta2 * v + (1 - beta2) * g * g
///   p = p - (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
/// Checks and contiguity as sgd_step.
void adam_step(const std::vector<AdamSlot>& slots, const AdamHyper& h);

/// sqrt(sum over every tensor of sum(x^2)): the L2 norm of all elements of all tensors together,
/// one reduction. 0-d on the tensors' device (all must share one); f64 when every tensor is f64,
/// else f32. Tensors may be of any floating dtype and layout; an empty list gives a CPU 0.
Tensor global_norm(const std::vector<Tensor>& tensors);
/// Multiplies every tensor in place by min(1, max_norm / (total_norm + eps)), reading total_norm
/// (0-d f32/f64 on the tensors' device) on the device, so a GPU caller never waits for the norm.
/// A NaN norm makes the factor NaN (the gradients then show the problem instead of hiding it).
void clip_by_norm_(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm, double eps = 1e-6);

// ---- implementation signatures ----
// All slots/tensors of one call are on one device and contiguous. For the two steps, every slot
// of a call has the same (param dtype, grad dtype) pair and checks have been done by the front.
using SgdStepFn = void(const std::vector<SgdSlot>& slots, const SgdHyper& h);
using AdamStepFn = void(const std::vector<AdamSlot>& slots, const AdamHyper& h);
/// Writes the norm of all tensors (any floating dtypes, mixed) into out (0-d, f32 or f64).
using GlobalNormFn = void(const std::vector<Tensor>& tensors, const Tensor& out);
/// Scales tensors (any floating dtypes, mixed) in place as clip_by_norm_.
using ClipByNormFn = void(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm, double eps);

extern DispatchTable<SgdStepFn> sgd_step_table;
extern DispatchTable<AdamStepFn> adam_step_table;
extern DispatchTable<GlobalNormFn> global_norm_table;
extern DispatchTable<ClipByNormFn> clip_by_norm_table;

}  // namespace ember::kernels
