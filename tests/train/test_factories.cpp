// train/factories: datasets (synthetic and MNIST-format files) with limits and normalisation
// statistics, loaders (shuffle, normalisation, augmentation), models checked against the data,
// optimizers and schedules converted from epochs to steps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/data/synthetic.h>
#include <ember/kernels/factory.h>
#include <ember/train/factories.h>
#include "data/data_files.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using ember::testing::error_of;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// Creates a placeholder file (one NUL byte: the availability check looks at names only) at `rel`
// under `dir`, with its parent directories.
void touch(const TempDir& dir, const fs::path& rel) {
  fs::create_directories((dir.path() / rel).parent_path());
  std::ofstream(dir.path() / rel).put('\0');
}

// Float64 per-channel mean and standard deviation of the images of `d`, read through
// Dataset::get (f32 in [0, 1]): an independent path from the factory's histogram of u8 bytes.
void reference_stats(const data::Dataset& d, std::vector<double>& mean, std::vector<double>& std_out) {
  const Shape chw = d.image_shape();
  const int64_t c = chw[0], hw = chw[1] * chw[2];
  std::vector<double> s(static_cast<size_t>(c), 0.0), s2(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < d.size(); ++i) {
    Tensor img = d.get(i).image.contiguous();
    const float* p = img.data<float>();
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < hw; ++k) {
        const double x = p[ch * hw + k];
        s[static_cast<size_t>(ch)] += x;
        s2[static_cast<size_t>(ch)] += x * x;
      }
  }
  const double n = static_cast<double>(d.size() * hw);
  mean.resize(static_cast<size_t>(c));
  std_out.resize(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    mean[ch] = s[ch] / n;
    std_out[ch] = std::sqrt(s2[ch] / n - mean[ch] * mean[ch]);
  }
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// An MNIST-format directory: n_train / n_test 28x28 images of random bytes, labels 0..classes-1.
void write_mnist(const testing::TempDir& dir, uint32_t n_train, uint32_t n_test, int classes) {
  testing::write_file(dir.file("train-images-idx3-ubyte"),
                      testing::idx_images(n_train, 28, 28, testing::random_bytes(n_train * 784u, 1)));
  testing::write_file(dir.file("train-labels-idx1-ubyte"),
                      testing::idx_labels(n_train, testing::random_bytes(n_train, 2, classes)));
  testing::write_gz(dir.file("t10k-images-idx3-ubyte.gz"),
                    testing::idx_images(n_test, 28, 28, testing::random_bytes(n_test * 784u, 3)));
  testing::write_file(dir.file("t10k-labels-idx1-ubyte"),
                      testing::idx_labels(n_test, testing::random_bytes(n_test, 4, classes)));
}

// Normalisation stores float32 results of double sums: a few float ulps of the values (<= 1).
constexpr double kStatTol = 8 * FLT_EPSILON;

}  // namespace

TEST_CASE("factories: synthetic data is split into disjoint limited sets sharing the generator", "[cpu][train]") {
  DataConfig cfg;
  cfg.dataset = DatasetKind::synthetic;
  cfg.limit_train = 40;
  cfg.limit_test = 12;
  const Datasets d = make_datasets(cfg, 7);
  REQUIRE(d.train->size() == 40);
  REQUIRE(d.test->size() == 12);
  CHECK(d.num_classes == 10);
  CHECK(d.train->image_shape() == Shape({3, 32, 32}));
  // The test examples follow the training ones in one generated sequence of seed 7.
  const data::Synthetic whole(52, Shape{3, 32, 32}, 10, 7);
  for (int64_t i : {int64_t{0}, int64_t{39}}) {
    CHECK(values(d.train->get(i).image) == values(whole.get(i).image));
    CHECK(d.train->get(i).label == whole.get(i).label);
  }
  for (int64_t i : {int64_t{0}, int64_t{11}}) {
    CHECK(values(d.test->get(i).image) == values(whole.get(40 + i).image));
    CHECK(d.test->get(i).label == whole.get(40 + i).label);
  }
  // A different seed gives different data.
  const Datasets other = make_datasets(cfg, 8);
  CHECK(values(other.train->get(0).image) != values(d.train->get(0).image));

  std::vector<double> mean, sd;
  reference_stats(*d.train, mean, sd);
  REQUIRE(d.mean.size() == 3);
  REQUIRE(d.std.size() == 3);
  for (size_t c = 0; c < 3; ++c) {
    CHECK(d.mean[c] == Approx(mean[c]).margin(kStatTol));
    CHECK(d.std[c] == Approx(sd[c]).margin(kStatTol));
  }
}

