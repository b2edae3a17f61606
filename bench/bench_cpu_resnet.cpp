// A ResNet-18 (CIFAR) f32 training step on the CPU (forward, cross-entropy, backward, SGD with
// momentum and weight decay), row-major and channels-last, beside PyTorch's same step in the same
// run (bench/peers/torch_cpu_resnet.py, as many threads as ember's pool). Each round runs ember's
// two layouts, then the peer's, and takes the median of --steps steps after --warmup untimed ones;
// the table gives the median of the rounds' medians (rounds interleave ember and the peer, so a
// change in the machine's load falls on both) and their range.
// --im2col adds ember's step with the Winograd rule off (every convolution on im2col + GEMM, as
// before kernels/cpu/winograd.cpp) to each round.
// --convs adds a table of ResNet-18's stride-1 3x3 convolutions, each direction timed through
// kernels::conv2d with the Winograd rule on and off (kernels/cpu/winograd.h), alternating call by
// call, and the largest difference between the two results.
// --bn adds a table of ResNet-18's batch norms (training forward, and backward, on each stage's
// activation at this batch, both layouts) through kernels::batch_norm, beside PyTorch's
// native_batch_norm and its backward on the same shapes, min of --reps calls each.
// Flags: --batch N (default 32), --steps S (5), --warmup W (2), --rounds R (3), --im2col, --convs, --bn, --reps K
// (per-convolution or batch-norm calls, 5), --isa avx2 (both programs limited to AVX2 and FMA on an
// AVX-512 CPU: bench/cpu_isa.h), --quick (batch 4, 2 steps, 1 warm-up, 1 round: for CTest).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/cpu/winograd.h>
#include <ember/kernels/norm.h>
#include "bench_util.h"
#include "cpu_isa.h"
#include "resnet_step.h"

using namespace ember;
using ember::bench::fmt;

namespace {

double step_median_ms(int64_t batch, int steps, int warmup, MemoryFormat f) {
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
  return bench::median(ms);
}

std::string range_of(const std::vector<double>& v) {
  return fmt("%.1f-%.1f", *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
}

/// max |a - b| / max |b| over the elements.
double rel_diff(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const float* pa = ac.data<float>();
  const float* pb = bc.data<float>();
  double d = 0, m = 0;
  for (int64_t i = 0; i < ac.numel(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(pa[i]) - pb[i]));
    m = std::max(m, std::fabs(static_cast<double>(pb[i])));
  }
  return m > 0 ? d / m : d;
}

/// ResNet-18's stride-1 3x3 convolutions (channels, plane) at this batch, each direction and layout,
/// im2col + GEMM (the rule off) against Winograd (on), min of reps calls each, alternating.
void conv_table(int64_t batch, int reps) {
  namespace cd = kernels::cpu::conv_detail;
  bench::Table t({"convolution", "layout", "direction", "im2col ms", "winograd ms", "speed-up", "max rel diff"});
  const kernels::Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  for (const auto& [C, HW] : {std::pair<int64_t, int64_t>{64, 32}, {128, 16}, {256, 8}, {512, 4}}) {
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Shape xs{batch, C, HW, HW}, ws{C, C, 3, 3};
      const Tensor x = randn(xs).contiguous(f), w = randn(ws).contiguous(f), g = randn(xs).contiguous(f);
      const std::vector<std::pair<const char*, std::function<Tensor()>>> dirs = {
          {"forward", [&] { return kernels::conv2d(x, w, Tensor(), p); }},
          {"grad input", [&] { return kernels::conv2d_backward_input(g, w, xs, f, p); }},
          {"grad weight", [&] { return kernels::conv2d_backward_weight(g, x, ws, p); }},
      };
      for (const auto& [name, fn] : dirs) {
        double best[2] = {1e30, 1e30};
        Tensor out[2];
        for (int r = 0; r < reps + 1; ++r)
          for (int on = 0; on < 2; ++on) {
            cd::set_winograd_enabled(on == 1);
            const auto t0 = std::chrono::steady_clock::now();
            out[on] = fn();
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0) best[on] = std::min(best[on], ms);
          }
        cd::set_winograd_enabled(true);
        t.add({fmt("3x3, %lld ch, %lldx%lld", static_cast<long long>(C), static_cast<long long>(HW),
                   static_cast<long long>(HW)),
               f == MemoryFormat::contiguous ? "row-major" : "channels-last", name, fmt("%.2f", best[0]),
               fmt("%.2f", best[1]), fmt("%.2f", best[0] / best[1]), fmt("%.1e", rel_diff(out[1], out[0]))});
      }
    }
  }
  t.print();
}

