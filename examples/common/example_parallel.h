#pragma once
// example_parallel.h: how ember's example programs (examples/mnist, examples/cifar) train on
// several devices. One program, three ways to run it:
//
//   build/bin/mnist                                          one device (the first GPU, else the CPU)
//   build/bin/mnist --data-parallel [--devices cpu,cpu]      one process, the batch split over devices
//   build/bin/ember-run --nproc-per-node 2 build/bin/mnist   one process per device (DDP)
//
// * --data-parallel wraps the model in parallel::DataParallel: each batch (--batch-size images)
//   is split over the devices, one replica each, and the gradients are summed back onto the model.
// * Under a launcher (ember-run, torchrun, srun, mpirun: see docs/launch.md), when the job has
//   more than one rank, the process joins the job (parallel::init_process_group), takes
//   cuda:LOCAL_RANK (or the CPU when no GPU is visible), wraps the model in
//   parallel::DistributedDataParallel and trains on its share of each epoch
//   (data::DistributedSampler); --batch-size is per rank. The test split is shared out the same
//   way and the totals are summed (example_cli.h's evaluate), so rank 0 reports the accuracy over
//   every test image once. Only rank 0 prints the epoch lines, writes --metrics-out and
//   checkpoints; a checkpoint holds the plain model's state, so it loads into any of the three.
// * --accumulation-steps N adds the gradients of N batches before each optimizer step; under DDP
//   the first N-1 run under no_sync(), so the gradients cross the network once per step. Each
//   example's loop calls train_batch() for this, per batch.
//
// Header-only, against ember's installed public headers, like example_cli.h.
#include <ember/ember.h>
#include <ember/parallel/env.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "example_cli.h"
#include "example_precision.h"

