#pragma once
// Dropout: zeroes each element with probability p in training mode, scaling the rest by 1/(1-p).
#include <string>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Each training-mode forward takes its mask's (seed, offset) from `gen` (reserving numel()
/// elements), so a run seeded with manual_seed is reproducible on CPU and GPU alike. Identity in
/// eval mode. Any input shape.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;  // not owned; outlives the module (the default generator is process-wide)
};

}  // namespace ember::layers