TEST_CASE("factories: MNIST-format files with limits, statistics over the whole training split", "[cpu][train]") {
  testing::TempDir dir;
  write_mnist(dir, 30, 9, 7);
  DataConfig cfg;
  cfg.dataset = DatasetKind::mnist;
  cfg.path = dir.str();
  cfg.limit_train = 10;
  const Datasets d = make_datasets(cfg, 1);
  CHECK(d.train->size() == 10);
  CHECK(d.test->size() == 9);  // limit_test 0: all
  CHECK(d.train->image_shape() == Shape({1, 28, 28}));
  // Labels 0..6 drawn from fixed seeds over 39 examples: the largest label + 1 over both splits
  // (the limit does not hide a class), recomputed from the same draws write_mnist made.
  int64_t largest = 0;
  for (const auto& labels : {testing::random_bytes(30, 2, 7), testing::random_bytes(9, 4, 7)})
    for (const uint8_t l : labels) largest = std::max<int64_t>(largest, l);
  CHECK(d.num_classes == largest + 1);

  // Statistics over all 30 training images, not only the 10 the limit keeps.
  cfg.limit_train = 0;
  const Datasets full = make_datasets(cfg, 1);
  std::vector<double> mean, sd;
  reference_stats(*full.train, mean, sd);
  REQUIRE(d.mean.size() == 1);
  CHECK(d.mean[0] == Approx(mean[0]).margin(kStatTol));
  CHECK(d.std[0] == Approx(sd[0]).margin(kStatTol));
  CHECK(full.mean == d.mean);

  cfg.path = dir.file("missing");
  CHECK_THROWS_WITH(make_datasets(cfg, 1), Catch::Contains(dir.file("missing")));
}

TEST_CASE("factories: loaders normalise, shuffle by seed, and augment only 3-channel images", "[cpu][train]") {
  DataConfig cfg;
  cfg.dataset = DatasetKind::synthetic;
  cfg.limit_train = 48;
  cfg.limit_test = 20;
  cfg.batch_size = 16;
  cfg.test_batch_size = 8;
  cfg.workers = 0;
  const Datasets d = make_datasets(cfg, 3);

  auto first_batch = [](data::DataLoader& loader) {
    auto it = loader.begin();
    return *it;
  };
  // The expected input of one example: (x - mean[c]) / std[c], in float32 like the transform.
  auto normalized = [&](int64_t index) {
    std::vector<float> v = values(d.train->get(index).image);
    for (size_t k = 0; k < v.size(); ++k) {
      const size_t c = k / (32 * 32);
      v[k] = (v[k] - d.mean[c]) / d.std[c];
    }
    return v;
  };
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    // |x| <= about 1/std (~5): a few float32 ulps of that.
    for (size_t k = 0; k < a.size(); ++k)
      if (std::fabs(a[k] - b[k]) > 8 * FLT_EPSILON * (1 + std::fabs(b[k]))) return false;
    return true;
  };

  auto train = make_train_loader(d, cfg, Device::cpu(), 5);
  CHECK(train->len() == 3);
  const data::Batch b = first_batch(*train);
  REQUIRE(b.size() == 16);
  CHECK(b.input.sizes() == Shape({16, 3, 32, 32}));
  std::vector<int64_t> sequential(16);
  for (int64_t i = 0; i < 16; ++i) sequential[static_cast<size_t>(i)] = i;
  CHECK(b.indices != sequential);  // shuffled
  for (int64_t k : {int64_t{0}, int64_t{15}}) {
    const std::vector<float> got = values(b.input.narrow(0, k, 1));
    CHECK(close(got, normalized(b.indices[static_cast<size_t>(k)])));
  }
  // Same seed, same order; another seed, another order.
  auto again = make_train_loader(d, cfg, Device::cpu(), 5);
  CHECK(first_batch(*again).indices == b.indices);
  auto reseeded = make_train_loader(d, cfg, Device::cpu(), 6);
  CHECK(first_batch(*reseeded).indices != b.indices);

  // The test loader: in order, test_batch_size, normalisation with the training statistics.
  auto test = make_test_loader(d, cfg, Device::cpu());
  const data::Batch t = first_batch(*test);
  CHECK(t.indices == std::vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
  CHECK(test->len() == 3);

  SECTION("augment on CIFAR-shaped images: crops or flips change some inputs") {
    cfg.augment = true;
    auto aug = make_train_loader(d, cfg, Device::cpu(), 5);
    const data::Batch a = first_batch(*aug);
    REQUIRE(a.indices == b.indices);
    int changed = 0;
    for (int64_t k = 0; k < a.size(); ++k)
      changed += !close(values(a.input.narrow(0, k, 1)), normalized(a.indices[static_cast<size_t>(k)]));
    // Unchanged needs crop offset (4, 4) (1/81) and no flip (1/2): 16 of them at once is ~1e-34.
    CHECK(changed > 0);
  }
  SECTION("augment on 1-channel images does nothing") {
    testing::TempDir dir;
    write_mnist(dir, 16, 4, 10);
    DataConfig m;
    m.dataset = DatasetKind::mnist;
    m.path = dir.str();
    m.batch_size = 16;
    m.workers = 0;
    m.augment = true;
    const Datasets md = make_datasets(m, 1);
    auto loader = make_train_loader(md, m, Device::cpu(), 2);
    const data::Batch a = first_batch(*loader);
    for (int64_t k = 0; k < a.size(); ++k) {
      std::vector<float> want = values(md.train->get(a.indices[static_cast<size_t>(k)]).image);
      for (float& x : want) x = (x - md.mean[0]) / md.std[0];
      CHECK(close(values(a.input.narrow(0, k, 1)), want));
    }
  }
}

