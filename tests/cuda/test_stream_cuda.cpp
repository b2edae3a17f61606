// Host synchronizations and device checks on a GPU (core/stream.h, core/device_check.h): the
// stream layer counts every wait of the host, a device check does not wait and is reported at the
// next synchronization (or at the call in synchronous mode), and one training step of the MNIST
// CNN with the resident loader makes no host synchronization until its loss is read.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/device_check.h>
#include <ember/core/stream.h>
#include <ember/data/dataloader.h>
#include <ember/data/synthetic.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/index.h>
#include <ember/kernels/softmax.h>
#include <ember/layers/loss.h>
#include <ember/models/mnist_cnn.h>
#include <ember/optim/sgd.h>
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

/// Sets the synchronous mode of the device checks for a scope.
struct SyncChecks {
  bool prev;
  explicit SyncChecks(bool on) : prev(sync_device_checks()) { set_sync_device_checks(on); }
  ~SyncChecks() { set_sync_device_checks(prev); }
};

Tensor gpu_index(const std::vector<int64_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.device = kGpu});
}

}  // namespace

TEST_CASE("host_synchronizations counts every wait of the host for the GPU", "[cuda][stream]") {
  synchronize(kGpu);
  uint64_t n = host_synchronizations();
  const Stream s = new_stream(kGpu);
  s.synchronize();
  CHECK(host_synchronizations() == n + 1);
  synchronize(kGpu);
  CHECK(host_synchronizations() == n + 2);
  Event e;
  e.record(s);
  e.synchronize();
  CHECK(host_synchronizations() == n + 3);
  e.wait(Stream());  // the CPU "stream" waits by blocking the host
  CHECK(host_synchronizations() == n + 4);
  const Tensor t = ones({1000}, {.device = kGpu});
  n = host_synchronizations();
  CHECK(sum(t).item<float>() == 1000.0f);  // a copy to the host waits for the sum
  CHECK(host_synchronizations() > n);
}

TEST_CASE("a failed device check does not wait and is reported at the next synchronization", "[cuda][stream]") {
  SyncChecks async(false);
  const Tensor x = random_tensor({5, 3}, DType::f32, 1, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor bad = gpu_index({0, 7, 1});
  // Warm-up: the first device check on a device allocates and zeroes its claim words, which waits
  // once for the device (core/cuda/device_check_cuda.cpp, CudaCheckBackend::claims); after that no
  // check waits. Run alone, this test makes the process's first device check below otherwise.
  (void)kernels::index_select(x, 0, gpu_index({4, 0}));
  synchronize(kGpu);
  const uint64_t n = host_synchronizations();
  Tensor y;
  {
    DeviceCheckContext ctx("test batch 3");
    y = kernels::index_select(x, 0, bad);  // returns at once
  }
  CHECK(host_synchronizations() == n);
  const std::string msg = error_of([] { synchronize(kGpu); });
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("index_select (cuda): index 7 (entry 1 of the index) is out of range") &&
                      Catch::Contains("[0, 5)") && Catch::Contains("test batch 3") &&
                      Catch::Contains("of index_select (cuda)") && Catch::Contains("cuda:0"));
  CHECK_NOTHROW(synchronize(kGpu));  // reported once
  CHECK(device_check_registry().pending() == 0);
  // A good call right after is unaffected, and its result is right.
  const Tensor good = gpu_index({4, 0});
  check_close(kernels::index_select(x, 0, good),
              to_f64(kernels::index_select(x.to(Device::cpu()), 0, good.to(Device::cpu()))), 0, 0);

  // cross_entropy: the bad row's loss is NaN and the error comes with the loss.
  const Tensor logits = random_tensor({8, 10}, DType::f32, 2, -1.0, 1.0, Layout::Contiguous, kGpu);
  const kernels::CrossEntropyRows r = kernels::cross_entropy_rows(logits, gpu_index({0, 1, 2, 3, 4, 1234567, 6, 7}));
  CHECK_THAT(error_of([&] { (void)r.loss.to(Device::cpu()); }),
             Catch::Contains("target[5] = 1234567 is out of range [0, 10)") && Catch::Contains("[8, 10]"));
}

TEST_CASE("in synchronous mode a failed device check throws at the call", "[cuda][stream]") {
  SyncChecks sync(true);
  const Tensor x = random_tensor({5, 3}, DType::f32, 3, -1.0, 1.0, Layout::Contiguous, kGpu);
  const std::string msg = error_of([&] { kernels::index_select(x, 0, gpu_index({-2})); });
  CHECK_THAT(msg, Catch::Contains("index -2") && !Catch::Contains("next synchronization"));
  CHECK_NOTHROW(kernels::index_select(x, 0, gpu_index({2})));
}

TEST_CASE("a training step of mnist_cnn with the resident loader makes no host synchronization until the loss is read",
          "[cuda][stream][train]") {
  SyncChecks async(false);
  data::Synthetic ds(512, {1, 28, 28}, 10, 5);
  data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .device = kGpu, .resident = true});
  auto model = models::mnist_cnn();
  model->to(kGpu);
  model->train();
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  auto step = [&](const data::Batch& b) {
    Tensor loss = layers::cross_entropy(model->forward(b.input), b.target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto it = loader.begin();  // copies the epoch's order to the device (not part of a step)
  // Warm-up: the first steps allocate, choose cuDNN algorithms and set up the device checks.
  for (int i = 0; i < 2; ++i) {
    CHECK(std::isfinite(step(*it).item<float>()));
    ++it;
  }
  synchronize(kGpu);
  const uint64_t before = host_synchronizations();
  Tensor loss = step(*it);
  ++it;  // builds the next batch on the device: index_select (images, labels), cast, scale
  CHECK(host_synchronizations() == before);
  CHECK(std::isfinite(loss.item<float>()));
  CHECK(host_synchronizations() > before);  // reading the loss is the step's one wait
}
