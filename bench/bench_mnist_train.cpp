// Training throughput of models::mnist_cnn at batch 64, beside what the measured OpenBLAS sgemm
// rate predicts for the same FLOPs, all measured in one run.
//
// CPU rows:
//   ember train step        forward + cross-entropy + backward + SGD(momentum) step on one fixed
//                           batch (no data loading); also split into forward / backward / step,
//                           and the same step with forward and loss under bf16 autocast
//   ember step + loader     the same with batches from a DataLoader (1 worker, shuffled) over an
//                           in-memory 28x28 dataset, as the mnist example trains
//   sgemm, ember's shapes   raw BLAS sgemm_ (its own threads, as many as ember's pool) on exactly the GEMMs one step
//   issues (im2col + GEMM
//                           per image for the convolutions, one GEMM per Linear pass): the time
//                           of a step if everything but the GEMMs were free -> predicted images/s
//   sgemm, batched shapes   the same FLOPs as one GEMM per layer and pass over the whole batch
//                           (the best a GEMM-based CPU convolution could hope for)
// Builds without BLAS time the GEMMs with ember's own matmul instead, and say so.
//
// GPU part (when a GPU is usable): one epoch of mnist_cnn over Fashion-MNIST (or a synthetic
// 60000-image set when the files are missing) with the device-resident loader, at batch 64 and 256,
// and the cuDNN convolution time per step (forward, backward-data, backward-filter of both convs,
// timed alone with events) beside the whole step.
//
// Built-in check: the loss on the fixed batch must fall during the timed steps (exit 1 if not).
// Flags: --quick (few steps; used by the CTest smoke test). The thread pool uses every core (2 on
// the development machine, shared with other work: say so beside any figure quoted from it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ember/ember.h>

#include <ember/kernels/conv.h>
#include <ember/kernels/matmul.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;