TEST_CASE("factories: models are checked against the image shape and class count", "[cpu][train]") {
  const data::Synthetic cifar_like(4, Shape{3, 32, 32}, 10, 1);
  const data::Synthetic mnist_like(4, Shape{1, 28, 28}, 10, 1);
  const data::Synthetic small_rgb(4, Shape{3, 16, 16}, 10, 1);
  ModelConfig m;

  m.name = ModelKind::mnist_cnn;
  Generator g1(9), g2(9);
  auto a = make_model(m, 10, mnist_like, g1);
  auto b = make_model(m, 10, mnist_like, g2);
  int64_t n = 0;
  for (const Tensor& p : a->parameters()) n += p.numel();
  CHECK(n == 1199882);
  // Initialised from the generator: the same seed gives the same weights.
  CHECK(values(a->parameters()[0]) == values(b->parameters()[0]));
  CHECK_THROWS_WITH(make_model(m, 10, cifar_like, g1),
                    Catch::Contains("mnist_cnn") && Catch::Contains("(1, 28, 28)") && Catch::Contains("3, 32, 32"));
  CHECK_THROWS_WITH(make_model(m, 100, mnist_like, g1), Catch::Contains("100 classes"));

  m.name = ModelKind::cifar_cnn;
  m.dropout = 0.0;
  auto c = make_model(m, 100, cifar_like, g1);
  c->eval();
  CHECK(c->forward(zeros({2, 3, 32, 32})).sizes() == Shape({2, 100}));
  CHECK_THROWS_WITH(make_model(m, 10, mnist_like, g1), Catch::Contains("cifar_cnn") && Catch::Contains("1, 28, 28"));
  CHECK_THROWS_WITH(make_model(m, 10, small_rgb, g1), Catch::Contains("(3, 32, 32)"));

  m.name = ModelKind::resnet18;
  CHECK_THROWS_WITH(make_model(m, 10, mnist_like, g1), Catch::Contains("resnet18") && Catch::Contains("3-channel"));
  m.name = ModelKind::wide_resnet;
  m.depth = 10;
  m.widen = 1;
  auto w = make_model(m, 7, small_rgb, g1);  // any H, W: adaptive pooling
  w->eval();
  CHECK(w->forward(zeros({1, 3, 16, 16})).sizes() == Shape({1, 7}));
}

