// parallel::DataParallel on repeated CPU devices ({cpu, cpu}, {cpu, cpu, cpu}) against the same
// model run as one module: outputs, loss, every gradient and an SGD step agree; BatchNorm's running
// statistics come from replica 0's chunk; training-mode BatchNorm equals the module applied chunk by
// chunk; batches smaller than the device count; two forwards before one backward and retained
// graphs; grad mode and eval mode; state-dict names; and the errors.
//
// Tolerance: f32 throughout. The replicas compute each row exactly as the single module does
// (same kernels, same reduction lengths per row), so outputs agree to rounding; weight gradients
// are sums over rows split into per-replica partial sums, which changes the summation order: a
// relative error of a few f32 ulps of the largest magnitude, well inside kRel.
#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ember/autograd/autocast.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include <ember/optim/sgd.h>
#include <ember/parallel/comm_ops.h>
#include <ember/parallel/data_parallel.h>
#include "parallel/data_parallel_check.h"
#include "support/error_of.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::ModulePtr;
using ember::parallel::DataParallel;
using ember::testing::error_of;
using ember::testing::small_cnn;
using ember::testing::to_f64;

namespace {

constexpr double kRel = 1e-5;
const Device kCpu = Device::cpu();

Tensor batch(int64_t n, uint64_t seed) { return ember::testing::dp_batch(n, seed); }
Tensor targets(int64_t n) { return ember::testing::dp_targets(n); }
void check_near(const Tensor& got, const Tensor& ref) { ember::testing::check_near(got, ref, kRel); }
void check_grads_near(const layers::Module& got, const layers::Module& ref) {
  ember::testing::check_grads_near(got, ref, kRel);
}
void check_step_near(const Tensor& y, const Tensor& y_ref, const Tensor& t, const ModulePtr& model,
                     const ModulePtr& ref) {
  ember::testing::check_step_near(y, y_ref, t, *model, *ref, kRel);
}
std::vector<Device> cpus(size_t n) { return std::vector<Device>(n, kCpu); }

}  // namespace

TEST_CASE("DataParallel: outputs, loss and gradients equal one module on the whole batch",
          "[cpu][parallel][data_parallel]") {
  for (size_t n_dev : {size_t{2}, size_t{3}}) {
    for (bool bn : {false, true}) {
      INFO(n_dev << " devices, batchnorm " << bn);
      ModulePtr ref = small_cnn(bn), model = small_cnn(bn);
      // Eval mode for BatchNorm: the running statistics, not each replica's batch, normalize.
      if (bn) {
        ref->eval();
        model->eval();
      }
      auto dp = std::make_shared<DataParallel>(model, cpus(n_dev));
      const Tensor x = batch(7, 1), t = targets(7);
      check_step_near(dp->forward(x), ref->forward(x), t, model, ref);
    }
  }
}

TEST_CASE("DataParallel: an SGD step changes the parameters as for one module", "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(false), model = small_cnn(false);
  auto dp = std::make_shared<DataParallel>(model, cpus(3));
  optim::SGD opt_ref(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (uint64_t step = 0; step < 3; ++step) {
    const Tensor x = batch(8, 10 + step), t = targets(8);
    opt_ref.zero_grad();
    opt.zero_grad();
    layers::cross_entropy(ref->forward(x), t).backward();
    layers::cross_entropy(dp->forward(x), t).backward();
    opt_ref.step();
    opt.step();
  }
  const auto p = model->named_parameters(), r = ref->named_parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    INFO(r[i].first);
    check_near(p[i].second, r[i].second);
  }
}

TEST_CASE("DataParallel: a batch smaller than the device count uses fewer replicas", "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(false), model = small_cnn(false);
  auto dp = std::make_shared<DataParallel>(model, cpus(3));
  const Tensor x = batch(2, 2), t = targets(2);
  const Tensor y = dp->forward(x);
  CHECK(y.sizes() == Shape{2, 5});
  check_step_near(y, ref->forward(x), t, model, ref);
}

TEST_CASE("DataParallel: BatchNorm running statistics come from replica 0's chunk", "[cpu][parallel][data_parallel]") {
  ModulePtr chunk_ref = small_cnn(true), model = small_cnn(true);
  auto dp = std::make_shared<DataParallel>(model, cpus(3));
  const Tensor x = batch(7, 3);  // chunks of 3, 2, 2 rows
  dp->forward(x);
  chunk_ref->forward(x.narrow(0, 0, 3));
  const auto b = model->named_buffers(), r = chunk_ref->named_buffers();
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < b.size(); ++i) {
    INFO(r[i].first);
    check_near(b[i].second, r[i].second);
  }
  CHECK(b[2].second.item<int64_t>() == 1);
}

