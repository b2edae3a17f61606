#pragma once
// Linear: y = x W^T + b.
#include <concepts>
#include <cstdint>
#include <string>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Linear's options, as Conv2d takes Conv2dOptions: Linear(784, 10, {.bias = false}).
struct LinearOptions {
  bool bias = true;
};

/// Fully connected layer. weight (out, in), bias (out). PyTorch's default initialisation, drawn
/// from `gen`: weight ~ kaiming_uniform(a = sqrt(5)) = U[-1/sqrt(in), 1/sqrt(in)),
/// bias ~ U[-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {},
         Generator& gen = default_generator());
  /// The short positional form, Linear(in, out, false, gen). It takes a bool and nothing else, so
  /// that Linear(in, out, {}) means the default options (bias on), never bias = false.
  Linear(int64_t in_features, int64_t out_features, std::same_as<bool> auto bias, Generator& gen = default_generator())
      : Linear(in_features, out_features, LinearOptions{.bias = bias}, gen) {}
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