TEST_CASE("factories: optimizers carry the configured hyperparameters", "[cpu][train]") {
  Tensor p = zeros({3});
  p.requires_grad_(true);
  OptimConfig o;
  o.name = OptimizerKind::sgd;
  o.lr = 0.25;
  o.momentum = 0.8;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  auto sgd = make_optimizer(o, {p});
  CHECK(sgd->name() == "SGD");
  CHECK(sgd->lr() == 0.25);
  CHECK(sgd->hyperparameter("momentum") == 0.8);
  CHECK(sgd->hyperparameter("nesterov") == 1.0);
  CHECK(sgd->hyperparameter("weight_decay") == 5e-4);
  CHECK(sgd->hyperparameter("dampening") == 0.0);

  o.name = OptimizerKind::adam;
  o.betas = {0.8, 0.99};
  o.eps = 1e-6;
  auto adam = make_optimizer(o, {p});
  CHECK(adam->name() == "Adam");
  CHECK(adam->hyperparameter("beta1") == 0.8);
  CHECK(adam->hyperparameter("beta2") == 0.99);
  CHECK(adam->hyperparameter("eps") == 1e-6);
  CHECK(adam->hyperparameter("weight_decay") == 5e-4);

  o.name = OptimizerKind::adamw;
  o.weight_decay = 0.05;
  auto adamw = make_optimizer(o, {p});
  CHECK(adamw->name() == "AdamW");
  CHECK(adamw->hyperparameter("weight_decay") == 0.05);
}

TEST_CASE("factories: schedules count optimizer steps and change at epoch boundaries", "[cpu][train]") {
  Tensor p = zeros({2});
  p.requires_grad_(true);
  OptimConfig o;
  o.lr = 0.4;
  auto opt = make_optimizer(o, {p});
  constexpr int64_t spe = 7, epochs = 10;
  ScheduleConfig s;

  SECTION("none") {
    CHECK(make_schedule(s, *opt, spe, epochs) == nullptr);
    s.warmup_epochs = 2;
    auto w = make_schedule(s, *opt, spe, epochs);
    REQUIRE(w != nullptr);
    CHECK(w->lr_at(0) == Approx(0.04));
    CHECK(w->lr_at(2 * spe) == Approx(0.4));
    CHECK(w->lr_at(epochs * spe) == Approx(0.4));
  }
  SECTION("step") {
    s.name = ScheduleKind::step;
    s.step_size = 3;
    s.gamma = 0.5;
    auto sch = make_schedule(s, *opt, spe, epochs);
    CHECK(sch->lr_at(3 * spe - 1) == Approx(0.4));  // the last step of epoch 3
    CHECK(sch->lr_at(3 * spe) == Approx(0.2));  // the first of epoch 4
    CHECK(sch->lr_at(6 * spe) == Approx(0.1));
  }
  SECTION("multistep") {
    s.name = ScheduleKind::multistep;
    s.milestones = {2, 5};
    s.gamma = 0.1;
    auto sch = make_schedule(s, *opt, spe, epochs);
    CHECK(sch->lr_at(2 * spe - 1) == Approx(0.4));
    CHECK(sch->lr_at(2 * spe) == Approx(0.04));
    CHECK(sch->lr_at(5 * spe) == Approx(0.004));
  }
  SECTION("cosine over the run, after the warm-up") {
    s.name = ScheduleKind::cosine;
    s.eta_min = 0.01;
    auto sch = make_schedule(s, *opt, spe, epochs);
    CHECK(sch->lr_at(0) == Approx(0.4));
    CHECK(sch->lr_at(epochs * spe / 2) == Approx((0.4 + 0.01) / 2));
    CHECK(sch->lr_at(epochs * spe) == Approx(0.01));
    s.warmup_epochs = 2;
    auto warm = make_schedule(s, *opt, spe, epochs);
    CHECK(warm->lr_at(0) == Approx(0.04));
    CHECK(warm->lr_at(2 * spe) == Approx(0.4));
    CHECK(warm->lr_at(epochs * spe) == Approx(0.01));  // the cosine still ends with the run
    s.t_max = 4;
    s.warmup_epochs = 0;
    CHECK(make_schedule(s, *opt, spe, epochs)->lr_at(4 * spe) == Approx(0.01));
  }
  SECTION("onecycle over the whole run") {
    s.name = ScheduleKind::onecycle;
    s.pct_start = 0.3;
    auto sch = make_schedule(s, *opt, spe, epochs);
    // PyTorch's phase ends: the peak at step 0.3 * 70 - 1, the minimum (max_lr / 25 / 1e4) at 69.
    CHECK(sch->lr_at(20) == Approx(0.4));  // max_lr 0: optim.lr
    CHECK(sch->lr_at(epochs * spe - 1) == Approx(0.4 / 25 / 1e4));
    CHECK_THROWS(sch->lr_at(epochs * spe + 1));  // exactly the run's steps
    s.max_lr = 1.0;
    CHECK(make_schedule(s, *opt, spe, epochs)->lr_at(20) == Approx(1.0));
    s.warmup_epochs = 1;
    CHECK_THROWS_WITH(make_schedule(s, *opt, spe, epochs), Catch::Contains("schedule.warmup_epochs"));
  }
}