/// ResNet-18's batch norms at this batch, each stage's (channels, plane), both layouts: training
/// forward and backward, min of reps calls, beside the peer's (its `bn_<layout>_<C>_<pass>` keys).
void bn_table(int64_t batch, int reps) {
  const auto peer =
      bench::run_peer_script("torch_cpu_resnet.py", fmt("--bn --batch %lld --reps %d --threads %d --steps 0 --warmup 0",
                                                        static_cast<long long>(batch), reps, num_threads()));
  bench::Table t({"batch norm", "layout", "ember fwd ms", "PyTorch fwd ms", "ember bwd ms", "PyTorch bwd ms"});
  double sums[4] = {};
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const std::string layout = f == MemoryFormat::contiguous ? "contiguous" : "channels_last";
    for (const auto& [C, HW] : {std::pair<int64_t, int64_t>{64, 32}, {128, 16}, {256, 8}, {512, 4}}) {
      const Tensor x = randn({batch, C, HW, HW}).contiguous(f), g = randn({batch, C, HW, HW}).contiguous(f);
      const Tensor w = ones({C}), b = zeros({C}), rm = zeros({C}), rv = ones({C});
      const auto best = [&](const std::function<void()>& fn) {
        double ms = 1e30;
        for (int r = 0; r < reps + 1; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          fn();
          const double m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          if (r > 0) ms = std::min(ms, m);
        }
        return ms;
      };
      kernels::BatchNormResult res;
      const double fwd = best([&] { res = kernels::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5); });
      const double bwd =
          best([&] { kernels::batch_norm_backward(g, x, w, res.save_mean, res.save_invstd, true, 1e-5); });
      const std::string key = "bn_" + layout + "_" + std::to_string(C) + "_";
      const auto pf = peer.find(key + "fwd"), pb = peer.find(key + "bwd");
      const bool have = pf != peer.end() && pb != peer.end();
      sums[0] += fwd, sums[2] += bwd;
      if (have) sums[1] += pf->second, sums[3] += pb->second;
      t.add(
          {fmt("%lld ch, %lldx%lld", static_cast<long long>(C), static_cast<long long>(HW), static_cast<long long>(HW)),
           layout, fmt("%.3f", fwd), have ? fmt("%.3f", pf->second) : "-", fmt("%.3f", bwd),
           have ? fmt("%.3f", pb->second) : "-"});
    }
  }
  t.add({"sum", "both", fmt("%.2f", sums[0]), peer.empty() ? "-" : fmt("%.2f", sums[1]), fmt("%.2f", sums[2]),
         peer.empty() ? "-" : fmt("%.2f", sums[3])});
  t.print();
}

}  // namespace

int main(int argc, char** argv) {
  bench::apply_isa_flag(argc, argv);
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int64_t batch = bench::int_flag(argc, argv, "--batch", quick ? 4 : 32);
  const int steps = static_cast<int>(bench::int_flag(argc, argv, "--steps", quick ? 2 : 5));
  const int warmup = static_cast<int>(bench::int_flag(argc, argv, "--warmup", quick ? 1 : 2));
  const int rounds = static_cast<int>(std::max<int64_t>(1, bench::int_flag(argc, argv, "--rounds", quick ? 1 : 3)));
  std::printf(
      "bench_cpu_resnet: ResNet-18 (CIFAR) f32 training step, batch %lld, %d threads, median of %d steps, "
      "%d rounds\ncpu: %s\n",
      static_cast<long long>(batch), num_threads(), steps, rounds, bench::cpu_description().c_str());
  if (bench::has_flag(argc, argv, "--convs"))
    conv_table(batch, static_cast<int>(bench::int_flag(argc, argv, "--reps", quick ? 1 : 5)));
  if (bench::has_flag(argc, argv, "--bn"))
    bn_table(batch, static_cast<int>(bench::int_flag(argc, argv, "--reps", quick ? 1 : 5)));
  const bool im2col = bench::has_flag(argc, argv, "--im2col");
  const char* names[2] = {"contiguous", "channels_last"};
  const MemoryFormat formats[2] = {MemoryFormat::contiguous, MemoryFormat::channels_last};
  std::vector<double> ember_ms[2], peer_ms[2], im2col_ms[2];
  for (int r = 0; r < rounds; ++r) {
    for (int l = 0; l < 2; ++l) ember_ms[l].push_back(step_median_ms(batch, steps, warmup, formats[l]));
    if (im2col) {
      kernels::cpu::conv_detail::set_winograd_enabled(false);
      for (int l = 0; l < 2; ++l) im2col_ms[l].push_back(step_median_ms(batch, steps, warmup, formats[l]));
      kernels::cpu::conv_detail::set_winograd_enabled(true);
      std::printf("round %d: ember with im2col only %.1f / %.1f ms\n", r + 1, im2col_ms[0].back(), im2col_ms[1].back());
    }
    const auto peer =
        bench::run_peer_script("torch_cpu_resnet.py", fmt("--batch %lld --steps %d --warmup %d --threads %d",
                                                          static_cast<long long>(batch), steps, warmup, num_threads()));
    for (int l = 0; l < 2; ++l) {
      const auto it = peer.find(std::string("step_ms_") + names[l]);
      if (it != peer.end()) peer_ms[l].push_back(it->second);
    }
    std::printf("round %d: ember %.1f / %.1f ms (contiguous / channels_last)\n", r + 1, ember_ms[0].back(),
                ember_ms[1].back());
  }
  bench::Table t({"layout", "ember ms/step", "ember rounds", "ember images/s", "PyTorch ms/step", "PyTorch rounds",
                  "ember speed / PyTorch's"});
  for (int l = 0; l < 2; ++l) {
    const double e = bench::median(ember_ms[l]);
    const bool have_peer = !peer_ms[l].empty();
    const double pm = have_peer ? bench::median(peer_ms[l]) : 0;
    t.add({names[l], fmt("%.1f", e), range_of(ember_ms[l]), fmt("%.0f", 1000.0 * static_cast<double>(batch) / e),
           have_peer ? fmt("%.1f", pm) : "-", have_peer ? range_of(peer_ms[l]) : "-",
           have_peer && e > 0 ? fmt("%.2f", pm / e) : "-"});
  }
  t.print();
  if (!im2col) return 0;
  bench::Table b({"layout", "im2col only ms/step", "rounds", "with Winograd ms/step", "speed-up"});
  for (int l = 0; l < 2; ++l)
    b.add({names[l], fmt("%.1f", bench::median(im2col_ms[l])), range_of(im2col_ms[l]),
           fmt("%.1f", bench::median(ember_ms[l])),
           fmt("%.2f", bench::median(im2col_ms[l]) / bench::median(ember_ms[l]))});
  b.print();
  return 0;
}
