// DataParallel's overhead: one mnist_cnn training step (forward, cross-entropy, backward, SGD) on a
// fixed batch of 64, by the plain module and by parallel::DataParallel over two replicas of one
// device, {cuda:0, cuda:0} on a GPU (the figure) or {cpu, cpu} here, measured in the same
// run, alternating. The replicas split the batch, so on one device the work is the same and the
// difference is DataParallel's cost: parameter broadcast, scatter, gather, replica threads and the
// gradient reduction.
//
//   bench_data_parallel [--device cpu|cuda:0] [--quick]
//
// Built-in check: both paths end with equal parameters after the same steps (exit 1 if not).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "bench_util.h"

using namespace ember;

namespace {

struct Setup {
  std::shared_ptr<layers::Module> model;
  std::shared_ptr<layers::Module> net;  // model, or model in DataParallel
  std::unique_ptr<optim::SGD> opt;
};

Setup make(Device dev, bool data_parallel) {
  Generator gen(7);
  Setup s;
  s.model = models::mnist_cnn(gen);
  s.model->to(dev);
  s.model->eval();  // no dropout: both paths compute the same function
  s.net = data_parallel ? std::make_shared<parallel::DataParallel>(s.model, std::vector<Device>{dev, dev}) : s.model;
  s.opt = std::make_unique<optim::SGD>(s.model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  return s;
}

void step(Setup& s, const Tensor& x, const Tensor& y) {
  Tensor loss = layers::cross_entropy(s.net->forward(x), y);
  s.opt->zero_grad();
  loss.backward();
  s.opt->step();
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  Device dev = cuda_available() ? Device::cuda(0) : Device::cpu();
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--device") == 0) dev = Device(argv[i + 1]);
  dev.validate();
  Generator gen(3);
  const Tensor x = randn({64, 1, 28, 28}, {.device = dev}, gen);
  std::vector<int64_t> labels;
  for (int i = 0; i < 64; ++i) labels.push_back(i % 10);
  const Tensor y = from_vector(labels, {64}).to(dev);

  Setup plain = make(dev, false), dp = make(dev, true);
  const int reps = quick ? 3 : 30;
  auto timed = [&](Setup& s) {
    return bench::median_seconds(
        [&] {
          step(s, x, y);
          synchronize(dev);
        },
        reps);
  };
  double t_plain = 0, t_dp = 0;
  for (int round = 0; round < (quick ? 1 : 3); ++round) {  // alternating rounds
    t_plain += timed(plain);
    t_dp += timed(dp);
  }
  // Both took the same number of steps on the same batch: the parameters must agree.
  double worst = 0;
  const auto a = plain.model->parameters(), b = dp.model->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]) / (1 + std::abs(va[k])));
  }
  std::printf("mnist_cnn training step, batch 64, on %s (%d threads); median of %d steps, %d rounds\n",
              dev.str().c_str(), num_threads(), reps, quick ? 1 : 3);
  std::printf("  plain module                  %8.2f ms\n", 1e3 * t_plain / (quick ? 1 : 3));
  std::printf("  DataParallel {%s, %s}  %8.2f ms   (%+.1f%%)\n", dev.str().c_str(), dev.str().c_str(),
              1e3 * t_dp / (quick ? 1 : 3), 100 * (t_dp / t_plain - 1));
  std::printf("  parameters after the same steps: largest relative difference %.2e\n", worst);
  if (!(worst < 1e-3)) {
    std::printf("FAILED: DataParallel's parameters differ from the plain module's\n");
    return 1;
  }
  return 0;
}