namespace {

constexpr int64_t kBatch = 64;
constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";

// One row-major GEMM C (M, N) = op(A) @ op(B), repeated `count` times per training step.
struct GemmShape {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
  int64_t count;
  double flops() const { return 2.0 * static_cast<double>(M) * N * K * count; }
};

// The GEMMs of one mnist_cnn training step at batch B (see kernels/cpu/conv.cpp for the conv
// layouts). conv1's input needs no gradient, so it has no backward-data GEMM.
std::vector<GemmShape> step_gemms(int64_t B, bool batched) {
  const int64_t n = batched ? 1 : B, f = batched ? B : 1;  // per-image count / batch factor on L
  return {
      {"conv1 fwd     w(32,9) @ col(9,676)", 32, 676 * f, 9, false, false, n},
      {"conv1 bwd-w   gout(32,676) @ col^T", 32, 9, 676 * f, false, true, n},
      {"conv2 fwd     w(64,288) @ col(288,576)", 64, 576 * f, 288, false, false, n},
      {"conv2 bwd-in  w^T(288,64) @ gout(64,576)", 288, 576 * f, 64, true, false, n},
      {"conv2 bwd-w   gout(64,576) @ col^T", 64, 288, 576 * f, false, true, n},
      {"fc1 fwd       x(B,9216) @ W^T", B, 128, 9216, false, true, 1},
      {"fc1 bwd-in    gy(B,128) @ W(128,9216)", B, 9216, 128, false, false, 1},
      {"fc1 bwd-w     gy^T(128,B) @ x", 128, 9216, B, true, false, 1},
      {"fc2 fwd/bwd   (B,128)x(128,10)", B, 10, 128, false, true, 3},
  };
}

// Seconds for one execution of `s` (all `count` repetitions) with the raw BLAS (or ember matmul).
double time_gemm(const GemmShape& s, int reps) {
  const int64_t a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
  const int64_t b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
  Tensor a = randn({a_rows, a_cols}), b = randn({b_rows, b_cols}), c = zeros({s.M, s.N});
#ifdef EMBER_BENCH_HAVE_BLAS
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const int m = static_cast<int>(s.N), nn = static_cast<int>(s.M), k = static_cast<int>(s.K);
  const int lda = static_cast<int>(b_cols), ldb = static_cast<int>(a_cols), ldc = static_cast<int>(s.N);
  const float alpha = 1.0f, beta = 0.0f;
  const char tA = s.tb ? 'T' : 'N', tB = s.ta ? 'T' : 'N';
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  auto once = [&] {
    for (int64_t i = 0; i < s.count; ++i)
      sgemm_(&tA, &tB, &m, &nn, &k, &alpha, pb, &lda, pa, &ldb, &beta, pc, &ldc, 1, 1);
  };
#else
  Tensor av = s.ta ? a.t() : a, bv = s.tb ? b.t() : b;
  auto once = [&] {
    for (int64_t i = 0; i < s.count; ++i) c = kernels::matmul(av, bv);
  };
#endif
  return bench::median_seconds(once, reps, 1);
}

struct Prediction {
  double seconds = 0, flops = 0;
};
Prediction predict(const std::vector<GemmShape>& shapes, int reps) {
#ifdef EMBER_BENCH_HAVE_BLAS
  const bench::RawBlasThreads blas_threads(num_threads());  // OpenBLAS threading each GEMM itself
#endif
  Prediction p;
  for (const auto& s : shapes) {
    p.seconds += time_gemm(s, reps);
    p.flops += s.flops();
  }
  return p;
}

// One SGD training step; returns the loss tensor (0-d, on the model's device).
Tensor train_step(layers::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = layers::cross_entropy(model.forward(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

std::shared_ptr<const data::Dataset> train_images(int64_t n_synthetic) {
  std::error_code ec;
  if (std::filesystem::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz", ec))
    return std::make_shared<data::Mnist>(kFashion, data::Split::Train);
  return std::make_shared<data::Synthetic>(n_synthetic, Shape{1, 28, 28}, 10, 7);
}

// ---- CPU ----
bool cpu_part(bool quick) {
  const int steps = quick ? 3 : 30;
  std::printf("bench_mnist_train (CPU): mnist_cnn, batch %lld, %d pool threads, median/mean of %d steps\n",
              static_cast<long long>(kBatch), num_threads(), steps);
  manual_seed(3);
  auto model = models::mnist_cnn();
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({kBatch, 1, 28, 28});
  Tensor y = from_vector(std::vector<int64_t>(kBatch, 0), {kBatch});
  {
    std::vector<int64_t> labels(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) labels[static_cast<size_t>(i)] = (i * 7) % 10;
    y = from_vector(labels, {kBatch});
  }
  for (int i = 0; i < 2; ++i) train_step(*model, opt, x, y);  // warm-up (allocations, first-touch)
  const float loss_before = train_step(*model, opt, x, y).item<float>();
  const double step_s = bench::median_seconds([&] { train_step(*model, opt, x, y); }, steps, 0);
  const float loss_after = train_step(*model, opt, x, y).item<float>();

  // The same step with the forward and loss under bf16 autocast (docs/amp.md; issue 14's CPU
  // figure): matmul and conv in bf16 (the CPU GEMM widens to f32, multiplies, rounds once), the rest
  // in f32, backward and the update outside the guard.
  auto bf16_step = [&] {
    Tensor loss;
    {
      amp::Autocast guard(DeviceType::CPU, DType::bf16);
      loss = layers::cross_entropy(model->forward(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  bf16_step();  // warm-up
  const double bf16_step_s = bench::median_seconds(bf16_step, steps, 0);

  // Phases (means over a few steps).
  double fwd = 0, bwd = 0, upd = 0;
  const int phase_steps = quick ? 2 : 10;
  for (int i = 0; i < phase_steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor loss = layers::cross_entropy(model->forward(x), y);
    auto t1 = std::chrono::steady_clock::now();
    opt.zero_grad();
    loss.backward();
    auto t2 = std::chrono::steady_clock::now();
    opt.step();
    auto t3 = std::chrono::steady_clock::now();
    fwd += std::chrono::duration<double>(t1 - t0).count();
    bwd += std::chrono::duration<double>(t2 - t1).count();
    upd += std::chrono::duration<double>(t3 - t2).count();
  }
  fwd /= phase_steps;
  bwd /= phase_steps;
  upd /= phase_steps;

  // With the loader, as the example trains (timed over `steps` batches after one warm-up batch).
  double loader_s = 0;
  {
    auto ds = std::make_shared<data::Synthetic>(kBatch * (steps + 2), Shape{1, 28, 28}, 10, 5);
    data::DataLoader loader(ds, {.batch_size = kBatch,
                                 .shuffle = true,
                                 .workers = 1,
                                 .seed = 1,
                                 .transform = data::Normalize({0.2860f}, {0.3530f})});
    int64_t i = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto& batch : loader) {
      if (i == 1) t0 = std::chrono::steady_clock::now();
      train_step(*model, opt, batch.input, batch.target);
      if (++i == steps + 1) break;
    }
    loader_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  }

  const int gemm_reps = quick ? 2 : 7;
  const Prediction per_image = predict(step_gemms(kBatch, false), gemm_reps);
  const Prediction batched = predict(step_gemms(kBatch, true), gemm_reps);
#ifdef EMBER_BENCH_HAVE_BLAS
  const char* gemm_name = "BLAS sgemm";
#else
  const char* gemm_name = "ember matmul (no BLAS in this build)";
#endif

  auto ips = [](double s) { return static_cast<double>(kBatch) / s; };
  bench::Table t({"what", "ms / step", "images/s", "GFLOP/s"});
  const double flops = per_image.flops;
  t.add({"ember train step (fixed batch)", fmt("%.2f", step_s * 1e3), fmt("%.0f", ips(step_s)),
         fmt("%.1f", flops / step_s / 1e9)});
  t.add({"  forward + loss", fmt("%.2f", fwd * 1e3), "", ""});
  t.add({"  backward", fmt("%.2f", bwd * 1e3), "", ""});
  t.add({"  SGD step", fmt("%.2f", upd * 1e3), "", ""});
  t.add({"ember train step, bf16 autocast", fmt("%.2f", bf16_step_s * 1e3), fmt("%.0f", ips(bf16_step_s)),
         fmt("%.1f", flops / bf16_step_s / 1e9)});
  t.add({"ember step + DataLoader", fmt("%.2f", loader_s * 1e3), fmt("%.0f", ips(loader_s)),
         fmt("%.1f", flops / loader_s / 1e9)});
  t.add({std::string(gemm_name) + ", ember's per-image shapes", fmt("%.2f", per_image.seconds * 1e3),
         fmt("%.0f", ips(per_image.seconds)), fmt("%.1f", per_image.flops / per_image.seconds / 1e9)});
  t.add({std::string(gemm_name) + ", batched shapes", fmt("%.2f", batched.seconds * 1e3),
         fmt("%.0f", ips(batched.seconds)), fmt("%.1f", batched.flops / batched.seconds / 1e9)});
  t.add({"target (issue 3)", fmt("%.2f", static_cast<double>(kBatch) / 1000.0 * 1e3), "1000", ""});
  t.print();
  std::printf(
      "GEMM FLOPs per step: %.1f MFLOP (%.1f MFLOP per image); ember reaches %.0f%% of the per-image-shape "
      "sgemm prediction\n",
      flops / 1e6, flops / 1e6 / kBatch, 100.0 * per_image.seconds / step_s);
  std::printf("loss on the fixed batch: %.4f before the timed steps, %.4f after\n", loss_before, loss_after);
  const bool ok = std::isfinite(loss_after) && loss_after < loss_before;
  if (!ok) std::printf("FAILED: training did not lower the loss on a fixed batch\n");
  return ok;
}

// ---- GPU ----
bool gpu_part(bool quick) {
  const Device dev = Device::cuda(0);
  std::printf("\nbench_mnist_train (GPU %s): mnist_cnn, device-resident loader\n", dev.str().c_str());
  auto ds = train_images(60000);
  bench::Table t({"what", "batch", "epoch (s)", "images/s"});
  for (int64_t batch : {int64_t{64}, int64_t{256}}) {
    manual_seed(3);
    auto model = models::mnist_cnn();
    model->to(dev);
    optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
    std::shared_ptr<const data::Dataset> set = ds;
    if (quick) {
      std::vector<int64_t> first(static_cast<size_t>(std::min<int64_t>(batch * 20, ds->size())));
      for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int64_t>(i);
      set = std::make_shared<data::Subset>(ds, std::move(first));
    }
    data::DataLoader loader(set, {.batch_size = batch,
                                  .shuffle = true,
                                  .device = dev,
                                  .seed = 1,
                                  .resident = true,
                                  .transform = data::Normalize({0.2860f}, {0.3530f})});
    // Warm-up epoch: cuDNN algorithm search, allocator growth, resident copy.
    for (auto& b : loader) train_step(*model, opt, b.input, b.target);
    synchronize(dev);
    auto t0 = std::chrono::steady_clock::now();
    Tensor last;
    for (auto& b : loader) last = train_step(*model, opt, b.input, b.target);
    (void)last.item<float>();
    synchronize(dev);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.add({"one epoch, " + std::to_string(set->size()) + " images", std::to_string(batch), fmt("%.3f", s),
           fmt("%.0f", static_cast<double>(set->size()) / s)});
  }
  t.print();
  std::printf("target (issue 3): an epoch in <= 1 s on an H100 (batch 64)\n");

  // cuDNN convolution time per step beside the whole step, both timed with events.
  manual_seed(4);
  auto model = models::mnist_cnn();
  model->to(dev);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({kBatch, 1, 28, 28}, {.dtype = DType::f32, .device = dev}),
         y = zeros({kBatch}, {.dtype = DType::i64, .device = dev});
  const int steps = quick ? 5 : 100;
  for (int i = 0; i < 5; ++i) train_step(*model, opt, x, y);
  Stream s = current_stream(dev);
  Event e0, e1;
  e0.record(s);
  for (int i = 0; i < steps; ++i) train_step(*model, opt, x, y);
  e1.record(s);
  e1.synchronize();
  const double step_ms = e0.elapsed_ms(e1) / steps;

  kernels::Conv2dParams p;  // stride 1, no padding, as mnist_cnn's convs
  Tensor w1 = randn({32, 1, 3, 3}, {.dtype = DType::f32, .device = dev}),
         b1 = randn({32}, {.dtype = DType::f32, .device = dev});
  Tensor w2 = randn({64, 32, 3, 3}, {.dtype = DType::f32, .device = dev}),
         b2 = randn({64}, {.dtype = DType::f32, .device = dev});
  Tensor a1 = randn({kBatch, 32, 26, 26}, {.dtype = DType::f32, .device = dev});
  auto convs = [&] {
    Tensor o1 = kernels::conv2d(x, w1, b1, p);  // (B, 32, 26, 26)
    Tensor o2 = kernels::conv2d(a1, w2, b2, p);  // (B, 64, 24, 24)
    (void)kernels::conv2d_backward_input(o2, w2, a1.sizes(), MemoryFormat::contiguous, p);
    (void)kernels::conv2d_backward_weight(o2, a1, w2.sizes(), p);
    (void)kernels::conv2d_backward_weight(o1, x, w1.sizes(), p);
  };
  for (int i = 0; i < 3; ++i) convs();
  e0.record(s);
  for (int i = 0; i < steps; ++i) convs();
  e1.record(s);
  e1.synchronize();
  const double conv_ms = e0.elapsed_ms(e1) / steps;
  bench::Table c({"per step, batch 64", "ms", "share"});
  c.add({"whole training step", fmt("%.3f", step_ms), "100%"});
  c.add(
      {"cuDNN convolutions (fwd, bwd-data, bwd-filter)", fmt("%.3f", conv_ms), fmt("%.0f%%", 100 * conv_ms / step_ms)});
  c.print();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  bool ok = cpu_part(quick);
  if (cuda_device_count() > 0) {
    ok = gpu_part(quick) && ok;
  } else {
    std::printf("\nno usable GPU: the GPU part (resident-loader epoch, cuDNN time per step) did not run\n");
  }
  return ok ? 0 : 1;
}
