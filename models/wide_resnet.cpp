// Wide residual networks WRN-depth-widen for CIFAR (layout of the reference PyTorch port,
// xternalz/WideResNet-pytorch, with snake_case names).
//
// State-dict names (in order): conv1.weight (the 3 -> 16 stem), then for g in 1..3 and block
// i in 0..n-1: block{g}.layer.{i}.bn1.*, .conv1.weight, .bn2.*, .conv2.weight and, on blocks
// whose channels or stride change, .shortcut.weight (1x1 projection); then bn.* (the final
// BatchNorm2d), fc.weight, fc.bias. Parameter-free children (dropout inside blocks, relu,
// avgpool, flatten) hold no state and only show in str().
#include <ember/models/wide_resnet.h>

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

std::shared_ptr<layers::Module> wide_resnet(int64_t depth, int64_t widen, int64_t num_classes, double dropout,
                                            Generator& gen) {
  using namespace layers;
  // The paper's depth is 6n + 4: n blocks of two 3x3 convs in each of three groups, plus the
  // stem and head layers; any other depth has no block count.
  EMBER_CHECK(depth >= 10 && (depth - 4) % 6 == 0,
              "wide_resnet: depth must be 6k+4 with k >= 1 (10, 16, 22, 28, 40, ...), got ", depth);
  EMBER_CHECK(widen >= 1, "wide_resnet: widen must be >= 1, got ", widen);
  EMBER_CHECK(num_classes >= 1, "wide_resnet: num_classes must be >= 1, got ", num_classes);
  EMBER_CHECK(dropout >= 0.0 && dropout < 1.0, "wide_resnet: dropout must be in [0, 1), got ", dropout);
  const int64_t n = (depth - 4) / 6;
  const int64_t widths[] = {16 * widen, 32 * widen, 64 * widen};
  const int64_t strides[] = {1, 2, 2};

  auto net = std::make_shared<NamedSequential>("WideResNet");
  // Stem: (N, 3, H, W) -> (N, 16, H, W).
  net->add("conv1", std::make_shared<Conv2d>(3, 16, 3, Conv2dOptions{.padding = 1, .bias = false}, gen));
  // Groups: -> (N, 16k, H, W) -> (N, 32k, H/2, W/2) -> (N, 64k, H/4, W/4) (ceil divisions).
  // Each group is wrapped in a "NetworkBlock" with one child "layer" so the keys match the
  // reference port's ("block1.layer.0.bn1.weight") and its checkpoints map name for name.
  int64_t in = 16;
  for (int g = 0; g < 3; ++g) {
    auto layer = std::make_shared<Sequential>();
    for (int64_t i = 0; i < n; ++i) {
      layer->push_back(std::make_shared<PreActBlock>(in, widths[g], i == 0 ? strides[g] : 1, dropout, gen));
      in = widths[g];
    }
    auto group = std::make_shared<NamedSequential>("NetworkBlock");
    group->add("layer", layer);
    net->add("block" + std::to_string(g + 1), group);
  }
  // Head: the blocks are pre-activation, so the last sum is normalized and rectified here.
  // (N, 64k, h, w) -> (N, 64k, 1, 1) -> (N, 64k) -> (N, num_classes).
  net->add("bn", std::make_shared<BatchNorm2d>(widths[2]));
  net->add("relu", std::make_shared<ReLU>());
  net->add("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  net->add("flatten", std::make_shared<Flatten>());
  net->add("fc", std::make_shared<Linear>(widths[2], num_classes, true, gen));
  return net;
}

}  // namespace ember::models
