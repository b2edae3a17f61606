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
  Tensor y = batch_norm(x, weight_, bias_, running_mean_, running_var_, training, momentum_, eps_);
  if (training) {
    NoGradGuard no_grad;
    num_batches_tracked_.copy_(num_batches_tracked_ + 1.0);  // stays on the device, no host sync
  }
  return y;
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
