// The small VGG-style CIFAR CNN.
//
// State-dict names: features.{0,3,7,10,14,17}.weight (the six convs, no bias),
// features.{1,4,8,11,15,18}.* (their BatchNorms), classifier.2.{weight,bias} (Linear 2048 -> 256),
// classifier.5.{weight,bias} (Linear 256 -> num_classes). Children of `features`, per stage s
// (base 7s): conv, bn, relu, conv, bn, relu, max-pool; of `classifier`: 0 Flatten, 1 Dropout,
// 2 Linear, 3 ReLU, 4 Dropout, 5 Linear.
#include <ember/models/cifar_cnn.h>

#include <ember/core/error.h>
#include <ember/layers/activation.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/pool.h>
#include <ember/layers/sequential.h>
#include <ember/models/blocks.h>

namespace ember::models {

std::shared_ptr<layers::Module> cifar_cnn(int64_t num_classes, double dropout, Generator& gen) {
  using namespace layers;
  EMBER_CHECK(num_classes >= 1, "cifar_cnn: num_classes must be >= 1, got ", num_classes);
  // The Dropout layer itself accepts p = 1 (PyTorch does too), but a classifier that zeroes all
  // its features cannot learn: reject it here, naming the value.
  EMBER_CHECK(dropout >= 0.0 && dropout < 1.0, "cifar_cnn: dropout must be in [0, 1), got ", dropout);
  // (N, 3, 32, 32) -> (N, 32, 16, 16) -> (N, 64, 8, 8) -> (N, 128, 4, 4).
  auto features = std::make_shared<Sequential>();
  int64_t in = 3;
  for (const int64_t c : {32, 64, 128}) {
    for (int rep = 0; rep < 2; ++rep) {
      const Conv2dOptions opts{.padding = 1, .bias = false};
      features->push_back(std::make_shared<Conv2d>(rep == 0 ? in : c, c, 3, opts, gen));
      features->push_back(std::make_shared<BatchNorm2d>(c));
      features->push_back(std::make_shared<ReLU>());
    }
    features->push_back(std::make_shared<MaxPool2d>(2));
    in = c;
  }
  // (N, 128, 4, 4) -> (N, 2048) -> (N, 256) -> (N, num_classes).
  constexpr int64_t kFlat = 128 * 4 * 4, kHidden = 256;
  auto classifier = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Flatten>(),
      std::make_shared<Dropout>(dropout, gen),
      std::make_shared<Linear>(kFlat, kHidden, true, gen),
      std::make_shared<ReLU>(),
      std::make_shared<Dropout>(dropout, gen),
      std::make_shared<Linear>(kHidden, num_classes, true, gen),
  });
  auto net = std::make_shared<NamedSequential>("CifarCNN");
  net->add("features", features);
  net->add("classifier", classifier);
  return net;
}

}  // namespace ember::models
