// GPU training throughput beside PyTorch eager on the same GPU, in one run:
//   mnist_cnn training step (forward + cross-entropy + backward + SGD momentum) at batch 64 and 256;
//   one epoch of mnist_cnn at batch 64 over Fashion-MNIST (or 60000 generated images when the
//   files are missing) with the data resident on the GPU; the batch-64 step and the epoch again
//   with the step captured as a CUDA graph and replayed (the examples' --cuda-graphs,
//   train.cuda_graphs; ember only: the peer runs eager);
//   ResNet-18 (CIFAR variant) training step at batch 128 in f32, under bf16 autocast, and under
//   fp16 autocast with a GradScaler (scale -> backward -> step -> update), each also with the model
//   and input channels-last: images/s and peak memory of each, beside PyTorch AMP (torch.autocast,
//   torch.amp.GradScaler) and torch.channels_last. Autocast wraps the forward
//   and the loss only; parameters, gradients and the SGD step stay f32 on both sides.
// The peer is bench/peers/torch_gpu.py (same layers, shapes, batches, optimizer and step counts;
// TF32 off on both sides; cudnn.benchmark on, as ember searches cuDNN's algorithms).
//
// Timing: CUDA events around windows of back-to-back steps after a warm-up; the figure is the
// median window divided by its step count. The epoch is one event-timed pass after a warm-up epoch.
// Peak memory: ember's caching allocator's high-water mark of allocated bytes (and of reserved
// segments) over the timed steps, beside torch.cuda.max_memory_allocated/reserved over the same.
// Each ResNet-18 variant starts after the previous one's tensors are freed and the cache emptied,
// and resets the peak after its first step, so its figures are its own.
// Exits 77 when no GPU is usable. Flags: --quick (few steps), --data DIR, and for profiling
// (no timing table): --profile-steps N [f32|bf16|fp16] [--channels-last] runs N ResNet-18 steps between
// cudaProfilerStart/Stop; --host-samples FILE also samples the host's stacks during them
// (bench/host_sampler.h; summarized by bench/host_profile_summary.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_graph.h>
#ifdef EMBER_BENCH_HAVE_CUDART
#include <cuda_profiler_api.h>
#endif
#include "bench_util.h"
#include "host_sampler.h"

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

// mnist_cnn's step as a CUDA graph (core/cuda_graph.h, as train/graph_step.h does it): 3 eager
// warm-up steps on the capture stream (its cuBLAS/cuDNN handles, cuDNN's engine choices, the
// momentum buffers), one captured step with the gradients set to none first (they then live in the
// graph's pool), and replays with each batch copied into the static input and target.
class GraphedStep {
 public:
  GraphedStep(layers::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y)
      : model_(model), opt_(opt), x_(x.clone()), y_(y.clone()) {
    const Device dev = x.device();
    side_ = new_stream(dev);
    Event ready;
    ready.record(current_stream(dev));
    ready.wait(side_);
    {
      StreamGuard on_side(side_);
      for (int i = 0; i < 3; ++i) train_step(model_, opt_, x_, y_);
    }
    opt_.zero_grad();
    cuda::GraphCapture capture(graph_, side_);
    Tensor loss = layers::cross_entropy(model_.forward(x_), y_);
    loss.backward();
    opt_.step();
    capture.end();
  }
  /// One step on (x, y) of the captured shapes (x, y may be the statics themselves).
  void run(const Tensor& x, const Tensor& y) {
    if (!x.is_same(x_)) {
      x_.copy_(x);
      y_.copy_(y);
    }
    graph_.replay();
  }
  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 private:
  layers::Module& model_;
  optim::Optimizer& opt_;
  Tensor x_, y_;
  Stream side_;
  cuda::Graph graph_;
};

