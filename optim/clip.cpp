// clip_grad_norm_: the fused global norm, then an in-place scale that reads the norm on the device.
#include <ember/optim/clip.h>

#include <ember/autograd/grad_mode.h>
#include <ember/kernels/optim.h>

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  EMBER_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard guard;
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EMBER_CHECK(params[i].defined(), "clip_grad_norm_: parameter ", i, " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (!grads.empty())
      EMBER_CHECK(g.device() == grads[0].device(), "clip_grad_norm_: gradients on ", grads[0].device().str(), " and ",
                  g.device().str(), " (parameter ", i, ", shape ", params[i].shape_str(),
                  "); all gradients must share one device");
    grads.push_back(g);
  }
  Tensor norm = kernels::global_norm(grads);
  kernels::clip_by_norm_(grads, norm, max_norm);
  return norm;
}

}  // namespace ember::optim
