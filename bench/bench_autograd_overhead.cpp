// Fixed cost per op: microseconds for an add of two 1-element f32 tensors on the CPU, where the
// arithmetic is nothing and the time is dispatch, allocation and (with grad) graph recording.
// Rows, measured in one run so they compare directly:
//   kernels::binary           the kernel front alone (checks, output allocation, dispatch)
//   add, no grad              the autograd op under NoGradGuard: records nothing
//   add, requires_grad        forward plus graph node (target <= 2 us)
//   add + backward            one op forward and its backward pass through the engine
//   chain of 16 adds + backward, per op
//   add, requires_grad, profiling  the same while a profiler::Profile records (a span per op and
//                                  the allocator's memory counter per allocation): the profiler's
//                                  cost per op when on (off, it is one relaxed load and a branch)
// Each figure is the median over repetitions of a loop of many calls, divided by the call count.
// Flags: --quick (fewer calls; used by the CTest smoke test).
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/profiler/profile.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int calls = quick ? 2000 : 100000;
  const int reps = quick ? 3 : 15;
  constexpr int kChain = 16;
  constexpr double kTargetUs = 2.0;
  std::printf("bench_autograd_overhead: add of two 1-element f32 CPU tensors, %d calls per rep, median of %d reps\n",
              calls, reps);

  Tensor a = ones({1}), b = full({1}, 2.0);
  Tensor ga = ones({1}).requires_grad_(), gb = full({1}, 2.0).requires_grad_();
  Tensor sink;
  auto per_call_us = [&](auto&& body, int n) {
    return 1e6 *
           bench::median_seconds(
               [&] {
                 for (int i = 0; i < n; ++i) body();
               },
               reps, 1) /
           n;
  };

  const double t_kernel = per_call_us([&] { sink = kernels::binary(kernels::BinaryOp::Add, a, b); }, calls);
  double t_nograd;
  {
    NoGradGuard no_grad;
    t_nograd = per_call_us([&] { sink = add(ga, gb); }, calls);
  }
  const double t_grad = per_call_us([&] { sink = add(ga, gb); }, calls);
  const double t_backward = per_call_us([&] { add(ga, gb).backward(); }, calls / 4);
  const double t_chain = per_call_us(
                             [&] {
                               Tensor c = ga;
                               for (int i = 0; i < kChain; ++i) c = add(c, gb);
                               c.backward();
                             },
                             calls / kChain) /
                         kChain;

  double t_profiled;
  size_t spans = 0;
  {
    profiler::Profile p;  // no schedule: every span until stop() is kept
    t_profiled = per_call_us([&] { sink = add(ga, gb); }, calls / 10);
    p.stop();
    spans = p.spans().size();
  }

  // The graph must really have been built: every backward pass adds 1 to ga's gradient and 1 per
  // use to gb's, so after all of them (warm-up included) the gradients are exact use counts.
  const double passes_single = (reps + 1.0) * (calls / 4), passes_chain = (reps + 1.0) * (calls / kChain);
  const double want_ga = passes_single + passes_chain, want_gb = passes_single + kChain * passes_chain;
  const double got_ga = ga.grad().item<float>(), got_gb = gb.grad().item<float>();
  const bool graph_ok = sink.requires_grad() && !sink.is_leaf() && got_ga == want_ga && got_gb == want_gb;

  bench::Table table({"what", "us per op", "target"});
  table.add({"kernels::binary (no autograd layer)", fmt("%.3f", t_kernel), "-"});
  table.add({"add, NoGradGuard", fmt("%.3f", t_nograd), "-"});
  table.add({"add, requires_grad (forward + graph)", fmt("%.3f", t_grad),
             fmt("<= %.0f us: %s", kTargetUs, t_grad <= kTargetUs ? "met" : "MISSED")});
  table.add({"add + backward", fmt("%.3f", t_backward), "-"});
  table.add({fmt("chain of %d adds + backward, per add", kChain), fmt("%.3f", t_chain), "-"});
  table.add({"add, requires_grad, while a profile records", fmt("%.3f", t_profiled),
             fmt("+%.3f us per op", t_profiled - t_grad)});
  table.print();
  // Each profiled call was recorded: one "add" span per call (warm-up included).
  if (spans < static_cast<size_t>((reps + 1) * (calls / 10))) {
    std::printf("bench_autograd_overhead: the profile kept %zu spans for %d calls\n", spans, (reps + 1) * (calls / 10));
    return 1;
  }
  if (!graph_ok) {
    std::printf("bench_autograd_overhead: wrong graph: grads %.0f, %.0f (expected %.0f, %.0f)\n", got_ga, got_gb,
                want_ga, want_gb);
    return 1;
  }
  return 0;
}