TEST_CASE("DataParallel: training-mode BatchNorm equals the module applied chunk by chunk",
          "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(true), model = small_cnn(true);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  const Tensor x = batch(6, 4), t = targets(6);
  const Tensor y = dp->forward(x);
  const Tensor y_ref = parallel::gather({ref->forward(x.narrow(0, 0, 3)), ref->forward(x.narrow(0, 3, 3))}, kCpu);
  check_step_near(y, y_ref, t, model, ref);
}

TEST_CASE("DataParallel: two forwards before one backward, and a retained graph", "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(false), model = small_cnn(false);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  const Tensor x1 = batch(5, 5), x2 = batch(4, 6);
  // The second forward must not disturb what the first one's graph recorded.
  const Tensor loss = layers::cross_entropy(dp->forward(x1), targets(5)) + sum(dp->forward(x2) * 0.5);
  const Tensor loss_ref = layers::cross_entropy(ref->forward(x1), targets(5)) + sum(ref->forward(x2) * 0.5);
  check_near(loss, loss_ref);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss_ref.backward(Tensor(), true);
  check_grads_near(*model, *ref);
  // A forward between two backward passes of a retained graph leaves that graph intact.
  dp->forward(batch(3, 7));
  loss.backward();
  loss_ref.backward();
  check_grads_near(*model, *ref);
}

namespace {

// Which module instances ran forward, and with which grad mode (replicas run on their threads).
struct ProbeLog {
  std::mutex mu;
  std::set<const void*> instances;
  std::vector<bool> grad_modes;
  std::set<const void*> take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(instances, {});
  }
};

// x (N, 3) -> x * w, w (3); logs itself.
class Probe : public layers::Module {
 public:
  explicit Probe(std::shared_ptr<ProbeLog> log) : log_(std::move(log)) { w_ = register_parameter("w", ones({3})); }
  Tensor forward(const Tensor& x) override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->instances.insert(this);
      log_->grad_modes.push_back(GradMode::is_enabled());
    }
    return x * w_;
  }
  std::string name() const override { return "Probe"; }
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Probe>(log_); }

 private:
  std::shared_ptr<ProbeLog> log_;
  Tensor w_;
};

}  // namespace

TEST_CASE("DataParallel: replicas are reused unless a graph still holds them", "[cpu][parallel][data_parallel]") {
  auto log = std::make_shared<ProbeLog>();
  auto probe = std::make_shared<Probe>(log);
  auto dp = std::make_shared<DataParallel>(probe, cpus(2));
  const Tensor x = ones({4, 3});
  const Tensor y1 = dp->forward(x);
  const std::set<const void*> first = log->take();
  CHECK(first.size() == 2);
  CHECK(first.count(probe.get()) == 0);  // replicas, never the wrapped module
  const Tensor y2 = dp->forward(x);  // y1's graph holds the replicas' parameters: a fresh set
  const std::set<const void*> second = log->take();
  CHECK(second.size() == 2);
  for (const void* p : second) CHECK(first.count(p) == 0);
  sum(y1 + y2).backward();
  dp->forward(x);  // backward released what the graphs held (y1 and y2 live on): the last set again
  CHECK(log->take() == second);
  {
    NoGradGuard no_grad;
    dp->forward(x);
  }
  CHECK(log->take() == second);
  CHECK(to_f64(probe->parameters()[0].grad()) == std::vector<double>(3, 8.0));
  const std::vector<bool> modes = log->grad_modes;
  REQUIRE(modes.size() == 8);
  CHECK(modes == std::vector<bool>{true, true, true, true, true, true, false, false});
}

