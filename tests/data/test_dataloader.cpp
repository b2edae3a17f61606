// DataLoader: coverage of each epoch, determinism for any worker count, drop_last, early break,
// resume mid-epoch, worker errors on the consumer thread, and resident mode equal to host mode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <ember/core/error.h>
#include <ember/data/dataloader.h>
#include <ember/data/synthetic.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using Catch::Contains;

namespace {

// n examples of (2, 5, 4) with random bytes; label i % 7.
data::TensorDataset make_dataset(int64_t n, uint64_t seed = 1) {
  Tensor images = empty({n, 2, 5, 4}, {.dtype = DType::u8});
  std::vector<double> v = random_values(images.numel(), seed, 0.0, 256.0);
  for (int64_t k = 0; k < images.numel(); ++k)
    images.data<uint8_t>()[k] = uint8_t(std::min(255.0, std::floor(v[size_t(k)])));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i % 7;
  return data::TensorDataset(images, from_vector(labels, {n}), 7, "Test");
}

struct Seen {
  std::vector<int64_t> indices;
  std::vector<double> input;
  std::vector<int64_t> target;
  std::vector<int64_t> sizes;
  bool operator==(const Seen&) const = default;
};

void record(Seen& s, const data::Batch& b) {
  s.indices.insert(s.indices.end(), b.indices.begin(), b.indices.end());
  std::vector<double> x = to_f64(b.input);
  s.input.insert(s.input.end(), x.begin(), x.end());
  std::vector<int64_t> t = b.target.to_vector<int64_t>();
  s.target.insert(s.target.end(), t.begin(), t.end());
  s.sizes.push_back(b.size());
}

Seen run_epochs(data::DataLoader& loader, int epochs) {
  Seen s;
  for (int e = 0; e < epochs; ++e)
    for (auto& batch : loader) record(s, batch);
  return s;
}

const data::Compose kAugment(data::RandomCrop(5, 4, 1), data::RandomHorizontalFlip(0.5),
                             data::Normalize({0.5f, 0.4f}, {0.25f, 0.3f}));

}  // namespace

TEST_CASE("DataLoader: every example exactly once per epoch, batches match the dataset", "[cpu][data]") {
  auto ds = make_dataset(103);
  for (int workers : {0, 2}) {
    INFO("workers " << workers);
    data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .workers = workers, .seed = 5});
    CHECK(loader.len() == 11);
    CHECK(loader.num_examples() == 103);
    std::vector<int64_t> first_order;
    for (int epoch = 0; epoch < 2; ++epoch) {
      CHECK(loader.epoch() == epoch);
      std::vector<int64_t> all;
      int64_t batches = 0;
      for (auto& batch : loader) {
        ++batches;
        REQUIRE(batch.input.sizes() == Shape{batch.size(), 2, 5, 4});
        REQUIRE(batch.input.dtype() == DType::f32);
        REQUIRE(batch.target.dtype() == DType::i64);
        CHECK(batch.size() == (batches == 11 ? 3 : 10));
        std::vector<double> x = to_f64(batch.input);
        std::vector<int64_t> t = batch.target.to_vector<int64_t>();
        for (int64_t b = 0; b < batch.size(); ++b) {
          int64_t i = batch.indices[size_t(b)];
          REQUIRE(t[size_t(b)] == i % 7);
          const uint8_t* px = ds.images().data<uint8_t>() + i * 40;
          for (int64_t k = 0; k < 40; ++k) REQUIRE(x[size_t(b * 40 + k)] == Approx(px[k] / 255.0).epsilon(1e-6));
        }
        all.insert(all.end(), batch.indices.begin(), batch.indices.end());
      }
      CHECK(batches == 11);
      std::vector<int64_t> sorted = all;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < 103; ++i) REQUIRE(sorted[size_t(i)] == i);
      if (epoch == 0) first_order = all;
      else CHECK(all != first_order);  // a new order each epoch
    }
    CHECK(loader.epoch() == 2);
  }
  // Without shuffle: dataset order.
  data::DataLoader seq(ds, {.batch_size = 50});
  Seen s = run_epochs(seq, 1);
  for (int64_t i = 0; i < 103; ++i) REQUIRE(s.indices[size_t(i)] == i);
  CHECK(s.sizes == std::vector<int64_t>{50, 50, 3});
}

