// Builders from an ExperimentConfig to datasets, loaders, model, optimizer and schedule
// (train/factories.h).
#include <ember/train/factories.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/error.h>
#include <ember/data/cifar.h>
#include <ember/data/mnist.h>
#include <ember/data/synthetic.h>
#include <ember/data/transforms.h>
#include <ember/models/cifar_cnn.h>
#include <ember/models/mnist_cnn.h>
#include <ember/models/resnet.h>
#include <ember/models/wide_resnet.h>
#include <ember/optim/adam.h>
#include <ember/optim/sgd.h>

namespace ember::train {

namespace fs = std::filesystem;

namespace {

// Split sizes of the synthetic dataset before data.limit_train / data.limit_test (CIFAR-10's).
constexpr int64_t kSyntheticTrain = 50000, kSyntheticTest = 10000, kSyntheticClasses = 10;
// Padding of the CIFAR-style random crop (data.augment).
constexpr int64_t kCropPadding = 4;

int64_t limited(int64_t size, int64_t limit) { return limit > 0 ? std::min(size, limit) : size; }

std::vector<int64_t> iota_from(int64_t first, int64_t count) {
  std::vector<int64_t> idx(static_cast<size_t>(count));
  std::iota(idx.begin(), idx.end(), first);
  return idx;
}

// The first `n` examples of `base` (all of them, without a copy, when n covers it).
std::shared_ptr<const data::Dataset> first_n(std::shared_ptr<const data::Dataset> base, int64_t n) {
  if (n >= base->size()) return base;
  return std::make_shared<data::Subset>(std::move(base), iota_from(0, n));
}

// Per-channel mean and standard deviation of the pixels (in [0, 1]) of a u8 (N, C, H, W) image
// tensor. Computed from the data rather than taken from a table, because "mnist" stands for any
// MNIST-format set (MNIST, Fashion-MNIST, ...) and synthetic data has no published values. Plain
// sequential sums in double: deterministic, and exact enough for normalisation.
void channel_stats(const Tensor& images_u8, std::vector<float>& mean, std::vector<float>& std_out) {
  Tensor images = images_u8.contiguous();
  const int64_t n = images.size(0), c = images.size(1), hw = images.size(2) * images.size(3);
  const auto* px = images.data<uint8_t>();
  mean.assign(static_cast<size_t>(c), 0.5f);
  std_out.assign(static_cast<size_t>(c), 0.25f);
  if (n == 0 || hw == 0) return;
  for (int64_t ch = 0; ch < c; ++ch) {
    // Histogram first: 256 counters instead of N*H*W floating-point additions.
    std::vector<int64_t> hist(256, 0);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = px + (i * c + ch) * hw;
      for (int64_t k = 0; k < hw; ++k) ++hist[p[k]];
    }
    double count = 0, sum = 0, sum_sq = 0;
    for (int v = 0; v < 256; ++v) {
      const double x = v / 255.0, h = static_cast<double>(hist[static_cast<size_t>(v)]);
      count += h;
      sum += h * x;
      sum_sq += h * x * x;
    }
    const double m = sum / count, var = std::max(sum_sq / count - m * m, 0.0);
    mean[static_cast<size_t>(ch)] = static_cast<float>(m);
    // A constant channel would divide by zero: keep unit scale then.
    std_out[static_cast<size_t>(ch)] = var > 0 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
}

std::string how_to_get(DatasetKind dataset, const std::string& dir) {
  if (dataset == DatasetKind::mnist) {
    return "Fashion-MNIST: apt-get install dataset-fashion-mnist (installs /usr/share/datasets/fashion-mnist); "
           "MNIST: scripts/get-data.sh mnist " +
           dir;
  }
  return std::string("get it with: scripts/get-data.sh ") + config_name(dataset) + " " + dir;
}

bool has_file(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  return fs::is_regular_file(dir / name, ec) || fs::is_regular_file(dir / (name + ".gz"), ec);
}

}  // namespace

void check_data_available(const DataConfig& data) {
  if (data.dataset == DatasetKind::synthetic) return;
  const std::string dir = default_data_path(data);
  const std::string which =
      data.path.empty() ? std::string(" (the default for data.dataset ") + config_name(data.dataset) + ")" : "";
  std::error_code ec;
  EMBER_CHECK(fs::is_directory(dir, ec), "data.path: the data directory '", dir, "'", which, " does not exist; ",
              how_to_get(data.dataset, dir));
  // The files each reader opens (data/mnist.cpp, data/cifar.cpp), plain or gzip-compressed; the
  // CIFAR archives unpack into a subdirectory, which the readers also accept.
  fs::path root = dir;
  std::vector<std::string> names;
  if (data.dataset == DatasetKind::mnist) {
    names = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  } else if (data.dataset == DatasetKind::cifar10) {
    names = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
             "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    if (!has_file(root, names[0]) && fs::is_directory(root / "cifar-10-batches-bin", ec))
      root /= "cifar-10-batches-bin";
  } else {
    names = {"train.bin", "test.bin"};
    if (!has_file(root, names[0]) && fs::is_directory(root / "cifar-100-binary", ec)) root /= "cifar-100-binary";
  }
  std::string missing;
  for (const auto& n : names)
    if (!has_file(root, n)) missing += (missing.empty() ? "" : ", ") + n;
  EMBER_CHECK(missing.empty(), "data.path: the data directory '", root.string(), "'", which, " lacks ", missing,
              " (each plain or .gz) for data.dataset ", config_name(data.dataset), "; ", how_to_get(data.dataset, dir));
}

Datasets make_datasets(const DataConfig& data, uint64_t seed) {
  Datasets d;
  const std::string dir = default_data_path(data);
  Tensor stats_images;  // u8 images the normalisation statistics are computed from
  if (data.dataset == DatasetKind::synthetic) {
    // One generated sequence: the test examples follow the training ones, so both splits share the
    // class prototypes (a pure function of the seed) but no example. Only what the limits keep is
    // generated.
    const int64_t n_train = limited(kSyntheticTrain, data.limit_train);
    const int64_t n_test = limited(kSyntheticTest, data.limit_test);
    auto all = std::make_shared<data::Synthetic>(n_train + n_test, Shape{3, 32, 32}, kSyntheticClasses, seed);
    d.train = std::make_shared<data::Subset>(all, iota_from(0, n_train));
    d.test = std::make_shared<data::Subset>(all, iota_from(n_train, n_test));
    stats_images = all->images().narrow(0, 0, n_train);
    d.num_classes = kSyntheticClasses;
  } else {
    std::shared_ptr<data::TensorDataset> train, test;
    if (data.dataset == DatasetKind::mnist) {
      train = std::make_shared<data::Mnist>(dir, data::Split::Train);
      test = std::make_shared<data::Mnist>(dir, data::Split::Test);
    } else if (data.dataset == DatasetKind::cifar10) {
      train = std::make_shared<data::Cifar10>(dir, data::Split::Train);
      test = std::make_shared<data::Cifar10>(dir, data::Split::Test);
    } else {
      train = std::make_shared<data::Cifar100>(dir, data::Split::Train);
      test = std::make_shared<data::Cifar100>(dir, data::Split::Test);
    }
    EMBER_CHECK(train->image_shape() == test->image_shape(), "data.dataset ", config_name(data.dataset), " in ", dir,
                ": the training images are ", shape_str(train->image_shape()), " but the test images ",
                shape_str(test->image_shape()));
    // The whole training split, before limit_train, so a limit does not change the normalisation.
    stats_images = train->images();
    // Both splits' label ranges: a test label above every training label still needs an output.
    d.num_classes = std::max(train->num_classes(), test->num_classes());
    d.train = first_n(train, limited(train->size(), data.limit_train));
    d.test = first_n(test, limited(test->size(), data.limit_test));
  }
  EMBER_CHECK(d.train->size() > 0 && d.test->size() > 0, "data.dataset ", config_name(data.dataset),
              (dir.empty() ? std::string() : " in " + dir), ": expected non-empty splits, found ", d.train->size(),
              " training and ", d.test->size(), " test examples");
  channel_stats(stats_images, d.mean, d.std);
  return d;
}

std::unique_ptr<data::DataLoader> make_train_loader(const Datasets& d, const DataConfig& data, Device device,
                                                    uint64_t seed, std::shared_ptr<data::Sampler> sampler) {
  const Shape chw = d.train->image_shape();
  std::vector<std::shared_ptr<const data::Transform>> ts;
  // Crops and mirror images suit natural 3-channel images; flipping digits or garments
  // (MNIST-format, 1 channel) changes what they are, so those get no augmentation.
  if (data.augment && chw[0] == 3) {
    ts.push_back(std::make_shared<data::RandomCrop>(chw[1], chw[2], kCropPadding));
    ts.push_back(std::make_shared<data::RandomHorizontalFlip>());
  }
  ts.push_back(std::make_shared<data::Normalize>(d.mean, d.std));
  return std::make_unique<data::DataLoader>(d.train, data::DataLoaderOptions{.batch_size = data.batch_size,
                                                                             .shuffle = sampler == nullptr,
                                                                             .workers = static_cast<int>(data.workers),
                                                                             .device = device,
                                                                             .seed = seed,
                                                                             .resident = data.resident,
                                                                             .transform = data::Compose(std::move(ts)),
                                                                             .sampler = std::move(sampler)});
}

std::unique_ptr<data::DataLoader> make_test_loader(const Datasets& d, const DataConfig& data, Device device,
                                                   std::shared_ptr<data::Sampler> sampler) {
  return std::make_unique<data::DataLoader>(
      d.test, data::DataLoaderOptions{.batch_size = data.test_batch_size,
                                      .shuffle = false,
                                      .workers = static_cast<int>(data.workers),
                                      .device = device,
                                      .resident = data.resident,
                                      .transform = data::Compose(data::Normalize(d.mean, d.std)),
                                      .sampler = std::move(sampler)});
}

std::shared_ptr<layers::Module> make_model(const ModelConfig& model, int64_t num_classes,
                                           const data::Dataset& train_set, Generator& gen) {
  const Shape chw = train_set.image_shape();
  const std::string shape = shape_str(chw);
  const char* name = config_name(model.name);
  EMBER_CHECK(num_classes >= 1, "model.name ", name, ": expected at least one class, found ", num_classes);
  if (model.name == ModelKind::mnist_cnn) {
    EMBER_CHECK(chw == Shape({1, 28, 28}), "model.name mnist_cnn expects images of shape (1, 28, 28), but ",
                train_set.description(), " has ", shape, "; use cifar_cnn, resnet18 or wide_resnet for them");
    EMBER_CHECK(num_classes == 10, "model.name mnist_cnn has a fixed 10-class output, but the data has ", num_classes,
                " classes");
    return models::mnist_cnn(gen);
  }
  EMBER_CHECK(chw.size() == 3 && chw[0] == 3, "model.name ", name, " expects 3-channel images (3, H, W), but ",
              train_set.description(), " has ", shape, (chw.size() == 3 && chw[0] == 1 ? "; use mnist_cnn" : ""));
  if (model.name == ModelKind::cifar_cnn) {
    // Three 2x2 poolings in front of Linear(128*4*4, ...): only 32x32 inputs fit.
    EMBER_CHECK(chw[1] == 32 && chw[2] == 32, "model.name cifar_cnn expects images of shape (3, 32, 32), but ",
                train_set.description(), " has ", shape);
    return models::cifar_cnn(num_classes, model.dropout, gen);
  }
  if (model.name == ModelKind::resnet18) return models::resnet18(num_classes, gen);
  return models::wide_resnet(model.depth, model.widen, num_classes, model.dropout, gen);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimConfig& optim, std::vector<Tensor> params) {
  switch (optim.name) {
    case OptimizerKind::sgd:
      return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = optim.lr,
                                                                               .momentum = optim.momentum,
                                                                               .weight_decay = optim.weight_decay,
                                                                               .nesterov = optim.nesterov});
    case OptimizerKind::adam:
      return std::make_unique<optim::Adam>(
          std::move(params),
          optim::AdamOptions{
              .lr = optim.lr, .betas = optim.betas, .eps = optim.eps, .weight_decay = optim.weight_decay});
    case OptimizerKind::adamw:
      return std::make_unique<optim::AdamW>(
          std::move(params),
          optim::AdamWOptions{
              .lr = optim.lr, .betas = optim.betas, .eps = optim.eps, .weight_decay = optim.weight_decay});
  }
  EMBER_FAIL("make_optimizer: optim.name out of range (", static_cast<int>(optim.name), ")");
}

