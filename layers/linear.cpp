#include <ember/layers/linear.h>

#include <cmath>

#include <ember/autograd/autocast.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/layers/init.h>

namespace ember::layers {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options, Generator& gen)
    : in_(in_features), out_(out_features) {
  EMBER_CHECK(in_features > 0 && out_features > 0, "Linear: expected positive in/out features, got (", in_features,
              ", ", out_features, ")");
  weight_ = register_parameter("weight", empty({out_, in_}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, gen);
  if (options.bias) {
    bias_ = register_parameter("bias", empty({out_}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    init::uniform_(bias_, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_, "Linear(", in_, ", ", out_, "): expected input (..., ",
              in_, "), got ", x.defined() ? x.shape_str() : "an undefined tensor");
  // Autocast: cast the weight before the transposing view (so the cached cast of the parameter is
  // reused) and the bias with it (so the bias add stays in the low dtype); no-ops outside a guard.
  using amp::OpClass;
  Tensor y = matmul(x, amp::cast_for(OpClass::LowPrecision, weight_).t());  // (..., in) @ (in, out)
  if (bias_.defined()) y = y + amp::cast_for(OpClass::LowPrecision, bias_);  // bias (out) broadcasts over the rows
  return y;
}

std::shared_ptr<Module> Linear::clone_structure() const {
  Generator scratch;  // the values are overwritten by clone(); the default generator stays put
  return std::make_shared<Linear>(in_, out_, LinearOptions{.bias = bias_.defined()}, scratch);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_.defined() ? "True" : "False");
}

}  // namespace ember::layers
