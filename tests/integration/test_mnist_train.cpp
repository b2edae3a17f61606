// Trains models::mnist_cnn end to end on a small slice of Fashion-MNIST (the files of the Debian
// package dataset-fashion-mnist) through the public API, as the mnist example does, and checks
// the held-out accuracy. Without the files the case reports itself skipped (EMBER_SKIP), never
// passed: a synthetic stand-in would check the pipeline, not what this case states.
//
// Stated targets, CPU, 2 epochs over 2,000 training images, batch 32, SGD(0.02, momentum 0.9):
//   Fashion-MNIST: test accuracy >= 0.70 on the first 1,000 test images (chance is 0.10; measured
//   0.766 on the development machine).
//   Time budget: 300 s for the whole test (measured 19 s on 2 cores shared with other work, 98 s
//   while a parallel build also ran there).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include <ember/ember.h>

#include "support/skip.h"

using namespace ember;

namespace {

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kTrain = 2000, kTest = 1000, kBatch = 32, kEpochs = 2;
constexpr double kBudgetSeconds = 300;

bool have_fashion_mnist() {
  std::error_code ec;
  return std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz", ec) &&
         std::filesystem::exists(std::string(kFashion) + "/t10k-images-idx3-ubyte.gz", ec);
}

double accuracy(layers::Module& model, data::DataLoader& loader) {
  model.eval();
  NoGradGuard no_grad;
  int64_t correct = 0, n = 0;
  for (auto& batch : loader) {
    correct += sum(eq(argmax(model.forward(batch.input), 1), batch.target)).item<int64_t>();
    n += batch.size();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

TEST_CASE("mnist_cnn learns a slice of Fashion-MNIST on the CPU", "[cpu][integration][slow]") {
  const auto t0 = std::chrono::steady_clock::now();
  if (!have_fashion_mnist())
    EMBER_SKIP("Fashion-MNIST not found in " << kFashion << " (Debian package dataset-fashion-mnist)");
  std::shared_ptr<const data::Dataset> train_set =
      std::make_shared<data::Subset>(data::take(data::Mnist(kFashion, data::Split::Train), kTrain));
  std::shared_ptr<const data::Dataset> test_set =
      std::make_shared<data::Subset>(data::take(data::Mnist(kFashion, data::Split::Test), kTest));
  const double target = 0.70;
  const data::Compose normalize(data::Normalize({0.2860f}, {0.3530f}));
  data::DataLoader train_loader(
      train_set, {.batch_size = kBatch, .shuffle = true, .workers = 1, .seed = 1, .transform = normalize});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .transform = normalize});

  manual_seed(1);
  auto model = models::mnist_cnn();
  optim::SGD opt(model->parameters(), {.lr = 0.02, .momentum = 0.9});
  const double before = accuracy(*model, test_loader);
  double first_loss = 0, last_loss = 0;
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    for (auto& batch : train_loader) {
      Tensor loss = layers::cross_entropy(model->forward(batch.input), batch.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      const float l = loss.item<float>();
      REQUIRE(std::isfinite(l));
      if (steps++ == 0) first_loss = l;
      last_loss = l;
    }
  }
  const double after = accuracy(*model, test_loader);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("mnist_cnn, " << kEpochs << " epochs on " << train_set->size() << " images: test accuracy " << before << " -> "
                     << after << " (target >= " << target << "), loss " << first_loss << " -> " << last_loss << ", "
                     << seconds << " s (budget " << kBudgetSeconds << " s)");
  CHECK(after >= target);
  CHECK(last_loss < first_loss);
  CHECK(seconds < kBudgetSeconds);
}
