#pragma once
// ResNet-18, CIFAR variant (He et al. 2016, as in the widely used kuangliu/pytorch-cifar):
// a 3x3 stem instead of 7x7 + max-pool, so 32x32 inputs keep their resolution in stage 1.
#include <cstdint>
#include <memory>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::models {

/// Stem: Conv2d(3, 64, 3, pad 1, no bias), BatchNorm2d, ReLU. Four stages of two BasicBlocks
/// (64, 128, 256, 512 channels; first block of stages 2-4 has stride 2). BasicBlock: conv3x3 ->
/// BN -> ReLU -> conv3x3 -> BN, plus the shortcut (identity, or Conv2d 1x1 stride s + BN when the
/// shape changes), then ReLU. Then AdaptiveAvgPool2d(1), Flatten, Linear(512, num_classes).
/// x (N, 3, H, W) -> logits (N, num_classes). 11,173,962 parameters for 10 classes.
/// State-dict names follow PyTorch's torchvision-style layout ("layer1.0.conv1.weight",
/// "layer1.0.shortcut.0.weight", "fc.weight").
std::shared_ptr<layers::Module> resnet18(int64_t num_classes = 10, Generator& gen = default_generator());

}  // namespace ember::models
