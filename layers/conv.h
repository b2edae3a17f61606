#pragma once
// Conv2d: a 2-D convolution layer over NCHW input (im2col + GEMM on the CPU, cuDNN on GPUs).
#include <cstdint>
#include <string>

#include <ember/autograd/ops_conv.h>
#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Conv2d(in, out, 3, {.stride = 2, .padding = 1, .groups = 1, .bias = false}).
struct Conv2dOptions {
  Size2 stride{1};
  Size2 padding{0};
  Size2 dilation{1};
  int64_t groups = 1;
  bool bias = true;
};

/// weight (out, in / groups, kh, kw), bias (out) unless options.bias is false. PyTorch's default
/// initialisation, drawn from `gen`: weight ~ kaiming_uniform(a = sqrt(5)) = U[-1/sqrt(fan_in),
/// 1/sqrt(fan_in)) and bias ~ U[-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * kh * kw.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {},
         Generator& gen = default_generator());
  /// x (N, in, H, W) -> (N, out, Ho, Wo), Ho = (H + 2 pad - dilation (kh - 1) - 1) / stride + 1.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::shared_ptr<Module> clone_structure() const override;
  /// "1, 32, kernel_size=(3, 3), stride=(1, 1)" plus padding, dilation, groups and bias when not
  /// the defaults (as PyTorch prints it).
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size2 kernel_size() const { return kernel_; }
  const Conv2dOptions& options() const { return opts_; }
  const Tensor& weight() const { return weight_; }
  /// Undefined when constructed with bias = false.
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Size2 kernel_;
  Conv2dOptions opts_;
  Tensor weight_, bias_;  // handles shared with the registered parameters
};

}  // namespace ember::layers
