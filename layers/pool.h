#pragma once
// Pooling layers over NCHW input: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d. No parameters.
#include <cstdint>
#include <string>

#include <ember/autograd/ops_conv.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Max over kernel windows. stride 0 means stride = kernel (PyTorch's stride=None).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0, bool ceil_mode = false);
  /// x (N, C, H, W) -> (N, C, Ho, Wo), Ho = (H + 2 pad - kernel) / stride + 1 (rounded up with
  /// ceil_mode, as long as the last window starts inside the input or its left padding).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;
  const Pool2dFuncOptions& options() const { return opts_; }

 private:
  Pool2dFuncOptions opts_;
};

/// Mean over kernel windows; count_include_pad counts padded positions in the divisor.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  /// x (N, C, H, W) -> (N, C, Ho, Wo), sizes as for MaxPool2d.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;
  const Pool2dFuncOptions& options() const { return opts_; }

 private:
  Pool2dFuncOptions opts_;
};

/// Mean over windows chosen so the output has a fixed size: window i covers
/// [floor(i*H/out_h), ceil((i+1)*H/out_h)).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  /// x (N, C, H, W) -> (N, C, out_h, out_w).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;
  Size2 output_size() const { return out_; }

 private:
  Size2 out_;
};

}  // namespace ember::layers
