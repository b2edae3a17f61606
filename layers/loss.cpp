#include <ember/layers/loss.h>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>

namespace ember::layers {
namespace {

Tensor as_i64_target(const Tensor& target, const char* op) {
  EMBER_CHECK(target.defined(), op, ": undefined target");
  EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, op,
              ": target must hold class indices (i64 or i32), got dtype ", dtype_name(target.dtype()), " of shape ",
              target.shape_str());
  return target.dtype() == DType::i64 ? target : target.to(DType::i64);
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target_in) {
  const char* op = "nll_loss";
  EMBER_CHECK(log_probs.defined(), op, ": undefined log_probs");
  Tensor target = as_i64_target(target_in, op);
  EMBER_CHECK(log_probs.dim() == 2 && target.dim() == 1 && target.size(0) == log_probs.size(0), op,
              ": expected log_probs (N, C) and target (N), got ", log_probs.shape_str(), " and ", target.shape_str());
  EMBER_CHECK(log_probs.device() == target.device(), op, ": log_probs on ", log_probs.device().str(), " but target on ",
              target.device().str());
  EMBER_CHECK(is_floating(log_probs.dtype()), op, ": log_probs must be floating, got ", dtype_name(log_probs.dtype()));
  const int64_t N = log_probs.size(0), C = log_probs.size(1);
  {
    // On every device: on a GPU a bad target would otherwise pick a neighbouring row's entry of the
    // flattened tensor below and give a wrong loss silently. For a GPU target this costs one small
    // copy and a sync (cross_entropy, the training path, checks on the device instead).
    const std::vector<int64_t> t = target.to_vector<int64_t>();
    for (int64_t n = 0; n < N; ++n)
      EMBER_CHECK(t[n] >= 0 && t[n] < C, op, ": target ", t[n], " at row ", n,
                  " is out of range; expected a class in [0, ", C, ")");
  }
  // Pick log_probs[n, target[n]] as element n * C + target[n] of the flattened (N * C) tensor:
  // O(N) work, and index_select's backward scatters the gradient back.
  Tensor flat_index;
  {
    NoGradGuard no_grad;
    flat_index = arange(N, {.dtype = DType::i64, .device = target.device()}) * static_cast<double>(C) + target;
  }
  Tensor picked = index_select(log_probs.reshape({-1}), 0, flat_index);  // (N)
  return -mean(picked);
}

Tensor mse_loss(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "mse_loss: undefined operand");
  EMBER_CHECK(a.sizes() == b.sizes(), "mse_loss: expected operands of one shape, got ", a.shape_str(), " and ",
              b.shape_str());
  Tensor d = a - b;
  return mean(d * d);
}

}  // namespace ember::layers