namespace {
// Examples take uneven time (0..4 ms), so batches finish out of order across workers.
class Slow : public data::TensorDataset {
 public:
  explicit Slow(data::TensorDataset base) : data::TensorDataset(base) {}
  data::Example get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds((i * 7) % 5 == 0 ? 4 : 0));
    return data::TensorDataset::get(i);
  }
};
}  // namespace

TEST_CASE("DataLoader: the same batches for 0, 1 and 3 workers (with augmentation)", "[cpu][data]") {
  Slow ds(make_dataset(77));
  Seen ref;
  for (int workers : {0, 1, 3}) {
    data::DataLoader loader(ds, {.batch_size = 8,
                                 .shuffle = true,
                                 .workers = workers,
                                 .seed = 9,
                                 .transform = kAugment,
                                 .prefetch = 1 + workers});
    Seen s = run_epochs(loader, 2);
    if (workers == 0) {
      ref = s;
      // The augmentation did something: inputs are not the raw /255 pixels.
      CHECK(std::any_of(ref.input.begin(), ref.input.end(), [](double v) { return v < 0; }));
    } else {
      CHECK(s == ref);
    }
  }
  // A different seed changes both order and augmentation.
  data::DataLoader other(ds, {.batch_size = 8, .shuffle = true, .seed = 10, .transform = kAugment});
  CHECK(run_epochs(other, 1).indices != std::vector<int64_t>(ref.indices.begin(), ref.indices.begin() + 77));
}

TEST_CASE("DataLoader: drop_last", "[cpu][data]") {
  auto ds = make_dataset(103);
  data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .workers = 2, .drop_last = true});
  CHECK(loader.len() == 10);
  Seen s = run_epochs(loader, 1);
  CHECK(s.sizes == std::vector<int64_t>(10, 10));
  std::vector<int64_t> sorted = s.indices;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no repeats
  CHECK(loader.epoch() == 1);
  data::DataLoader tiny(make_dataset(3), {.batch_size = 10, .drop_last = true});
  CHECK(tiny.len() == 0);
  CHECK(run_epochs(tiny, 1).sizes.empty());
}

TEST_CASE("DataLoader: early break shuts down cleanly and the next loop continues the epoch", "[cpu][data]") {
  auto ds = make_dataset(60);
  data::DataLoader whole(ds, {.batch_size = 6, .shuffle = true, .seed = 3});
  Seen uninterrupted = run_epochs(whole, 2);

  data::DataLoader loader(ds, {.batch_size = 6, .shuffle = true, .workers = 3, .seed = 3, .prefetch = 2});
  Seen pieces;
  auto t0 = std::chrono::steady_clock::now();
  int taken = 0;
  for (auto& batch : loader) {
    record(pieces, batch);
    if (++taken == 2) break;  // workers are mid-flight with later batches
  }
  CHECK(loader.epoch() == 0);
  CHECK(loader.sampler().position() == 12);
  // Many short-lived passes: each joins its workers (a hang or leak would show here).
  for (int k = 0; k < 5; ++k) {
    for (auto& batch : loader) {
      record(pieces, batch);
      break;
    }
  }
  CHECK(loader.sampler().position() == 42);
  for (int e = 0; e < 2; ++e)
    for (auto& batch : loader) record(pieces, batch);  // rest of epoch 0, then epoch 1
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  CHECK(pieces == uninterrupted);
  CHECK(loader.epoch() == 2);
}

