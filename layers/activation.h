#pragma once
// Parameter-free layers: ReLU and Flatten.
#include <cstdint>
#include <string>

#include <ember/layers/module.h>

namespace ember::layers {

/// max(x, 0) elementwise; any shape.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
  std::shared_ptr<Module> clone_structure() const override;
};

/// Flattens dims [start_dim, end_dim] into one: (N, C, H, W) -> (N, C*H*W) with the defaults.
/// A view when the strides allow it, else a copy (reshape).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Flatten"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;

 private:
  int64_t start_, end_;
};

}  // namespace ember::layers