namespace ember_examples {

// ---------------------------------------------------------------------------------------------
// Flags

/// The flags for several devices, shared by the examples.
struct ParallelFlags {
  bool data_parallel = false;  // --data-parallel
  std::vector<std::string> devices;  // --devices, as spelled (empty: every visible GPU)
  int64_t accumulation_steps = 1;  // --accumulation-steps
};

/// --devices LIST: comma-separated cpu, cuda or cuda:N, at least one; otherwise a UsageError.
inline std::vector<std::string> parse_devices_list(const std::string& flag, const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    const std::string d = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool ok =
        d == "cpu" || d == "cuda" ||
        (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.find_first_not_of("0123456789", 5) == std::string::npos);
    if (!ok)
      throw UsageError(flag + " expects devices separated by commas (cpu, cuda or cuda:N), e.g. cuda:0,cuda:1 or " +
                       "cpu,cpu; got '" + v + "'");
    out.push_back(d);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

/// Appends --data-parallel, --devices and --accumulation-steps to FLAGS, storing into P.
inline void add_parallel_flags(std::vector<Flag>& flags, ParallelFlags& p) {
  flags.push_back({"--data-parallel", [&p](auto&, auto&) { p.data_parallel = true; }, /*takes_value=*/false});
  flags.push_back({"--devices", [&p](auto& f, auto& v) { p.devices = parse_devices_list(f, v); }});
  flags.push_back({"--accumulation-steps", [&p](auto& f, auto& v) { p.accumulation_steps = parse_int(f, v, 1); }});
}

/// The end of both examples' usage text: the flags above, --help, and how to run on several
/// processes. PROGRAM names the example ("mnist").
inline std::string parallel_usage(const std::string& program) {
  return "  --accumulation-steps N\n"
         "                        add up the gradients of N batches before each optimizer step (default 1)\n"
         "  --data-parallel       one process, several devices: split each batch of --batch-size images\n"
         "                        over --devices (parallel::DataParallel)\n"
         "  --devices LIST        with --data-parallel: e.g. cuda:0,cuda:1 or cpu,cpu (default: every\n"
         "                        visible GPU)\n"
         "  --help                print this and exit\n"
         "\n"
         "Several processes (parallel::DistributedDataParallel): start it under a launcher, e.g.\n"
         "  build/bin/ember-run --nproc-per-node 2 build/bin/" +
         program +
         " [options]\n"
         "(or torchrun, srun, mpirun: docs/launch.md; Slurm and HTCondor job files in examples/slurm,\n"
         "examples/htcondor). Each process is one rank on cuda:LOCAL_RANK, or on the CPU when no GPU is\n"
         "visible (or with --device cpu); --batch-size is per rank. Rank 0 prints the epoch lines and\n"
         "writes --metrics-out and the checkpoints; every rank reads --resume.\n";
}

// ---------------------------------------------------------------------------------------------
// Setting up a run

/// How this process trains: on one device, DataParallel over several, or as one rank of a DDP job.
struct ParallelRun {
  enum class Mode { single, data_parallel, distributed };
  Mode mode = Mode::single;
  /// Where the model lives and the loaders deliver batches (DataParallel: the first device).
  ember::Device device;
  /// DataParallel's devices, one replica each.
  std::vector<ember::Device> replicas;
  /// distributed: the job's process group, and the model's wrapper once wrap_model() made it.
  std::shared_ptr<ember::parallel::ProcessGroup> group;
  std::shared_ptr<ember::parallel::DistributedDataParallel> ddp;
  ember::parallel::RankInfo rank_info;  // distributed only
  int kernel_threads_set = 0;  // threads per rank chosen here (0: left as they were)

  bool distributed() const { return mode == Mode::distributed; }
  int rank() const { return distributed() ? group->rank() : 0; }
  int world_size() const { return distributed() ? group->world_size() : 1; }
  /// Rank 0, or the only process: the one that prints, writes metrics and checkpoints.
  bool is_main() const { return rank() == 0; }
  /// The group for collective evaluation (nullptr outside DDP).
  ember::parallel::ProcessGroup* eval_group() const { return group.get(); }

  /// Under DDP, while SYNC is false, a guard that keeps backward from reducing gradients
  /// (DistributedDataParallel::no_sync); nothing otherwise.
  std::optional<ember::parallel::DistributedDataParallel::NoSyncGuard> no_sync_unless(bool sync) const {
    if (ddp == nullptr || sync) return std::nullopt;
    return std::optional<ember::parallel::DistributedDataParallel::NoSyncGuard>(std::in_place, *ddp);
  }
};

/// Decides how this process trains from --device (DEVICE_FLAG), the parallel flags and the
/// launcher's variables, and for a DDP rank joins the job (init_process_group: collective, rank 0
/// hosts the store). Bad combinations are UsageErrors.
inline ParallelRun setup_parallel(const std::string& device_flag, const ParallelFlags& flags) {
  using namespace ember;
  ParallelRun run;
  if (!flags.devices.empty() && !flags.data_parallel)
    throw UsageError("--devices lists the devices of --data-parallel: add --data-parallel");

  std::optional<parallel::RankInfo> info;
  try {
    info = parallel::launcher_rank();
  } catch (const Error& e) {  // a launcher's variables set in part (WORLD_SIZE without RANK, ...)
    throw UsageError(e.message());
  }
  if (info && info->world_size > 1) {
    if (flags.data_parallel)
      throw UsageError("--data-parallel splits batches over the devices of one process, but this process is rank " +
                       std::to_string(info->rank) + " of " + std::to_string(info->world_size) + " (" + info->source +
                       " variables), which trains with DistributedDataParallel: drop --data-parallel");
    // One device per rank: cuda:LOCAL_RANK (modulo the visible GPUs, so that a job whose launcher
    // shows each task only its own GPU works too), or the CPU.
    const int gpus = cuda_device_count();
    if (device_flag == "cpu" || (device_flag == "auto" && gpus == 0)) {
      run.device = Device::cpu();
    } else if (device_flag == "auto" || device_flag == "cuda") {
      if (gpus == 0) throw UsageError("--device cuda cannot be used here: " + cuda_unavailable_reason());
      run.device = Device::cuda(info->local_rank % gpus);
    } else {
      throw UsageError("--device " + device_flag +
                       ": under a launcher each rank takes cuda:LOCAL_RANK; pass --device " + "auto, cuda or cpu");
    }
    // CPU ranks on one machine share its cores (ember-train's rule, EMBER_NUM_THREADS overrides).
    run.kernel_threads_set = ember::train::share_cores_among_ranks(*info, run.device);
    parallel::InitOptions init;
    if (run.device.is_cuda()) init.device = run.device;
    run.group = parallel::init_process_group(init);
    run.rank_info = run.group->info();
    run.mode = ParallelRun::Mode::distributed;
    return run;
  }

  if (flags.data_parallel) {
    if (device_flag != "auto")
      throw UsageError("--device " + device_flag + " and --data-parallel: give DataParallel's devices with --devices");
    if (flags.devices.empty()) {
      const int gpus = cuda_device_count();
      if (gpus == 0)
        throw UsageError("--data-parallel without --devices uses every visible GPU, and none is usable here (" +
                         cuda_unavailable_reason() + "); pass --devices cpu,cpu to try it on the CPU");
      for (int i = 0; i < gpus; ++i) run.replicas.push_back(Device::cuda(i));
    } else {
      for (const std::string& d : flags.devices) run.replicas.push_back(pick_device(d));
    }
    run.device = run.replicas.front();
    run.mode = ParallelRun::Mode::data_parallel;
    return run;
  }
  run.device = pick_device(device_flag);
  return run;
}

/// The module the training loop calls: MODEL itself, or MODEL wrapped in DataParallel or
/// DistributedDataParallel as RUN says (DDP: collective; every rank takes rank 0's parameters).
/// MODEL must already be on RUN.device. Optimizers and checkpoints use MODEL itself.
inline ember::layers::ModulePtr wrap_model(const ember::layers::ModulePtr& model, ParallelRun& run) {
  using namespace ember;
  switch (run.mode) {
    case ParallelRun::Mode::data_parallel:
      return std::make_shared<parallel::DataParallel>(model, run.replicas);
    case ParallelRun::Mode::distributed:
      run.ddp = std::make_shared<parallel::DistributedDataParallel>(model, run.group);
      return run.ddp;
    case ParallelRun::Mode::single:
      break;
  }
  return model;
}

/// OPTS with, under DDP, this rank's share of the N examples as the sampler (a shuffled share,
/// the same permutation on every rank for OPTS.seed and the epoch, when OPTS.shuffle; else the
/// examples in order, for evaluation); OPTS unchanged otherwise.
inline ember::data::DataLoaderOptions sharded(ember::data::DataLoaderOptions opts, const ParallelRun& run, int64_t n) {
  if (!run.distributed()) return opts;
  opts.sampler = std::make_shared<ember::data::DistributedSampler>(
      n, run.rank(), run.world_size(),
      ember::data::DistributedSamplerOptions{.shuffle = opts.shuffle, .seed = opts.seed});
  opts.shuffle = false;
  return opts;
}

/// The default generator's seed for EPOCH on RANK of a DDP run (dropout draws from it): the
/// ranks' dropout masks differ, and each epoch's stream depends only on (seed, rank, epoch), so
/// a resumed run continues as the uninterrupted one on every rank.
inline uint64_t rank_epoch_seed(uint64_t seed, int rank, int64_t epoch) {
  uint64_t z = seed ^ (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finalizer
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------------------------------------
// Gradient accumulation

/// Which batches of an epoch of BATCHES batches zero the gradients, which end an optimizer step,
/// and by how much each batch's loss is scaled, for STEPS batches per optimizer step. A last group
/// of fewer batches (BATCHES not a multiple of STEPS) is scaled by its own size, so every step
/// follows the mean loss of its batches.
class Accumulation {
 public:
  Accumulation(int64_t steps, int64_t batches) : steps_(steps), batches_(batches) {}
  /// Batch I (0-based within the epoch) starts an optimizer step: zero the gradients first.
  bool starts_step(int64_t i) const { return i % steps_ == 0; }
  /// Batch I ends one: reduce (DDP) and step after its backward.
  bool ends_step(int64_t i) const { return (i + 1) % steps_ == 0 || i + 1 == batches_; }
  /// LOSS (0-d) of batch I scaled for backward: 1/(batches in its step); LOSS itself for 1.
  ember::Tensor scaled(const ember::Tensor& loss, int64_t i) const {
    const int64_t first = i - i % steps_, group = std::min(steps_, batches_ - first);
    return group > 1 ? loss * (1.0 / static_cast<double>(group)) : loss;
  }
  /// Optimizer steps in an epoch.
  int64_t steps_per_epoch() const { return (batches_ + steps_ - 1) / steps_; }

 private:
  int64_t steps_, batches_;
};

/// One training batch (index I of the epoch): zeroes the gradients when it starts an optimizer
/// step, runs NET on BATCH (under PRECISION's autocast) and backward of the cross-entropy (scaled
/// for accumulation and, under fp16, by the loss scale; under DDP without reducing the gradients
/// unless the batch ends a step), and when the batch ends a step, steps OPT through the scaler
/// (skipped under fp16 when a gradient is not finite) and updates the scale. Returns the batch's
/// loss (0-d f32, f64 for an f64 model; unscaled, still holding its graph) and whether the batch ended a step (skipped
/// or not: the schedule and the step count follow the batches, as in ember-train). INPUT_FORMAT:
/// the layout the batch is given to NET in (--channels-last).
inline std::pair<ember::Tensor, bool> train_batch(ember::layers::Module& net, ember::optim::Optimizer& opt,
                                                  const ParallelRun& run, const Accumulation& accumulation,
                                                  MixedPrecision& precision, int64_t i, const ember::data::Batch& batch,
                                                  ember::MemoryFormat input_format = ember::MemoryFormat::contiguous) {
  if (accumulation.starts_step(i)) opt.zero_grad();
  const bool step = accumulation.ends_step(i);
  ember::Tensor loss;
  {
    auto no_sync = run.no_sync_unless(step);  // DDP: reduce the gradients once per step
    {
      auto low = precision.autocast();  // the forward and the loss only (docs/amp.md)
      loss = ember::layers::cross_entropy(net.forward(in_format(batch.input, input_format)),
                                          batch.target);  // 0-d, f32 (f64 for an f64 model)
    }
    precision.scaler().scale(accumulation.scaled(loss, i)).backward();
  }
  if (step) {
    precision.scaler().step(opt);  // opt.step(), or skipped (fp16, a gradient not finite)
    precision.scaler().update();
  }
  return {loss, step};
}

// ---------------------------------------------------------------------------------------------
// Output

/// The batch as the run sees it: "32", "32 x 4 accumulation steps = 128", "64 split over 2
/// devices", "32 per rank x 2 ranks = 64", ...
inline std::string batch_text(const ParallelRun& run, int64_t batch_size, int64_t accumulation_steps) {
  std::string text = std::to_string(batch_size);
  int64_t total = batch_size;
  if (run.mode == ParallelRun::Mode::data_parallel)
    text += " split over " + std::to_string(run.replicas.size()) + " devices";
  if (run.distributed()) {
    text += " per rank x " + std::to_string(run.world_size()) + " ranks";
    total *= run.world_size();
  }
  if (accumulation_steps > 1) {
    text += " x " + std::to_string(accumulation_steps) + " accumulation steps";
    total *= accumulation_steps;
  }
  if (total != batch_size) text += " = " + std::to_string(total);
  return text;
}

/// Says how PROGRAM trains: for DataParallel its devices; under DDP one line per rank (its device)
/// and, on rank 0, the job (world size, launcher, master, backend). Nothing for one device.
inline void print_parallel_setup(const char* program, const ParallelRun& run) {
  if (run.mode == ParallelRun::Mode::data_parallel) {
    std::string list;
    for (const ember::Device& d : run.replicas) list += (list.empty() ? "" : ", ") + d.str();
    std::printf("%s: DataParallel over %zu devices: %s (the model and the batches on %s)\n", program,
                run.replicas.size(), list.c_str(), run.device.str().c_str());
  } else if (run.distributed()) {
    const ember::parallel::RankInfo& i = run.rank_info;
    if (run.is_main())
      std::printf("%s: DistributedDataParallel, world size %d (%s variables; master %s:%d; backend %s)\n", program,
                  i.world_size, i.source.c_str(), i.master_addr.c_str(), i.master_port, run.group->backend().c_str());
    std::string threads;
    if (run.device.is_cpu())
      threads = ", " + std::to_string(ember::num_threads()) + " kernel thread(s)" +
                (run.kernel_threads_set > 0 ? "" : " from EMBER_NUM_THREADS");
    std::printf("%s: rank %d of %d on %s (local rank %d of %d%s)\n", program, i.rank, i.world_size,
                run.device.str().c_str(), i.local_rank, i.local_world_size, threads.c_str());
  }
  std::fflush(stdout);
}

/// The mean of the training loss over the epoch and the number of images trained on, over all
/// ranks under DDP (collective): LOSS_SUM (0-d f64 on the device) sums batch loss x batch size
/// over this rank's SEEN images.
inline std::pair<double, int64_t> epoch_train_loss(const ParallelRun& run, const ember::Tensor& loss_sum,
                                                   int64_t seen) {
  ember::parallel::EvalTotals mine{loss_sum.item<double>(), 0, seen};
  if (run.distributed()) mine = ember::parallel::all_reduce_totals(*run.group, mine);
  return {mine.mean_loss(), mine.count};
}

/// The end of a run: under DDP, waits for every rank (rank 0 may still be writing its last
/// checkpoint) and leaves the job.
inline void finish_parallel(const ParallelRun& run) {
  if (!run.distributed()) return;
  run.group->barrier()->wait();
  ember::parallel::destroy_process_group();
}

}  // namespace ember_examples