TEST_CASE("DataLoader: state_dict resumes mid-epoch exactly", "[cpu][data]") {
  auto ds = make_dataset(50);
  data::DataLoader::Options opts{.batch_size = 7, .shuffle = true, .workers = 2, .seed = 11, .transform = kAugment};
  data::DataLoader whole(ds, opts);
  Seen uninterrupted = run_epochs(whole, 3);

  Seen resumed;
  StateDict saved;
  {
    data::DataLoader first(ds, opts);
    for (auto& batch : first) record(resumed, batch);  // epoch 0
    int k = 0;
    for (auto& batch : first) {
      record(resumed, batch);
      if (++k == 4) {
        saved = first.state_dict();  // "after batch 4 of epoch 1", taken inside the loop
        break;
      }
    }
  }  // the first run dies here
  CHECK(saved.at("epoch").item<int64_t>() == 1);
  CHECK(saved.at("position").item<int64_t>() == 28);
  data::DataLoader second(ds, opts);
  second.load_state_dict(saved);
  for (int e = 0; e < 2; ++e)
    for (auto& batch : second) record(resumed, batch);
  CHECK(resumed == uninterrupted);
  // A loader with another seed refuses the state.
  data::DataLoader::Options other = opts;
  other.seed = 12;
  data::DataLoader third(ds, other);
  CHECK_THROWS_WITH(third.load_state_dict(saved), Contains("seed"));
}

namespace {
// Throws for one index; counts calls to check that workers stop.
class Faulty : public data::TensorDataset {
 public:
  Faulty(data::TensorDataset base, int64_t bad) : data::TensorDataset(base), bad_(bad) {}
  data::Example get(int64_t i) const override {
    if (i == bad_) EMBER_FAIL("cannot decode example ", i);
    return data::TensorDataset::get(i);
  }

 private:
  int64_t bad_;
};
}  // namespace

TEST_CASE("DataLoader: a worker's exception is rethrown on the consumer, in batch order", "[cpu][data]") {
  Faulty ds(make_dataset(40), 23);
  for (int workers : {0, 1, 3}) {
    INFO("workers " << workers);
    data::DataLoader loader(ds, {.batch_size = 5, .workers = workers});
    int64_t good = 0;
    CHECK_THROWS_WITH(
        [&] {
          for (auto& batch : loader) good += batch.size();
        }(),
        Contains("cannot decode example 23"));
    CHECK(good == 20);  // batches 0..3 arrived, batch 4 (examples 20..24) failed
    CHECK(loader.sampler().position() == 20);
    CHECK(loader.epoch() == 0);
    // The loader is usable again (no pass left running); it fails at the same batch.
    CHECK_THROWS_WITH(
        [&] {
          for (auto& batch : loader) (void)batch;
        }(),
        Contains("cannot decode example 23"));
  }
}

TEST_CASE("DataLoader: one pass at a time, option errors, custom sampler", "[cpu][data]") {
  auto ds = make_dataset(20);
  data::DataLoader loader(ds, {.batch_size = 4, .workers = 1});
  {
    auto it = loader.begin();
    CHECK_THROWS_WITH(loader.begin(), Contains("already running"));
  }
  CHECK_NOTHROW(loader.begin());
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 0}), Contains("batch_size > 0"));
  CHECK_THROWS_WITH(data::DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<data::SequentialSampler>(20)}),
                    Contains("custom sampler"));
  // A custom sampler decides the order.
  struct Reverse : data::Sampler {
    int64_t size() const override { return 20; }
    std::vector<int64_t> indices(int64_t) const override {
      std::vector<int64_t> v(20);
      for (int64_t i = 0; i < 20; ++i) v[size_t(i)] = 19 - i;
      return v;
    }
    std::string name() const override { return "Reverse"; }
  };
  data::DataLoader rev(ds, {.batch_size = 8, .sampler = std::make_shared<Reverse>()});
  Seen s = run_epochs(rev, 1);
  CHECK(s.indices.front() == 19);
  CHECK(s.indices.back() == 0);
  // Resident mode needs storage.
  struct NoStorage : data::Dataset {
    int64_t size() const override { return 1; }
    data::Example get(int64_t) const override { return {zeros({1, 2, 2}), 0}; }
    Shape image_shape() const override { return {1, 2, 2}; }
    int64_t num_classes() const override { return 1; }
  };
  CHECK_THROWS_WITH(data::DataLoader(NoStorage(), {.resident = true}), Contains("storage()"));
  // A user dataset without storage works in host mode.
  data::DataLoader plain(NoStorage(), {.batch_size = 2});
  CHECK(run_epochs(plain, 1).sizes == std::vector<int64_t>{1});
}

