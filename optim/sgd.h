#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay,
// exactly PyTorch's torch.optim.SGD:
//   g = grad + weight_decay * p
//   momentum != 0:  buf = g on a parameter's first step, else momentum * buf + (1 - dampening) * g
//                   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// All parameters of a device are updated by one fused multi-tensor kernel (kernels/optim.h).
#include <string>
#include <vector>

#include <ember/optim/optimizer.h>

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  /// Nesterov momentum; needs momentum > 0 and dampening == 0 (as in PyTorch).
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  /// Hyperparameters are checked (lr, momentum, weight_decay >= 0; the Nesterov conditions).
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  std::string name() const override { return "SGD"; }
  void step() override;
  /// Current hyperparameters (lr as set by a schedule, the rest as loaded from a state dict).
  SGDOptions options() const;

 protected:
  /// "momentum_buffer" (param's shape and dtype), present once momentum has been applied.
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

}  // namespace ember::optim
