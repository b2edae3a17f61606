// DataLoader on a GPU: host mode (pinned buffers, asynchronous copies on a side stream) and
// resident mode must deliver the CPU loader's batches; the transfer helper against host values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include <ember/core/pinned.h>
#include <ember/core/stream.h>
#include <ember/data/dataloader.h>
#include <ember/data/synthetic.h>
#include <ember/data/transfer.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

struct Seen {
  std::vector<int64_t> indices, target;
  std::vector<double> input;
};

Seen run_epochs(data::DataLoader& loader, int epochs, Device expect) {
  Seen s;
  for (int e = 0; e < epochs; ++e) {
    for (auto& b : loader) {
      REQUIRE(b.input.device() == expect);
      REQUIRE(b.target.device() == expect);
      s.indices.insert(s.indices.end(), b.indices.begin(), b.indices.end());
      auto t = b.target.to_vector<int64_t>();
      s.target.insert(s.target.end(), t.begin(), t.end());
      auto x = to_f64(b.input);
      s.input.insert(s.input.end(), x.begin(), x.end());
    }
  }
  return s;
}

const data::Compose kAugment(data::RandomCrop(12, 2), data::RandomHorizontalFlip(0.5),
                             data::Normalize({0.5f}, {0.25f}));

}  // namespace

TEST_CASE("DataLoader on CUDA: host mode delivers the CPU loader's batches", "[cuda][data]") {
  data::Synthetic ds(301, {1, 12, 12}, 10, 3);
  data::DataLoader cpu(ds, {.batch_size = 32, .shuffle = true, .seed = 2, .transform = kAugment});
  Seen ref = run_epochs(cpu, 2, Device::cpu());
  for (int workers : {0, 3}) {
    for (bool pin : {true, false}) {
      INFO("workers " << workers << ", pin_memory " << pin);
      data::DataLoader gpu(ds, {.batch_size = 32,
                                .shuffle = true,
                                .workers = workers,
                                .device = kGpu,
                                .seed = 2,
                                .pin_memory = pin,
                                .transform = kAugment});
      Seen s = run_epochs(gpu, 2, kGpu);
      CHECK(s.indices == ref.indices);
      CHECK(s.target == ref.target);
      CHECK(s.input == ref.input);  // copies are exact
    }
  }
}

TEST_CASE("DataLoader on CUDA: resident mode equals host mode", "[cuda][data]") {
  data::Synthetic ds(257, {3, 12, 12}, 10, 4);
  for (bool augment : {false, true}) {
    INFO("augment " << augment);
    data::DataLoader::Options o{.batch_size = 64, .shuffle = true, .seed = 7};
    if (augment)
      o.transform = data::Compose(data::RandomCrop(12, 2), data::RandomHorizontalFlip(0.5),
                                  data::Normalize({0.5f, 0.4f, 0.3f}, {0.25f, 0.2f, 0.3f}));
    data::DataLoader cpu(ds, o);
    o.device = kGpu;
    o.resident = true;
    data::DataLoader gpu(ds, o);
    Seen a = run_epochs(cpu, 2, Device::cpu()), b = run_epochs(gpu, 2, kGpu);
    CHECK(a.indices == b.indices);
    CHECK(a.target == b.target);
    REQUIRE(a.input.size() == b.input.size());
    for (size_t k = 0; k < a.input.size(); ++k) REQUIRE(b.input[k] == Approx(a.input[k]).epsilon(1e-6).margin(1e-6));
  }
}

TEST_CASE("DataLoader on CUDA: early break with copies in flight, then resume", "[cuda][data]") {
  data::Synthetic ds(200, {1, 8, 8}, 4, 5);
  data::DataLoader whole(ds, {.batch_size = 16, .shuffle = true, .seed = 1});
  Seen ref = run_epochs(whole, 1, Device::cpu());
  data::DataLoader gpu(ds, {.batch_size = 16, .shuffle = true, .workers = 2, .device = kGpu, .seed = 1});
  Seen s;
  for (auto& b : gpu) {
    s.indices.insert(s.indices.end(), b.indices.begin(), b.indices.end());
    break;
  }
  Seen rest = run_epochs(gpu, 1, kGpu);
  s.indices.insert(s.indices.end(), rest.indices.begin(), rest.indices.end());
  CHECK(s.indices == ref.indices);
}

TEST_CASE("copy_to_device_async: pinned and pageable sources, side stream", "[cuda][data]") {
  Tensor pinned = ember::detail::pinned_empty({1000}, DType::f32, kGpu);
  CHECK(ember::detail::is_pinned(pinned));
  Tensor pageable = random_tensor({7, 13}, DType::f32, 3, -1.0, 1.0);
  CHECK_FALSE(ember::detail::is_pinned(pageable));
  for (int64_t k = 0; k < 1000; ++k) pinned.data<float>()[k] = float(k) * 0.5f;
  Stream side = new_stream(kGpu), main = current_stream(kGpu);
  std::vector<Tensor> outs;
  for (int rep = 0; rep < 20; ++rep) {
    outs.push_back(data::detail::copy_to_device_async(pinned, kGpu, main, side));
    outs.push_back(data::detail::copy_to_device_async(pageable, kGpu, main, main));
  }
  for (int rep = 0; rep < 20; ++rep) {
    CHECK(to_f64(outs[size_t(2 * rep)]) == to_f64(pinned));
    CHECK(to_f64(outs[size_t(2 * rep + 1)]) == to_f64(pageable));
  }
}
