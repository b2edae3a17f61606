// GPU training throughput beside PyTorch eager on the same GPU, in one run:
//   mnist_cnn training step (forward + cross-entropy + backward + SGD momentum) at batch 64 and 256;
//   one epoch of mnist_cnn at batch 64 over Fashion-MNIST (or 60000 generated images when the
//   files are missing) with the data resident on the GPU;
//   ResNet-18 (CIFAR variant) training step, f32, batch 128: images/s and peak memory.
// The peer is bench/peers/torch_gpu.py (same layers, shapes, batches, optimizer and step counts;
// TF32 off on both sides; cudnn.benchmark on, as ember searches cuDNN's algorithms).
//
// Timing: CUDA events around windows of back-to-back steps after a warm-up; the figure is the
// median window divided by its step count. The epoch is one event-timed pass after a warm-up epoch.
// Peak memory: ember's caching allocator's high-water mark of allocated bytes (and of reserved
// segments) over the timed steps, beside torch.cuda.max_memory_allocated/reserved over the same.
// Exits 77 when no GPU is usable. Flags: --quick (few steps), --data DIR.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ember/ember.h>

#include <ember/core/caching_allocator.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;
using ember::bench::peer_figure;

namespace {

void train_step(layers::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = layers::cross_entropy(model.forward(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
}

// Median milliseconds per call of fn over `reps` event-timed windows of `iters` calls.
template <typename Fn> double median_ms(Device dev, int iters, int reps, Fn&& fn) {
  for (int i = 0; i < 5; ++i) fn();
  synchronize(dev);
  Stream s = current_stream(dev);
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    Event e0, e1;
    e0.record(s);
    for (int i = 0; i < iters; ++i) fn();
    e1.record(s);
    e1.synchronize();
    ms.push_back(e0.elapsed_ms(e1) / iters);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

Tensor labels(int64_t n, Device dev) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  return from_vector(v, {n}, {.device = dev});
}

std::string ratio(double ember_value, const std::map<std::string, double>& peer, const std::string& key,
                  bool lower_is_better) {
  const auto it = peer.find(key);
  if (it == peer.end() || it->second <= 0) return "-";
  return fmt("%.2f", lower_is_better ? it->second / ember_value : ember_value / it->second);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::printf("bench_gpu_train: SKIPPED: no usable CUDA device (%s)\n",
                cuda_compiled() ? "CUDA build, but no GPU found" : "this build has no CUDA support");
    return 77;
  }
  const bool quick = bench::has_flag(argc, argv, "--quick");
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--data") data_dir = argv[i + 1];
  const Device dev = Device::cuda(0);
  const int steps = quick ? 5 : 50, reps = quick ? 3 : 5;
  std::printf("bench_gpu_train: %s, f32 (no TF32), median of %d event-timed windows\n", dev.str().c_str(), reps);

  // mnist_cnn step.
  double mnist_ms[2] = {0, 0};
  const int64_t batches[2] = {64, 256};
  for (int k = 0; k < 2; ++k) {
    manual_seed(3);
    auto model = models::mnist_cnn();
    model->to(dev);
    optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
    const Tensor x = randn({batches[k], 1, 28, 28}, {.device = dev}), y = labels(batches[k], dev);
    mnist_ms[k] = median_ms(dev, steps, reps, [&] { train_step(*model, opt, x, y); });
  }

  // One resident epoch at batch 64.
  std::shared_ptr<const data::Dataset> set;
  std::string what = "Fashion-MNIST";
  std::error_code ec;
  if (std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz", ec)) {
    set = std::make_shared<data::Mnist>(data_dir, data::Split::Train);
  } else {
    set = std::make_shared<data::Synthetic>(60000, Shape{1, 28, 28}, 10, 7);
    what = "generated";
  }
  if (quick) {
    std::vector<int64_t> first(64 * 20);
    for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int64_t>(i);
    set = std::make_shared<data::Subset>(set, std::move(first));
  }
  double epoch_s = 0;
  {
    manual_seed(3);
    auto model = models::mnist_cnn();
    model->to(dev);
    optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
    data::DataLoader loader(set, {.batch_size = 64,
                                  .shuffle = true,
                                  .device = dev,
                                  .seed = 1,
                                  .resident = true,
                                  .transform = data::Normalize({0.2860f}, {0.3530f})});
    for (auto& b : loader) train_step(*model, opt, b.input, b.target);  // warm-up epoch
    synchronize(dev);
    Stream s = current_stream(dev);
    Event e0, e1;
    e0.record(s);
    for (auto& b : loader) train_step(*model, opt, b.input, b.target);
    e1.record(s);
    e1.synchronize();
    epoch_s = e0.elapsed_ms(e1) / 1e3;
  }

  // ResNet-18, batch 128.
  double resnet_ms = 0;
  AllocatorStats mem;
  {
    manual_seed(3);
    auto model = models::resnet18();
    model->to(dev);
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
    const Tensor x = randn({128, 3, 32, 32}, {.device = dev}), y = labels(128, dev);
    train_step(*model, opt, x, y);
    synchronize(dev);
    cuda_caching_allocator(0).reset_peak();
    resnet_ms = median_ms(dev, quick ? 5 : 20, reps, [&] { train_step(*model, opt, x, y); });
    mem = cuda_caching_allocator(0).stats();
  }

  std::printf("\nPyTorch peer (bench/peers/torch_gpu.py train), same GPU, same run:\n");
  const auto peer = bench::run_torch_peer(std::string("train --data ") + data_dir + (quick ? " --quick" : ""));

  const double mib = 1024.0 * 1024.0;
  bench::Table t({"workload", "ember", "PyTorch", "ember speed / PyTorch's", "target"});
  t.add({"mnist_cnn step, batch 64 (ms)", fmt("%.3f", mnist_ms[0]), peer_figure(peer, "mnist_step_ms_b64", "%.3f"),
         ratio(mnist_ms[0], peer, "mnist_step_ms_b64", true), ">= 1"});
  t.add({"mnist_cnn step, batch 256 (ms)", fmt("%.3f", mnist_ms[1]), peer_figure(peer, "mnist_step_ms_b256", "%.3f"),
         ratio(mnist_ms[1], peer, "mnist_step_ms_b256", true), ">= 1"});
  t.add({"mnist_cnn epoch, " + std::to_string(set->size()) + " " + what + ", batch 64 (s)", fmt("%.3f", epoch_s),
         peer_figure(peer, "mnist_epoch_s_b64", "%.3f"), ratio(epoch_s, peer, "mnist_epoch_s_b64", true), "< 1 s"});
  t.add({"resnet18 step, batch 128 (ms)", fmt("%.3f", resnet_ms), peer_figure(peer, "resnet18_step_ms_b128", "%.3f"),
         ratio(resnet_ms, peer, "resnet18_step_ms_b128", true), ">= 1"});
  t.add({"resnet18 images/s", fmt("%.0f", 128e3 / resnet_ms), peer_figure(peer, "resnet18_images_per_s_b128", "%.0f"),
         "", ""});
  t.add({"resnet18 peak allocated (MiB)", fmt("%.0f", mem.peak_allocated / mib),
         peer_figure(peer, "resnet18_peak_allocated_mib", "%.0f"), "", "<= PyTorch"});
  t.add({"resnet18 peak reserved (MiB)", fmt("%.0f", mem.peak_reserved / mib),
         peer_figure(peer, "resnet18_peak_reserved_mib", "%.0f"), "", ""});
  std::printf("\n");
  t.print();
  return 0;
}
