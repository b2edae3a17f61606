#pragma once
// The MNIST / Fashion-MNIST CNN of PyTorch's examples/mnist.
#include <memory>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::models {

/// A Sequential of: 0 Conv2d(1, 32, 3), 1 ReLU, 2 Conv2d(32, 64, 3), 3 ReLU, 4 MaxPool2d(2),
/// 5 Dropout(0.25), 6 Flatten, 7 Linear(9216, 128), 8 ReLU, 9 Dropout(0.5), 10 Linear(128, 10).
/// x (N, 1, 28, 28) -> logits (N, 10). 1,199,882 parameters, initialised (PyTorch defaults) from
/// `gen`, which also feeds the dropout masks.
std::shared_ptr<layers::Module> mnist_cnn(Generator& gen = default_generator());

}  // namespace ember::models