// Seconds of one event-timed epoch of mnist_cnn at batch 64 over `set` (resident on `dev`), after a
// warm-up epoch; `graphs`: full batches replayed as a CUDA graph (GraphedStep), the partial one eager.
double mnist_epoch_seconds(const std::shared_ptr<const data::Dataset>& set, Device dev, bool graphs) {
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
  std::optional<GraphedStep> g;
  const auto step = [&](const data::Batch& b) {
    if (graphs && !g) g.emplace(*model, opt, b.input, b.target);
    if (g && b.input.sizes() == g->x().sizes()) g->run(b.input, b.target);
    else train_step(*model, opt, b.input, b.target);
  };
  for (auto& b : loader) step(b);  // warm-up epoch (and the capture)
  synchronize(dev);
  Stream s = current_stream(dev);
  Event e0, e1;
  e0.record(s);
  for (auto& b : loader) step(b);
  e1.record(s);
  e1.synchronize();
  return e0.elapsed_ms(e1) / 1e3;
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
  return bench::median(std::move(ms));
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

enum class Precision { f32, bf16, fp16 };

struct ResnetRun {
  double ms = 0;  // median per step; 0 when the variant failed
  uint64_t new_segments = 0;  // cudaMalloc calls during the timed steps (each one synchronizes)
  double host_syncs = 0;  // host synchronizations ember made per timed step
  double host_ms = 0;  // median host time to issue one step after a sync (== ms: host-bound, or a sync inside)
  AllocatorStats mem;  // peaks over the timed steps
  double loss_scale = 0;  // fp16: the GradScaler's scale at the end
  int64_t skipped = 0;  // fp16: steps the GradScaler skipped (warm-up included)
};

// ResNet-18 (CIFAR) training step at batch 128: f32, or forward + loss under amp::Autocast in
// bf16, or in f16 with an amp::GradScaler. Same seed, model, optimizer and input for each; all
// it allocates is freed on return.
// profile_steps > 0: no timing windows; after the warm-up, that many steps between
// cudaProfilerStart/Stop (for `ncu --profile-from-start off`), timed with the host clock only.
ResnetRun resnet18_run(Device dev, Precision p, int iters, int reps, bool channels_last, int profile_steps = 0,
                       const std::string& samples_path = "") {
  ResnetRun r;
  synchronize(dev);
  cuda_empty_cache();  // the earlier workloads' cached segments: peak reserved is this variant's
  manual_seed(3);
  auto model = models::resnet18();
  model->to(dev);
  if (channels_last) model->to(MemoryFormat::channels_last);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
  amp::GradScaler scaler(amp::GradScalerOptions{.enabled = p == Precision::fp16});
  const Tensor x = randn({128, 3, 32, 32}, {.device = dev})
                       .contiguous(channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous),
               y = labels(128, dev);
  auto step = [&] {
    Tensor loss;
    {
      std::optional<amp::Autocast> guard;  // forward and loss only (docs/amp.md)
      if (p != Precision::f32) guard.emplace(DeviceType::CUDA, p == Precision::bf16 ? DType::bf16 : DType::f16);
      loss = layers::cross_entropy(model->forward(x), y);
    }
    opt.zero_grad();
    if (p == Precision::fp16) {
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      opt.step();
    }
  };
  step();
  synchronize(dev);
  if (profile_steps > 0) {
    for (int i = 0; i < 3; ++i) step();
    synchronize(dev);
    const uint64_t segments = cuda_caching_allocator(dev.index()).stats().num_backend_allocs;
    const uint64_t syncs = host_synchronizations();
    const auto t0 = std::chrono::steady_clock::now();
#ifdef EMBER_BENCH_HAVE_CUDART
    cudaProfilerStart();
#endif
    std::optional<bench::HostSampler> sampler;
    if (!samples_path.empty()) sampler.emplace(1000);
    for (int i = 0; i < profile_steps; ++i) step();
    synchronize(dev);
    if (sampler) sampler->stop();
#ifdef EMBER_BENCH_HAVE_CUDART
    cudaProfilerStop();
#endif
    if (sampler) {
      const bool ok = sampler->write(samples_path);
      std::printf("resnet18 profile: %d host samples %s %s\n", sampler->samples(), ok ? "written to" : "NOT written to",
                  samples_path.c_str());
    }
    r.host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / profile_steps;
    std::printf(
        "resnet18 profile: %d steps, %.3f ms per step (host clock, synchronized), %llu new segments, %llu host "
        "synchronizations (1 is the closing one)\n",
        profile_steps, r.host_ms,
        static_cast<unsigned long long>(cuda_caching_allocator(dev.index()).stats().num_backend_allocs - segments),
        static_cast<unsigned long long>(host_synchronizations() - syncs));
    return r;
  }
  cuda_caching_allocator(dev.index()).reset_peak();
  const uint64_t segments = cuda_caching_allocator(dev.index()).stats().num_backend_allocs;
  const uint64_t syncs = host_synchronizations();
  r.ms = median_ms(dev, iters, reps, step);
  // median_ms synchronizes once after its 5 warm-up steps and once per window: those are not the step's.
  r.host_syncs = static_cast<double>(host_synchronizations() - syncs - (1 + reps)) / (5 + reps * iters);
  r.mem = cuda_caching_allocator(dev.index()).stats();
  r.new_segments = r.mem.num_backend_allocs - segments;
  std::vector<double> host;
  for (int i = 0; i < 7; ++i) {
    synchronize(dev);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    host.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  synchronize(dev);
  r.host_ms = bench::median(std::move(host));
  r.loss_scale = scaler.scale();
  r.skipped = scaler.skipped_steps();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (bench::no_usable_gpu("bench_gpu_train")) return 77;
  const bool quick = bench::has_flag(argc, argv, "--quick");
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--data") data_dir = argv[i + 1];
  const Device dev = Device::cuda(0);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--profile-steps") continue;
    const std::string precision = i + 2 < argc ? argv[i + 2] : "f32";
    const Precision p = precision == "bf16" ? Precision::bf16 : precision == "fp16" ? Precision::fp16 : Precision::f32;
    std::string samples;
    for (int k = 1; k + 1 < argc; ++k)
      if (std::string(argv[k]) == "--host-samples") samples = argv[k + 1];
    resnet18_run(dev, p, 0, 0, bench::has_flag(argc, argv, "--channels-last"), std::max(1, std::atoi(argv[i + 1])),
                 samples);
    return 0;
  }
  const int steps = quick ? 5 : 50, reps = quick ? 3 : 5;
  std::printf(
      "bench_gpu_train: %s, f32 (no TF32; ResNet-18 also under bf16/fp16 autocast), median of %d "
      "event-timed windows\n",
      dev.str().c_str(), reps);

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

  // The batch-64 step as a CUDA graph.
  double graph_step_ms = 0;
  try {
    manual_seed(3);
    auto model = models::mnist_cnn();
    model->to(dev);
    optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
    GraphedStep g(*model, opt, randn({64, 1, 28, 28}, {.device = dev}), labels(64, dev));
    graph_step_ms = median_ms(dev, steps, reps, [&] { g.run(g.x(), g.y()); });
  } catch (const std::exception& e) {
    std::printf("mnist_cnn step as a CUDA graph: FAILED: %s\n", e.what());
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
  // One resident epoch at batch 64, eager; then with full batches replayed as a CUDA graph (the
  // last, partial batch eager).
  const double epoch_s = mnist_epoch_seconds(set, dev, false);
  double graph_epoch_s = 0;
  try {
    graph_epoch_s = mnist_epoch_seconds(set, dev, true);
  } catch (const std::exception& e) {
    std::printf("mnist_cnn epoch as a CUDA graph: FAILED: %s\n", e.what());
  }

  // ResNet-18, batch 128, in each precision, row-major and then channels-last (model and input);
  // a variant that fails is reported and left out.
  constexpr int kVariants = 6;
  const Precision precisions[kVariants] = {Precision::f32, Precision::bf16, Precision::fp16,
                                           Precision::f32, Precision::bf16, Precision::fp16};
  const char* const suffixes[kVariants] = {"", "_bf16", "_fp16", "_cl", "_bf16_cl", "_fp16_cl"};
  const char* const labels_of[kVariants] = {"",
                                            ", bf16 autocast",
                                            ", fp16 autocast + scaler",
                                            ", channels-last",
                                            ", bf16 autocast, channels-last",
                                            ", fp16 autocast + scaler, channels-last"};
  ResnetRun resnet[kVariants];
  for (int k = 0; k < kVariants; ++k) {
    try {
      resnet[k] = resnet18_run(dev, precisions[k], quick ? 5 : 20, reps, k >= 3);
    } catch (const std::exception& e) {
      std::printf("resnet18%s: FAILED: %s\n", labels_of[k], e.what());
    }
  }
  if (resnet[2].ms > 0)
    std::printf("resnet18 fp16: loss scale %g at the end, %lld steps skipped\n", resnet[2].loss_scale,
                static_cast<long long>(resnet[2].skipped));

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
  // --cuda-graphs rows: beside PyTorch eager (the peer does not capture).
  t.add({"mnist_cnn step, batch 64, --cuda-graphs (ms)", graph_step_ms > 0 ? fmt("%.3f", graph_step_ms) : "-",
         peer_figure(peer, "mnist_step_ms_b64", "%.3f"),
         graph_step_ms > 0 ? ratio(graph_step_ms, peer, "mnist_step_ms_b64", true) : "-", ""});
  t.add({"mnist_cnn epoch, batch 64, --cuda-graphs (s)", graph_epoch_s > 0 ? fmt("%.3f", graph_epoch_s) : "-",
         peer_figure(peer, "mnist_epoch_s_b64", "%.3f"),
         graph_epoch_s > 0 ? ratio(graph_epoch_s, peer, "mnist_epoch_s_b64", true) : "-", "< 1 s"});
  for (int k = 0; k < kVariants; ++k) {
    const ResnetRun& r = resnet[k];
    const std::string sfx = suffixes[k], name = labels_of[k];
    const auto figure = [&](double v, const char* f) { return r.ms > 0 ? fmt(f, v) : std::string("-"); };
    t.add({"resnet18 step, batch 128" + name + " (ms)", figure(r.ms, "%.3f"),
           peer_figure(peer, "resnet18_step_ms_b128" + sfx, "%.3f"),
           r.ms > 0 ? ratio(r.ms, peer, "resnet18_step_ms_b128" + sfx, true) : "-", ">= 1"});
    t.add({"resnet18 host time to issue a step" + name + " (ms)", figure(r.host_ms, "%.3f"), "-", "", ""});
    t.add({"resnet18 host synchronizations per step" + name, figure(r.host_syncs, "%.2f"), "-", "", ""});
    t.add({"resnet18 cudaMalloc calls in the timed steps" + name, figure(static_cast<double>(r.new_segments), "%.0f"),
           "-", "", ""});
    t.add({"resnet18 images/s" + name, figure(r.ms > 0 ? 128e3 / r.ms : 0, "%.0f"),
           peer_figure(peer, "resnet18_images_per_s_b128" + sfx, "%.0f"), "", ""});
    t.add({"resnet18 peak allocated" + name + " (MiB)", figure(r.mem.peak_allocated / mib, "%.0f"),
           peer_figure(peer, "resnet18_peak_allocated_mib" + sfx, "%.0f"), "", "<= PyTorch"});
    t.add({"resnet18 peak reserved" + name + " (MiB)", figure(r.mem.peak_reserved / mib, "%.0f"),
           peer_figure(peer, "resnet18_peak_reserved_mib" + sfx, "%.0f"), "", ""});
  }
  t.add({"resnet18 fp16 loss scale at the end", resnet[2].ms > 0 ? fmt("%g", resnet[2].loss_scale) : "-",
         peer_figure(peer, "resnet18_loss_scale_fp16", "%g"), "", ""});
  std::printf("\n");
  t.print();
  return 0;
}