TEST_CASE("DataLoader: resident mode gives the host mode's batches", "[cpu][data]") {
  auto ds = make_dataset(45);
  for (bool augment : {false, true}) {
    INFO("augment " << augment);
    data::DataLoader::Options opts{.batch_size = 8, .shuffle = true, .workers = 2, .seed = 4};
    if (augment) opts.transform = kAugment;
    data::DataLoader host(ds, opts);
    opts.resident = true;
    data::DataLoader resident(ds, opts);
    Seen a = run_epochs(host, 2), b = run_epochs(resident, 2);
    CHECK(a.indices == b.indices);
    CHECK(a.target == b.target);
    CHECK(a.sizes == b.sizes);
    REQUIRE(a.input.size() == b.input.size());
    for (size_t k = 0; k < a.input.size(); ++k) REQUIRE(b.input[k] == Approx(a.input[k]).epsilon(1e-6).margin(1e-6));
  }
  // Resident over a Subset gathers the storage.
  data::Subset sub(ds, {44, 0, 7});
  data::DataLoader r(sub, {.batch_size = 2, .resident = true});
  Seen s = run_epochs(r, 1);
  CHECK(s.indices == std::vector<int64_t>{0, 1, 2});
  CHECK(s.target == std::vector<int64_t>{44 % 7, 0, 0});
  CHECK(s.input[0] == Approx(ds.images().data<uint8_t>()[44 * 40] / 255.0).epsilon(1e-6));
}

TEST_CASE("Subset, take and Synthetic", "[cpu][data]") {
  auto ds = make_dataset(10);
  data::Subset sub(ds, {3, 3, 9});
  CHECK(sub.size() == 3);
  CHECK(sub.get(2).label == 9 % 7);
  CHECK_THROWS_WITH(data::Subset(ds, {10}), Contains("index 10") && Contains("[0, 10)"));
  CHECK(data::take(ds, 4).size() == 4);
  CHECK(data::take(ds, 40).size() == 10);

  data::Synthetic a(300, {3, 4, 5}, 6, 1), b(300, {3, 4, 5}, 6, 1), c(300, {3, 4, 5}, 6, 2);
  CHECK(a.image_shape() == Shape{3, 4, 5});
  CHECK(a.num_classes() == 6);
  CHECK(std::memcmp(a.images().data_ptr(), b.images().data_ptr(), 300 * 60) == 0);
  CHECK(a.labels().to_vector<int64_t>() == b.labels().to_vector<int64_t>());
  CHECK(std::memcmp(a.images().data_ptr(), c.images().data_ptr(), 300 * 60) != 0);
  // Learnable: the nearest class mean (computed on the first half) labels the second half.
  std::vector<std::vector<double>> mean(6, std::vector<double>(60, 0.0));
  std::vector<int> count(6, 0);
  const uint8_t* px = a.images().data<uint8_t>();
  const int64_t* l = a.labels().data<int64_t>();
  for (int64_t i = 0; i < 150; ++i) {
    REQUIRE(l[i] >= 0);
    REQUIRE(l[i] < 6);
    ++count[size_t(l[i])];
    for (int k = 0; k < 60; ++k) mean[size_t(l[i])][size_t(k)] += px[i * 60 + k];
  }
  for (int c6 = 0; c6 < 6; ++c6) {
    REQUIRE(count[size_t(c6)] > 0);
    for (double& m : mean[size_t(c6)]) m /= count[size_t(c6)];
  }
  int correct = 0;
  for (int64_t i = 150; i < 300; ++i) {
    int best = 0;
    double best_d = 1e300;
    for (int c6 = 0; c6 < 6; ++c6) {
      double d = 0;
      for (int k = 0; k < 60; ++k) d += std::pow(px[i * 60 + k] - mean[size_t(c6)][size_t(k)], 2);
      if (d < best_d) best_d = d, best = c6;
    }
    correct += best == l[i];
  }
  CHECK(correct > 140);
}
