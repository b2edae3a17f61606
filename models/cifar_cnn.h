#pragma once
// A small VGG-style CNN for CIFAR-sized images, the "first CIFAR model" of the tutorials.
#include <cstdint>
#include <memory>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::models {

/// Three stages of [Conv2d 3x3 pad 1, BatchNorm2d, ReLU] x 2 then MaxPool2d(2), with 32, 64 and
/// 128 channels, then Flatten, Dropout(dropout), Linear(128*4*4, 256), ReLU, Dropout(dropout),
/// Linear(256, num_classes). x (N, 3, 32, 32) -> logits (N, num_classes). Convs without bias
/// (BatchNorm follows). Initialised (PyTorch defaults) from `gen`, which also feeds dropout.
std::shared_ptr<layers::Module> cifar_cnn(int64_t num_classes = 10, double dropout = 0.25,
                                          Generator& gen = default_generator());

}  // namespace ember::models
