#pragma once
// The ResNet-18 (CIFAR) training step that bench_saved_memory and bench_cpu_resnet measure:
// models::resnet18() in a layout, SGD (lr 0.1, momentum 0.9, weight decay 5e-4), a fixed random
// batch of 3x32x32 images and labels i % 10. The peers (bench/peers/torch_saved.py,
// torch_cpu_resnet.py) build the same.
#include <memory>
#include <vector>

#include <ember/ember.h>

namespace ember::bench {

struct ResNetStep {
  std::shared_ptr<layers::Module> model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
};

inline ResNetStep resnet18_step(int64_t batch, MemoryFormat f) {
  manual_seed(3);
  ResNetStep s;
  s.model = models::resnet18();
  s.model->to(f);
  s.opt = std::make_unique<optim::SGD>(s.model->parameters(),
                                       optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
  s.x = randn({batch, 3, 32, 32}).contiguous(f);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  s.y = from_vector(labels, {batch});
  return s;
}

}  // namespace ember::bench