TEST_CASE("DataParallel: grad mode and eval mode reach the replicas", "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(false, 7, 0.5), model = small_cnn(false, 7, 0.5);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  {
    NoGradGuard no_grad;
    CHECK_FALSE(dp->forward(batch(4, 8)).requires_grad());
  }
  CHECK(dp->forward(batch(4, 8)).requires_grad());
  dp->eval();  // Dropout off: equal to the single module
  ref->eval();
  check_near(dp->forward(batch(5, 9)), ref->forward(batch(5, 9)));
  dp->train();  // Dropout on, with each replica's own generator: still trains
  const RngState before = default_generator().state();
  layers::cross_entropy(dp->forward(batch(4, 10)), targets(4)).backward();
  CHECK(default_generator().state() == before);
  for (const Tensor& p : model->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("DataParallel: autocast reaches the replicas: their convolutions and matmuls run in bf16",
          "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(false), model = small_cnn(false);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  const Tensor x = batch(6, 11), t = targets(6);
  Tensor y, y_ref;
  {
    amp::Autocast guard(DeviceType::CPU, DType::bf16);
    y = dp->forward(x);
    // Each replica computes what the module computes on its chunk under the same guard.
    y_ref = parallel::gather({ref->forward(x.narrow(0, 0, 3)), ref->forward(x.narrow(0, 3, 3))}, kCpu);
  }
  // The last layer is a Linear: under autocast its output is bf16. A replica thread without the
  // caller's guard computed in f32.
  CHECK(y.dtype() == DType::bf16);
  REQUIRE(y_ref.dtype() == DType::bf16);
  // The same arithmetic on the same chunks; at most a rounding to bf16 (unit roundoff 2^-8) apart.
  ember::testing::check_near(y, y_ref, 0x1p-8);
  // Gradients come back to the f32 parameters.
  layers::cross_entropy(y, t).backward();
  for (const Tensor& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
  }
  // Without a guard the replicas compute in f32.
  CHECK(dp->forward(x).dtype() == DType::f32);
}

TEST_CASE("DataParallel: state dict names, accessors and the one-device path", "[cpu][parallel][data_parallel]") {
  ModulePtr model = small_cnn(false);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  CHECK(dp->module() == model);
  CHECK(dp->named_parameters().front().first == "module.0.weight");
  CHECK(dp->state_dict().count("module.4.bias") == 1);
  CHECK(dp->output_device() == kCpu);
  CHECK_THAT(dp->str(), Catch::StartsWith("DataParallel(") &&
                            Catch::Contains("devices={cpu, cpu}, output_device=cpu") &&
                            Catch::Contains("(module): Sequential("));

  ModulePtr ref = small_cnn(false), one = small_cnn(false);
  auto single = std::make_shared<DataParallel>(one, cpus(1));
  check_near(single->forward(batch(3, 11)), ref->forward(batch(3, 11)));
}

TEST_CASE("DataParallel: the wrapped module cast to float64 after wrapping", "[cpu][parallel][data_parallel]") {
  ModulePtr ref = small_cnn(true), model = small_cnn(true);
  auto dp = std::make_shared<DataParallel>(model, cpus(2));
  dp->forward(batch(4, 12));  // replicas in f32
  ref->forward(batch(4, 12).narrow(0, 0, 2));
  dp->to(DType::f64);
  ref->to(DType::f64);
  dp->eval();
  ref->eval();
  const Tensor x = batch(5, 13).to(DType::f64);
  const Tensor y = dp->forward(x);
  CHECK(y.dtype() == DType::f64);
  check_near(y, ref->forward(x));
}

TEST_CASE("DataParallel: errors name the input's shape and the devices", "[cpu][parallel][data_parallel]") {
  auto dp = std::make_shared<DataParallel>(small_cnn(false), cpus(2));
  CHECK_THAT(error_of([&] { dp->forward(Tensor()); }),
             Catch::Contains("undefined tensor") && Catch::Contains("{cpu, cpu}"));
  CHECK_THAT(error_of([&] { dp->forward(ones({})); }), Catch::Contains("shape []") && Catch::Contains("{cpu, cpu}"));
  CHECK_THAT(error_of([&] { dp->forward(ones({0, 1, 8, 8})); }), Catch::Contains("shape [0, 1, 8, 8]"));
  // A replica's own error comes back naming the replica.
  CHECK_THAT(error_of([&] {
               dp->forward(ones({4, 3, 8, 8}));
             }),
             Catch::Contains("replica 0 on cpu") && Catch::Contains("Conv2d"));
  // Devices of different kinds (built without validation, so this runs without a GPU).
  CHECK_THAT(error_of([] {
               DataParallel(small_cnn(false), {Device::cpu(), Device::cuda(0)});
             }),
             Catch::Contains("one kind") && Catch::Contains("{cpu, cuda:0}"));
  CHECK_THAT(error_of([] { DataParallel(nullptr, cpus(2)); }), Catch::Contains("null module"));
  if (!cuda_available()) {
    CHECK_THAT(error_of([] { DataParallel(small_cnn(false)); }), Catch::Contains("no devices were given"));
  }
}

TEST_CASE("DataParallel: a module without clone_structure fails at construction", "[cpu][parallel][data_parallel]") {
  class Plain : public Probe {  // Module's own clone_structure(): not implemented
   public:
    Plain() : Probe(std::make_shared<ProbeLog>()) {}
    std::string name() const override { return "PlainNet"; }
    std::shared_ptr<Module> clone_structure() const override { return Module::clone_structure(); }
  };
  CHECK_THAT(error_of([] { DataParallel(std::make_shared<Plain>(), cpus(2)); }),
             Catch::Contains("PlainNet: clone_structure() is not implemented"));
}
