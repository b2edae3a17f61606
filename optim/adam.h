#pragma once
// Adam and AdamW, exactly PyTorch's torch.optim.Adam / AdamW (amsgrad off), per parameter:
//   step += 1
//   Adam:  g = grad + weight_decay * p          AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Each parameter keeps its own step count (a parameter without a gradient skips the step), so
// bias corrections are per parameter, as in PyTorch. One fused multi-tensor kernel per device.
#include <string>
#include <utility>
#include <vector>

#include <ember/optim/optimizer.h>

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  /// L2 penalty added to the gradient (coupled).
  double weight_decay = 0.0;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  /// Decoupled decay: p *= 1 - lr * weight_decay each step (PyTorch's AdamW default 1e-2).
  double weight_decay = 1e-2;
};

class Adam : public Optimizer {
 public:
  /// Checks lr >= 0, eps >= 0, weight_decay >= 0 and 0 <= beta < 1.
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  void step() override;
  AdamOptions options() const;

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled);
  /// "step" (0-d i64 CPU), "exp_avg", "exp_avg_sq" (param's shape and dtype).
  std::vector<std::string> state_names() const override { return {"step", "exp_avg", "exp_avg_sq"}; }

 private:
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamWOptions options() const;
};

}  // namespace ember::optim
