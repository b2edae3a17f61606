// Differentiable batch norm and dropout over kernels/norm.h.
#include <ember/autograd/ops_norm.h>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/norm.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::TensorList;
using autograd::detail::check_defined;

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  profiler::RecordScope profile_scope("batch_norm", profiler::Category::op);
  profile_scope.inputs(x, weight, bias, running_mean, running_var);
  check_defined("batch_norm", x, "x");
  // Autocast leaves x in its dtype: the kernels compute the statistics and the normalization in f32
  // with f32 parameters and round the output once (as PyTorch's autocast leaves batch norm to
  // cuDNN's mixed-precision kernels), so a low-precision conv -> BN -> ReLU block keeps its
  // activations, and what the backward saves, in 2 bytes.
  kernels::BatchNormResult r = kernels::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
  Tensor out = r.out;
  if (needs_grad(x, weight, bias)) {
    Tensor save_mean = r.save_mean, save_invstd = r.save_invstd;
    if (!training) {
      // Eval: the backward uses the running statistics as of this forward (copied: a later
      // training-mode forward updates the buffers in place before this backward may run).
      NoGradGuard no_grad;
      save_mean = running_mean.clone();
      save_invstd = 1.0 / sqrt(running_var + eps);
    }
    const bool w_grad = autograd::tensor_requires_grad(weight), b_grad = autograd::tensor_requires_grad(bias);
    record(
        out, "BatchNormBackward",
        [x, weight, save_mean, save_invstd, training, eps, w_grad, b_grad](const Tensor& g) {
          kernels::BatchNormGrads gr =
              kernels::batch_norm_backward(g, x, weight, save_mean, save_invstd, training, eps);
          return TensorList{autograd::tensor_requires_grad(x) ? gr.grad_x : Tensor(),
                            w_grad ? gr.grad_weight : Tensor(), b_grad ? gr.grad_bias : Tensor()};
        },
        x, weight, bias);
  }
  return out;
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  profiler::RecordScope profile_scope("dropout", profiler::Category::op);
  profile_scope.inputs(x);
  check_defined("dropout", x, "x");
  Tensor out = kernels::dropout(x, p, seed, offset);
  if (needs_grad(x)) {
    // The backward regenerates the mask in the layout the forward drew it in.
    const MemoryFormat f = x.suggest_memory_format();
    record(
        out, "DropoutBackward",
        [p, seed, offset, f](const Tensor& g) { return TensorList{kernels::dropout_backward(g, p, seed, offset, f)}; },
        x);
  }
  return out;
}

}  // namespace ember