TEST_CASE("factories: check_data_available finds the files or says how to get them", "[cpu]") {
  TempDir tmp;
  DataConfig c;
  SECTION("a missing directory is named with how to get the data") {
    c.path = (tmp.path() / "nowhere").string();
    std::string msg = error_of([&] { check_data_available(c); });
    CHECK(msg.find("data.path: the data directory '" + c.path + "' does not exist") != std::string::npos);
    CHECK(msg.find("apt-get install dataset-fashion-mnist (installs /usr/share/datasets/fashion-mnist)") !=
          std::string::npos);
    CHECK(msg.find("scripts/get-data.sh mnist " + c.path) != std::string::npos);
    c.dataset = DatasetKind::cifar10;
    msg = error_of([&] { check_data_available(c); });
    CHECK(msg.find("get it with: scripts/get-data.sh cifar10 " + c.path) != std::string::npos);
  }
  SECTION("mnist: a directory missing one file names that file only") {
    c.path = tmp.path().string();
    for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte"})
      touch(tmp, f);
    const std::string msg = error_of([&] { check_data_available(c); });
    CHECK(msg.find("lacks t10k-labels-idx1-ubyte (each plain or .gz) for data.dataset mnist") != std::string::npos);
    CHECK(msg.find("train-images") == std::string::npos);
    touch(tmp, "t10k-labels-idx1-ubyte.gz");
    CHECK_NOTHROW(check_data_available(c));  // empty placeholders: names are what is checked
  }
  SECTION("cifar10: directly or in cifar-10-batches-bin") {
    c.dataset = DatasetKind::cifar10;
    c.path = tmp.path().string();
    for (int i = 1; i <= 5; ++i) touch(tmp, "cifar-10-batches-bin/data_batch_" + std::to_string(i) + ".bin");
    std::string msg = error_of([&] { check_data_available(c); });
    CHECK(msg.find("cifar-10-batches-bin' lacks test_batch.bin") != std::string::npos);
    CHECK(msg.find("get it with: scripts/get-data.sh cifar10 " + c.path) != std::string::npos);
    touch(tmp, "cifar-10-batches-bin/test_batch.bin");
    CHECK_NOTHROW(check_data_available(c));
    c.path = (tmp.path() / "cifar-10-batches-bin").string();
    CHECK_NOTHROW(check_data_available(c));
  }
  SECTION("cifar100: train.bin and test.bin") {
    c.dataset = DatasetKind::cifar100;
    c.path = tmp.path().string();
    touch(tmp, "cifar-100-binary/test.bin");
    std::string msg = error_of([&] { check_data_available(c); });
    CHECK(msg.find("lacks train.bin for") == std::string::npos);  // the message carries the note on .gz
    CHECK(msg.find("lacks train.bin (each plain or .gz)") != std::string::npos);
    touch(tmp, "cifar-100-binary/train.bin");
    CHECK_NOTHROW(check_data_available(c));
  }
  SECTION("synthetic data needs no files") {
    c.dataset = DatasetKind::synthetic;
    c.path = (tmp.path() / "nowhere").string();
    CHECK_NOTHROW(check_data_available(c));
  }
}
