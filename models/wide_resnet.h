#pragma once
// Wide residual networks (Zagoruyko & Komodakis 2016), WRN-depth-widen for CIFAR.
#include <cstdint>
#include <memory>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::models {

/// WRN-depth-widen: Conv2d(3, 16, 3, pad 1), then three groups of n = (depth - 4) / 6
/// pre-activation blocks with 16*widen, 32*widen, 64*widen channels (strides 1, 2, 2), then
/// BatchNorm2d, ReLU, AdaptiveAvgPool2d(1), Flatten, Linear(64*widen, num_classes).
/// Block: BN -> ReLU -> conv3x3(stride s) -> BN -> ReLU -> Dropout(dropout) -> conv3x3, plus the
/// shortcut (identity, or a 1x1 conv stride s of the pre-activated input when channels or
/// stride change). Convs have no bias. x (N, 3, H, W) -> logits (N, num_classes).
/// depth must be 6k+4 with k >= 1, widen >= 1, dropout in [0, 1): otherwise an error naming the
/// value. WRN-28-10 has 36,479,194 parameters for 10 classes.
std::shared_ptr<layers::Module> wide_resnet(int64_t depth, int64_t widen, int64_t num_classes = 10,
                                            double dropout = 0.0, Generator& gen = default_generator());

}  // namespace ember::models
