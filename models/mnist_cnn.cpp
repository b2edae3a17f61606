#include <ember/models/mnist_cnn.h>

#include <ember/layers/activation.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/pool.h>
#include <ember/layers/sequential.h>

namespace ember::models {

std::shared_ptr<layers::Module> mnist_cnn(Generator& gen) {
  using namespace layers;
  // Shapes for a (N, 1, 28, 28) input: conv 3x3 -> (N, 32, 26, 26) -> (N, 64, 24, 24),
  // max-pool 2 -> (N, 64, 12, 12), flatten -> (N, 9216).
  return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(1, 32, 3, Conv2dOptions{}, gen),
      std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{}, gen),
      std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2),
      std::make_shared<Dropout>(0.25, gen),
      std::make_shared<Flatten>(),
      std::make_shared<Linear>(9216, 128, true, gen),
      std::make_shared<ReLU>(),
      std::make_shared<Dropout>(0.5, gen),
      std::make_shared<Linear>(128, 10, true, gen),
  });
}

}  // namespace ember::models
