#pragma once
// Building blocks shared by the CIFAR model zoo (models/resnet, models/wide_resnet,
// models/cifar_cnn): a container with named children, ResNet's post-activation BasicBlock and the
// wide ResNet's pre-activation block. All tensors are NCHW.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/rng.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/module.h>

namespace ember::models {

/// Children applied in registration order, like layers::Sequential, but under names of the
/// caller's choosing, so a model's state-dict keys read "conv1.weight", "layer1.0.bn1.bias"
/// instead of "0.weight". name() is the type name given at construction ("ResNet").
class NamedSequential : public layers::Module {
 public:
  explicit NamedSequential(std::string type_name);
  /// Registers `m` as child `child_name` and appends it to the chain. Returns `m`.
  layers::ModulePtr add(const std::string& child_name, layers::ModulePtr m);
  /// Input of the first child -> output of the last (the input itself when empty).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return type_name_; }
  /// The same type name and child names, each child's clone_structure().
  std::shared_ptr<layers::Module> clone_structure() const override;

 private:
  std::string type_name_;
  std::vector<layers::ModulePtr> chain_;
};

/// ResNet's BasicBlock (He et al. 2016), post-activation:
///   y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
/// conv1 3x3 stride `stride`, conv2 3x3 stride 1, both padding 1 and without bias. shortcut is the
/// identity when stride == 1 and in == out, else Sequential(Conv2d 1x1 stride `stride`, no bias;
/// BatchNorm2d) registered as "shortcut" (keys "shortcut.0.weight", "shortcut.1.running_mean").
/// Children in order: conv1, bn1, conv2, bn2[, shortcut].
class BasicBlock : public layers::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator& gen = default_generator());
  /// x (N, in, H, W) -> (N, out, Ho, Wo), Ho = (H - 1) / stride + 1.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlock"; }
  std::shared_ptr<layers::Module> clone_structure() const override;
  std::string extra_repr() const override;
  /// True when the shortcut is a projection (1x1 conv + BN), false for the identity.
  bool has_projection() const { return shortcut_ != nullptr; }

 private:
  int64_t in_, out_, stride_;
  std::shared_ptr<layers::Conv2d> conv1_, conv2_;
  std::shared_ptr<layers::BatchNorm2d> bn1_, bn2_;
  layers::ModulePtr shortcut_;  // null for the identity
};

/// The wide ResNet's block (Zagoruyko & Komodakis 2016), pre-activation:
///   a = relu(bn1(x))
///   y = conv2(dropout(relu(bn2(conv1(a))))) + shortcut
/// shortcut = x when stride == 1 and in == out, else Conv2d 1x1 stride `stride` (no bias) applied
/// to the pre-activated `a` (not to x: the projection sees normalized input, as in the reference
/// implementation). conv1 3x3 stride `stride`, conv2 3x3 stride 1, padding 1, no bias; no ReLU
/// after the sum (the next block or the head normalizes first).
/// Children in order: bn1, conv1, bn2, dropout, conv2[, shortcut].
class PreActBlock : public layers::Module {
 public:
  /// dropout in [0, 1); `gen` feeds both the initialisation and the dropout masks.
  PreActBlock(int64_t in_channels, int64_t out_channels, int64_t stride, double dropout,
              Generator& gen = default_generator());
  /// x (N, in, H, W) -> (N, out, Ho, Wo), Ho = (H - 1) / stride + 1.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "PreActBlock"; }
  /// Its dropout draws from a generator of its own (layers::Dropout::clone_structure).
  std::shared_ptr<layers::Module> clone_structure() const override;
  std::string extra_repr() const override;
  /// True when the shortcut is a 1x1 projection, false for the identity.
  bool has_projection() const { return shortcut_ != nullptr; }

 private:
  int64_t in_, out_, stride_;
  std::shared_ptr<layers::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<layers::Conv2d> conv1_, conv2_, shortcut_;  // shortcut_ null for the identity
  std::shared_ptr<layers::Dropout> dropout_;
};

}  // namespace ember::models
