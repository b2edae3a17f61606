#include <ember/layers/batchnorm.h>

#include <sstream>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_norm.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>

namespace ember::layers {

BatchNorm2d::BatchNorm2d(int64_t num_features, const BatchNorm2dOptions& options)
    : c_(num_features), eps_(options.eps), momentum_(options.momentum) {
  EMBER_CHECK(num_features > 0, "BatchNorm2d: expected a positive number of features, got ", num_features);
  EMBER_CHECK(eps_ > 0.0, "BatchNorm2d: eps must be positive, got ", eps_);
  EMBER_CHECK(momentum_ >= 0.0 && momentum_ <= 1.0, "BatchNorm2d: momentum must be in [0, 1], got ", momentum_);
  if (options.affine) {
    weight_ = register_parameter("weight", ones({c_}));
    bias_ = register_parameter("bias", zeros({c_}));
  }
  running_mean_ = register_buffer("running_mean", zeros({c_}));
  running_var_ = register_buffer("running_var", ones({c_}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c_, "BatchNorm2d(", c_, "): expected input (N, ", c_,
              ", H, W), got ", x.defined() ? x.shape_str() : "an undefined tensor");
  const bool training = is_training();
  Tensor y = training && exchange_ && exchange_->replicas() > 1
                 ? synced_forward(x)
                 : batch_norm(x, weight_, bias_, running_mean_, running_var_, training, momentum_, eps_);
  if (training) {
    NoGradGuard no_grad;
    num_batches_tracked_.copy_(num_batches_tracked_ + 1.0);  // stays on the device, no host sync
  }
  return y;
}

// Each replica reduces its own batch to (mean, biased variance, count) per channel, two passes so
// that a large mean does not cancel the variance; one gather brings every replica's triple, and
// the global statistics follow from the parallel-variance formula: mean = sum(n_r m_r) / N,
// var = sum(n_r (v_r + (m_r - mean)^2)) / N. All of it is autograd ops, so backward needs nothing
// of its own beyond the gather's adjoint.
Tensor BatchNorm2d::synced_forward(const Tensor& x) {
  const DType dtype = x.dtype() == DType::f64 ? DType::f64 : DType::f32;  // f16/bf16 (autocast) in f32
  const Tensor xf = x.to(dtype);
  const int64_t count = x.size(0) * x.size(2) * x.size(3);
  const Shape per_channel{1, c_, 1, 1};
  Tensor local_mean, local_var;
  if (count > 0) {
    local_mean = mean(xf, {0, 2, 3});
    const Tensor centred = xf - local_mean.view(per_channel);
    local_var = mean(centred * centred, {0, 2, 3});
  } else {
    // An empty batch on this replica weighs nothing; its zeros stay in x's graph all the same, so
    // that this replica's backward joins the gather's all_reduce as every other replica's does.
    local_mean = sum(xf, {0, 2, 3});
    local_var = local_mean;
  }
  const Tensor local_count = full({1}, static_cast<double>(count), {.dtype = dtype, .device = x.device()});
  const std::vector<Tensor> all = exchange_->gather({local_mean, local_var, local_count});
  const Tensor& means = all[0];  // (replicas, C)
  const Tensor& vars = all[1];
  const Tensor counts = all[2].detach();  // (replicas, 1)
  const double total = sum(counts).item<double>();
  EMBER_CHECK(total > 0, "BatchNorm2d(", c_, "): every replica's batch is empty");
  const Tensor weights = counts * (1.0 / total);
  const Tensor batch_mean = sum(means * weights, {0});
  const Tensor spread = means - batch_mean.view({1, c_});
  const Tensor batch_var = sum((vars + spread * spread) * weights, {0});
  Tensor y = (xf - batch_mean.view(per_channel)) / sqrt(batch_var.view(per_channel) + eps_);
  if (weight_.defined()) y = y * weight_.to(dtype).view(per_channel) + bias_.to(dtype).view(per_channel);
  {
    NoGradGuard no_grad;
    const double unbiased = total > 1 ? total / (total - 1) : 1.0;
    running_mean_.copy_(running_mean_ * (1 - momentum_) + batch_mean.detach().to(running_mean_.dtype()) * momentum_);
    running_var_.copy_(running_var_ * (1 - momentum_) +
                       batch_var.detach().to(running_var_.dtype()) * (momentum_ * unbiased));
  }
  return y.to(x.dtype());
}

std::shared_ptr<Module> BatchNorm2d::clone_structure() const {
  return std::make_shared<BatchNorm2d>(
      c_, BatchNorm2dOptions{.eps = eps_, .momentum = momentum_, .affine = weight_.defined()});
}

std::string BatchNorm2d::extra_repr() const {
  std::ostringstream os;
  os << c_ << ", eps=" << eps_ << ", momentum=" << momentum_ << ", affine=" << (weight_.defined() ? "True" : "False");
  return os.str();
}

}  // namespace ember::layers
