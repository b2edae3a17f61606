#include <ember/layers/activation.h>

#include <ember/autograd/ops.h>
#include <ember/core/error.h>

namespace ember::layers {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

std::shared_ptr<Module> ReLU::clone_structure() const { return std::make_shared<ReLU>(); }

std::shared_ptr<Module> Flatten::clone_structure() const { return std::make_shared<Flatten>(start_, end_); }

Tensor Flatten::forward(const Tensor& x) {
  EMBER_CHECK(x.defined(), "Flatten: undefined input");
  if (x.dim() == 0) return x.reshape({1});
  return x.flatten(start_, end_);
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_);
}

}  // namespace ember::layers
