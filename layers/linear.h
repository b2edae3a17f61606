#pragma once
// Linear: y = x W^T + b.
#include <cstdint>
#include <string>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Fully connected layer. weight (out, in), bias (out). PyTorch's default initialisation, drawn
/// from `gen`: weight ~ kaiming_uniform(a = sqrt(5)) = U[-1/sqrt(in), 1/sqrt(in)),
/// bias ~ U[-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  /// x (N, in) or (..., in) -> (N, out) / (..., out). Multiplies by the transposed view of the
  /// weight (no copy); the CPU GEMM and cuBLAS take the transpose as a layout flag.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor weight() const { return weight_; }
  /// Undefined when constructed with bias = false.
  Tensor bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;  // handles shared with the registered parameters
};

}  // namespace ember::layers
