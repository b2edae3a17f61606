// The cost of one all_reduce call through ember's nccl process group, at world size 1, beside
// PyTorch's torch.distributed.all_reduce (nccl backend, world size 1: bench/peers/torch_nccl.py)
// and a bare ncclAllReduce, in one run, on cuda:0.
//
// Why world size 1: the benchmark machine has one GPU, and NCCL refuses two ranks on one device.
// With one rank no data moves between GPUs, so what is measured is the per-call overhead that every
// all_reduce pays on top of its transfer:
//   ember native  ProcessGroup::all_reduce(t)->wait(), algorithm "native": the Work handle, an event
//                 ordering the group's communication stream after the caller's stream, ncclAllReduce,
//                 the completion event, and wait() ordering the caller's stream after that event
//                 (wait() does not block the host).
//   ember ring    the same with algorithm "ring" (ember's ring over ncclSend/ncclRecv); at world
//                 size 1 the ring returns before any transfer, so this is the group's own overhead
//                 (with the ring's staging buffer taken from the caching allocator on each call).
//   bare NCCL     ncclAllReduce alone on a one-rank communicator (ncclCommInitAll), on one stream.
//   PyTorch       dist.all_reduce(t), which likewise runs on its own NCCL stream and orders the
//                 caller's stream after it.
// Each in place, sum, f32, at 4 B, 4 KiB, 1 MiB and 64 MiB.
//
// Timing: CUDA events on the current stream around windows of back-to-back calls after a warm-up;
// the figure is the median window divided by its call count. "host" is the wall time of the issuing
// loop per call (before the closing event is awaited): when it is about the event-timed figure, the
// call is bound by host-side work. Before timing, sum and avg must leave known values unchanged
// (what both are at world size 1); the program exits 1 otherwise. Exits 77 when no GPU is usable.
// Flags: --quick (4 B and 1 MiB, few windows).
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include <ember/core/cuda_check.h>
#include "bench_util.h"

using namespace ember;
using ember::bench::fmt;
using ember::bench::peer_figure;

namespace {

struct PerCall {
  double us = 0;  // event-timed on the stream
  double host_us = 0;  // the issuing loop's wall time
};

// Median microseconds per call of fn over `reps` windows of `iters` calls, after a warm-up.
template <typename Fn> PerCall time_calls(Device dev, int iters, int reps, Fn&& fn) {
  for (int i = 0; i < 10; ++i) fn();
  synchronize(dev);
  const Stream s = current_stream(dev);
  std::vector<double> us, host_us;
  for (int r = 0; r < reps; ++r) {
    Event e0, e1;
    e0.record(s);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
    e1.record(s);
    e1.synchronize();
    us.push_back(1e3 * e0.elapsed_ms(e1) / iters);
  }
  return {bench::median(std::move(us)), bench::median(std::move(host_us))};
}

// i % 7 for i < n.
std::vector<float> pattern(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7);
  return v;
}

// At world size 1, sum and avg leave every value as it was.
void check_unchanged(parallel::ProcessGroup& pg, const std::string& algorithm, int64_t n, Device dev) {
  const std::vector<float> want = pattern(n);
  for (parallel::ReduceOp op : {parallel::ReduceOp::sum, parallel::ReduceOp::avg}) {
    Tensor t = from_vector(want, {n}, {.device = dev});
    pg.all_reduce(t, op)->wait();
    EMBER_CHECK(t.to_vector<float>() == want, "all_reduce ", parallel::reduce_op_name(op), " (", algorithm, ", ", n,
                " floats) at world size 1 changed the values");
  }
}

std::string size_str(int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt("%lld MiB", static_cast<long long>(bytes >> 20));
  if (bytes >= (1 << 10)) return fmt("%lld KiB", static_cast<long long>(bytes >> 10));
  return fmt("%lld B", static_cast<long long>(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  if (bench::no_usable_gpu("bench_nccl")) return 77;
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const Device dev = Device::cuda(0);
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{4, 1 << 20} : std::vector<int64_t>{4, 4 << 10, 1 << 20, 64 << 20};
  const int iters = quick ? 20 : 200, reps = quick ? 3 : 9;
  std::printf(
      "bench_nccl: %s, world size 1, f32 sum in place, NCCL %d.%d.%d; microseconds per call, median of %d "
      "event-timed windows of %d calls\n",
      dev.str().c_str(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, reps, iters);

  try {
    // ember's group, one algorithm at a time (the store is in-process: no port is configured).
    parallel::TcpStoreOptions so;
    so.port = 0;
    so.is_server = true;
    auto store = std::make_shared<parallel::TcpStore>(so);
    std::map<std::string, std::vector<PerCall>> ember;
    for (const char* algorithm : {"native", "ring"}) {
      parallel::InitOptions o;
      o.backend = "nccl";
      o.algorithm = algorithm;
      o.device = dev;
      o.rank.rank = 0;
      o.rank.world_size = 1;
      o.store = store;
      auto pg = parallel::init_process_group(o);
      for (int64_t bytes : sizes) {
        check_unchanged(*pg, algorithm, bytes / 4, dev);
        Tensor t = from_vector(pattern(bytes / 4), {bytes / 4}, {.device = dev});
        ember[algorithm].push_back(time_calls(dev, iters, reps, [&] { pg->all_reduce(t)->wait(); }));
      }
      pg.reset();
      parallel::destroy_process_group();
    }

    // ncclAllReduce alone, on a stream of its own (as NCCL's callers use it).
    std::vector<PerCall> bare;
    {
      int device = dev.index();
      ncclComm_t comm = nullptr;
      NCCL_CHECK(ncclCommInitAll(&comm, 1, &device));
      StreamGuard on(new_stream(dev));
      const auto stream = static_cast<cudaStream_t>(current_stream(dev).handle());
      for (int64_t bytes : sizes) {
        Tensor t = from_vector(pattern(bytes / 4), {bytes / 4}, {.device = dev});
        bare.push_back(time_calls(dev, iters, reps, [&] {
          NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), bytes / 4, ncclFloat32, ncclSum, comm, stream));
        }));
      }
      synchronize(dev);
      NCCL_CHECK(ncclCommDestroy(comm));
    }

    std::printf("\nPyTorch peer (bench/peers/torch_nccl.py), same GPU, same run:\n");
    const auto peer = bench::run_peer_script("torch_nccl.py", quick ? "--quick" : "");

    bench::Table table({"size", "ember native (us)", "ember ring (us)", "PyTorch (us)", "bare NCCL (us)",
                        "ember native host (us)", "PyTorch host (us)"});
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::string b = std::to_string(sizes[k]);
      table.add({size_str(sizes[k]), fmt("%.2f", ember["native"][k].us), fmt("%.2f", ember["ring"][k].us),
                 peer_figure(peer, "allreduce_us_" + b, "%.2f"), fmt("%.2f", bare[k].us),
                 fmt("%.2f", ember["native"][k].host_us), peer_figure(peer, "allreduce_host_us_" + b, "%.2f")});
    }
    std::printf("\n");
    table.print();
  } catch (const std::exception& e) {
    std::printf("bench_nccl: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
