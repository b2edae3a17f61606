// The profiler on a GPU: each op on a GPU gets its kernels' time from CUDA events on its stream,
// on the host's clock; a long matmul's GPU time is the matmul's, not a neighbour's; the trace has
// a row per GPU and the table a GPU column; backward nodes are timed too, in one profile after
// another. Runs only where a GPU is usable (main_cuda.cpp skips otherwise); unrun until the next
// GPU session.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>

#include <ember/ember.h>
#include <ember/profiler/profile.h>
#include "support/only_span.h"

using namespace ember;
using namespace ember::profiler;
using ember::testing::only_span;

TEST_CASE("profiler on a GPU: each op's kernels timed on its stream, a GPU row in the trace", "[cuda][profiler]") {
  const Device gpu = Device::cuda(0);
  const Tensor big = randn({2048, 2048}).to(gpu);
  const Tensor small = randn({4}).to(gpu);
  synchronize(gpu);
  Profile p;
  const Tensor prod = matmul(big, big);  // ~17 GFLOP: milliseconds of kernels
  const Tensor sum = add(small, small);  // one tiny kernel
  p.stop();

  const Span& mm = only_span(p, "matmul");
  const Span& ad = only_span(p, "add");
  for (const Span* s : {&mm, &ad}) {
    INFO(s->event.name);
    CHECK(s->event.gpu_device == 0);
    CHECK(s->event.gpu_end_ns >= s->event.gpu_start_ns);
    // On the host's clock: its kernels ran after the op began queueing them and before stop()
    // returned (stop waits for them).
    CHECK(s->event.gpu_start_ns + 1000 >= s->event.start_ns);
    CHECK(s->event.gpu_end_ns <= now_ns());
    CHECK(s->event.gpu_events[0] == nullptr);  // resolved and released
  }
  // The matmul's kernels are attributed to it: far longer than the add's one tiny kernel, and the
  // add's began after the matmul's ended (one stream).
  CHECK(mm.event.gpu_end_ns - mm.event.gpu_start_ns > 10 * (ad.event.gpu_end_ns - ad.event.gpu_start_ns));
  CHECK(ad.event.gpu_start_ns + 1000 >= mm.event.gpu_end_ns);
  CHECK(ad.event.gpu_end_ns > ad.event.gpu_start_ns);  // from its own two events: never rounded to 0

  const nlohmann::json trace = nlohmann::json::parse(p.chrome_trace_json(0));
  bool row = false, gpu_span = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == kGpuRowTid)
      row = e["args"]["name"].get<std::string>().find("GPU cuda:0") != std::string::npos;
    if (e["ph"] == "X" && e["tid"] == kGpuRowTid && e["name"] == "matmul") gpu_span = true;
  }
  CHECK(row);
  CHECK(gpu_span);
  CHECK(p.table().find("GPU total (ms)") != std::string::npos);
  (void)prod;
  (void)sum;
}

TEST_CASE("profiler on a GPU: gpu_time false records no GPU time", "[cuda][profiler]") {
  const Tensor x = randn({64}).to(Device::cuda(0));
  Profile p({.gpu_time = false});
  const Tensor y = add(x, x);
  p.stop();
  CHECK(only_span(p, "add").event.gpu_device == -1);
  CHECK(p.table().find("GPU total") == std::string::npos);
  (void)y;
}

TEST_CASE("profiler on a GPU: backward nodes get their kernels' time, profile after profile", "[cuda][profiler]") {
  Tensor x = randn({256, 256}).to(Device::cuda(0));
  x.requires_grad_();
  for (int i = 0; i < 2; ++i) {  // each profile aligns the device's clock afresh
    INFO("profile " << i);
    Profile p;
    sum(matmul(x, x)).backward();
    p.stop();
    const Span& mm = only_span(p, "MatmulBackward");
    CHECK(mm.event.gpu_device == 0);
    CHECK(mm.event.gpu_end_ns > mm.event.gpu_start_ns);
    CHECK(mm.event.gpu_start_ns + 1000 >= mm.event.start_ns);
    CHECK(mm.event.gpu_events[0] == nullptr);
  }
}
