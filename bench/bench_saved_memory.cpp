// What one ResNet-18 (CIFAR) training step keeps alive for its backward on the CPU, beside PyTorch.
// ember's figure is the growth of its caching allocator's requested bytes over the forward (the
// saved activations, the casts autocast made, the logits and the loss; `requested` leaves out the
// blocks' rounding and unsplit tails); PyTorch's (bench/peers/torch_saved.py) is the bytes of the
// unique storages its graph saves. Parameters, gradients and optimizer state are outside both.
// Also ember's peak requested bytes over the whole step. Variants: f32 and bf16 autocast, each
// contiguous and channels-last; SGD with momentum; the figures of the third step (the first steps
// fill the optimizer state). Deterministic counts, not timings: one run is the figure.
// Flags: --batch N (default 32), --quick (batch 4, for CTest).
#include <cstdlib>
#include <cstring>
#include <optional>

#include <ember/core/caching_allocator.h>
#include <ember/ember.h>
#include "bench_util.h"
#include "resnet_step.h"

using namespace ember;
using ember::bench::fmt;

namespace {

struct Kept {
  double saved_mib = 0, peak_mib = 0;
};

Kept measure(int64_t batch, bool low, bool channels_last) {
  auto& alloc = dynamic_cast<CachingAllocator&>(cpu_allocator());
  const MemoryFormat f = channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  bench::ResNetStep st = bench::resnet18_step(batch, f);
  Kept k;
  for (int step = 0; step < 3; ++step) {
    alloc.reset_peak();
    const double before = static_cast<double>(alloc.stats().requested);
    Tensor loss;
    {
      std::optional<amp::Autocast> guard;
      if (low) guard.emplace(DeviceType::CPU, DType::bf16);
      loss = layers::cross_entropy(st.model->forward(st.x), st.y);
    }
    k.saved_mib = (static_cast<double>(alloc.stats().requested) - before) / (1 << 20);
    st.opt->zero_grad();
    loss.backward();
    st.opt->step();
    k.peak_mib = static_cast<double>(alloc.stats().peak_requested) / (1 << 20);
  }
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = bench::int_flag(argc, argv, "--batch", bench::has_flag(argc, argv, "--quick") ? 4 : 32);
  std::printf("bench_saved_memory: ResNet-18 (CIFAR) training step on the CPU, batch %lld\n",
              static_cast<long long>(batch));
  const auto peer = bench::run_peer_script("torch_saved.py", fmt("--batch %lld", static_cast<long long>(batch)));
  bench::Table t(
      {"variant", "ember saved (MiB)", "PyTorch saved (MiB)", "ember / PyTorch", "ember peak requested (MiB)"});
  for (const bool low : {false, true}) {
    for (const bool cl : {false, true}) {
      const std::string key = std::string(low ? "bf16" : "f32") + (cl ? "_cl" : "");
      const Kept k = measure(batch, low, cl);
      const auto it = peer.find("saved_mib_" + key);
      t.add({key, fmt("%.1f", k.saved_mib), bench::peer_figure(peer, "saved_mib_" + key, "%.1f"),
             it == peer.end() || it->second <= 0 ? "-" : fmt("%.3f", k.saved_mib / it->second),
             fmt("%.1f", k.peak_mib)});
    }
  }
  t.print();
  std::printf("target: ember saves no more than PyTorch (ratio <= 1, up to the logits and loss)\n");
  return 0;
}