std::unique_ptr<optim::LRScheduler> make_schedule(const ScheduleConfig& schedule, optim::Optimizer& opt,
                                                  int64_t steps_per_epoch, int64_t epochs) {
  EMBER_CHECK(steps_per_epoch >= 1, "make_schedule: expected steps_per_epoch >= 1, found ", steps_per_epoch);
  EMBER_CHECK(epochs >= 1, "make_schedule: expected epochs >= 1, found ", epochs);
  const int64_t spe = steps_per_epoch;
  const int64_t warmup_steps = schedule.warmup_epochs * spe;
  EMBER_CHECK(schedule.warmup_epochs == 0 || schedule.name != ScheduleKind::onecycle,
              "schedule.warmup_epochs: onecycle has its own warm-up, expected 0, found ", schedule.warmup_epochs);
  // The schedule behind the warm-up runs on a clock shifted by the warm-up, so its length is
  // what is left of the run after it.
  const int64_t after_epochs = std::max<int64_t>(epochs - schedule.warmup_epochs, 1);

  std::unique_ptr<optim::LRScheduler> after;
  switch (schedule.name) {
    case ScheduleKind::none:
      break;
    case ScheduleKind::step:
      after = std::make_unique<optim::StepLR>(
          opt, optim::StepLROptions{.step_size = schedule.step_size * spe, .gamma = schedule.gamma});
      break;
    case ScheduleKind::multistep: {
      std::vector<int64_t> steps;
      for (int64_t m : schedule.milestones) steps.push_back(m * spe);
      after = std::make_unique<optim::MultiStepLR>(opt, std::move(steps), schedule.gamma);
      break;
    }
    case ScheduleKind::cosine: {
      const int64_t t_max = schedule.t_max > 0 ? schedule.t_max : after_epochs;
      after = std::make_unique<optim::CosineAnnealingLR>(
          opt, optim::CosineAnnealingOptions{.T_max = t_max * spe, .eta_min = schedule.eta_min});
      break;
    }
    case ScheduleKind::onecycle:
      return std::make_unique<optim::OneCycleLR>(
          opt, optim::OneCycleOptions{.max_lr = schedule.max_lr > 0 ? schedule.max_lr : opt.lr(),
                                      .total_steps = epochs * spe,
                                      .pct_start = schedule.pct_start});
  }
  if (warmup_steps > 0) return std::make_unique<optim::LinearWarmup>(opt, warmup_steps, std::move(after), 0.1);
  return after;
}

}  // namespace ember::train
