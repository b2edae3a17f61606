// ResNet-18 for CIFAR (kuangliu/pytorch-cifar layout: 3x3 stem, no max-pool).
//
// State-dict names (in order): conv1.weight, bn1.{weight,bias,running_mean,running_var,
// num_batches_tracked}, layer{1-4}.{0,1}.{conv1,bn1,conv2,bn2}.*, layer{2-4}.0.shortcut.0.weight
// (1x1 projection) and layer{2-4}.0.shortcut.1.* (its BatchNorm), fc.weight, fc.bias.
// Parameter-free children (relu, avgpool, flatten) hold no state and only show in str().
#include <ember/models/resnet.h>

#include <string>

#include <ember/core/error.h>
#include <ember/layers/activation.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/linear.h>
#include <ember/layers/pool.h>
#include <ember/layers/sequential.h>
#include <ember/models/blocks.h>

namespace ember::models {

std::shared_ptr<layers::Module> resnet18(int64_t num_classes, Generator& gen) {
  using namespace layers;
  EMBER_CHECK(num_classes >= 1, "resnet18: num_classes must be >= 1, got ", num_classes);
  auto net = std::make_shared<NamedSequential>("ResNet");
  // Stem keeps the resolution: (N, 3, H, W) -> (N, 64, H, W).
  net->add("conv1", std::make_shared<Conv2d>(3, 64, 3, Conv2dOptions{.padding = 1, .bias = false}, gen));
  net->add("bn1", std::make_shared<BatchNorm2d>(64));
  net->add("relu", std::make_shared<ReLU>());
  // Stages: (N, 64, H, W) -> (N, 128, H/2, W/2) -> (N, 256, H/4, W/4) -> (N, 512, H/8, W/8)
  // (ceil divisions: a stride-2 3x3 conv with padding 1 gives (H - 1) / 2 + 1).
  constexpr int64_t kBlocksPerStage = 2;
  const int64_t widths[] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < kBlocksPerStage; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      layer->push_back(std::make_shared<BasicBlock>(in, widths[stage], stride, gen));
      in = widths[stage];
    }
    net->add("layer" + std::to_string(stage + 1), layer);
  }
  // Head: (N, 512, h, w) -> (N, 512, 1, 1) -> (N, 512) -> (N, num_classes).
  net->add("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  net->add("flatten", std::make_shared<Flatten>());
  net->add("fc", std::make_shared<Linear>(512, num_classes, true, gen));
  return net;
}

}  // namespace ember::models
