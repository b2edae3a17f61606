// A ResNet-18 (CIFAR) f32 training step on the CPU (forward, cross-entropy, backward, SGD with
// momentum and weight decay), row-major and channels-last, beside PyTorch's same step in the same
// run (bench/peers/torch_cpu_resnet.py, as many threads as ember's pool). Medians of --steps steps
// after --warmup untimed ones; ember's variants run first, then the peer's.
// Flags: --batch N (default 32), --steps S (5), --warmup W (2), --quick (batch 4, 2 steps, 1 warm-up:
// for CTest).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <ember/ember.h>
#include "bench_util.h"
#include "resnet_step.h"

using namespace ember;
using ember::bench::fmt;

namespace {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

Timing measure(int64_t batch, int steps, int warmup, MemoryFormat f) {
  bench::ResNetStep st = bench::resnet18_step(batch, f);
  std::vector<double> ms;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor loss = layers::cross_entropy(st.model->forward(st.x), st.y);
    st.opt->zero_grad();
    loss.backward();
    st.opt->step();
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EMBER_CHECK(std::isfinite(loss.item<float>()), "bench_cpu_resnet: the loss is not finite at step ", i);
    if (i >= warmup) ms.push_back(t);
  }
  return {bench::median(ms), *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end())};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int64_t batch = bench::int_flag(argc, argv, "--batch", quick ? 4 : 32);
  const int steps = static_cast<int>(bench::int_flag(argc, argv, "--steps", quick ? 2 : 5));
  const int warmup = static_cast<int>(bench::int_flag(argc, argv, "--warmup", quick ? 1 : 2));
  std::printf("bench_cpu_resnet: ResNet-18 (CIFAR) f32 training step, batch %lld, %d threads, median of %d steps\n",
              static_cast<long long>(batch), num_threads(), steps);
  const Timing rm = measure(batch, steps, warmup, MemoryFormat::contiguous);
  const Timing cl = measure(batch, steps, warmup, MemoryFormat::channels_last);
  const auto peer =
      bench::run_peer_script("torch_cpu_resnet.py", fmt("--batch %lld --steps %d --warmup %d --threads %d",
                                                        static_cast<long long>(batch), steps, warmup, num_threads()));
  bench::Table t(
      {"layout", "ember ms/step", "ember range", "ember images/s", "PyTorch ms/step", "ember speed / PyTorch's"});
  for (const auto& [name, tm] : {std::pair{"contiguous", rm}, std::pair{"channels_last", cl}}) {
    const auto it = peer.find(std::string("step_ms_") + name);
    t.add({name, fmt("%.1f", tm.median_ms), fmt("%.1f-%.1f", tm.min_ms, tm.max_ms),
           fmt("%.0f", 1000.0 * static_cast<double>(batch) / tm.median_ms),
           bench::peer_figure(peer, std::string("step_ms_") + name, "%.1f"),
           it == peer.end() || tm.median_ms <= 0 ? "-" : fmt("%.2f", it->second / tm.median_ms)});
  }
  t.print();
  return 0;
}
