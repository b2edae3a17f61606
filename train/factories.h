#pragma once
// Builders that turn an ExperimentConfig into the objects of a training run.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/data/dataloader.h>
#include <ember/data/dataset.h>
#include <ember/layers/module.h>
#include <ember/optim/optimizer.h>
#include <ember/optim/schedule.h>
#include <ember/train/config.h>

namespace ember::train {

struct Datasets {
  std::shared_ptr<const data::Dataset> train, test;  // after limit_train / limit_test
  int64_t num_classes = 0;
  /// Per-channel normalization used by the loaders (the dataset's usual mean/std).
  std::vector<float> mean, std;
};

/// Checks that the dataset's files can be found before training starts (the names each reader
/// opens: data/mnist.cpp, data/cifar.cpp). A missing directory or file is an error naming it and
/// saying how to get the data (the Debian package for Fashion-MNIST, scripts/get-data.sh for
/// MNIST/CIFAR). Synthetic data always passes.
void check_data_available(const DataConfig& data);

/// Reads (or generates) the configured dataset; data errors name the directory and how to get
/// the data (see check_data_available).
Datasets make_datasets(const DataConfig& data, uint64_t seed);

/// Training loader: shuffled with `seed` (or in `sampler`'s order: a rank's DistributedSampler
/// share), normalization plus augmentation when data.augment (CIFAR-shaped images:
/// RandomCrop(32, 4) + RandomHorizontalFlip), data.workers, data.resident.
std::unique_ptr<data::DataLoader> make_train_loader(const Datasets& d, const DataConfig& data, Device device,
                                                    uint64_t seed, std::shared_ptr<data::Sampler> sampler = nullptr);
/// Test loader: in order (or `sampler`'s), normalization only, data.test_batch_size.
std::unique_ptr<data::DataLoader> make_test_loader(const Datasets& d, const DataConfig& data, Device device,
                                                   std::shared_ptr<data::Sampler> sampler = nullptr);

/// The configured model for `num_classes` classes, initialised from `gen`. A model that does
/// not fit the data (mnist_cnn on 3-channel images, the CIFAR models on 1-channel ones) is an
/// error naming model.name and the image shape.
std::shared_ptr<layers::Module> make_model(const ModelConfig& model, int64_t num_classes,
                                           const data::Dataset& train_set, Generator& gen);

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimConfig& optim, std::vector<Tensor> params);

/// The configured schedule, stepped once per optimizer step (epoch lengths times
/// steps_per_epoch), with the linear warm-up in front when schedule.warmup_epochs > 0. nullptr
/// for name "none" without warm-up.
std::unique_ptr<optim::LRScheduler> make_schedule(const ScheduleConfig& schedule, optim::Optimizer& opt,
                                                  int64_t steps_per_epoch, int64_t epochs);

}  // namespace ember::train
