// ParallelRun (see parallel_setup.h).
#include <ember/train/parallel_setup.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/thread_pool.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/comm_hooks.h>
#include <ember/parallel/data_parallel.h>
#include <ember/parallel/env.h>
#include <ember/parallel/init.h>
#include <ember/parallel/sync_batchnorm.h>

namespace ember::train {

int kernel_threads_per_rank(const parallel::RankInfo& info) {
  const int sharing = info.source == "torchrun" ? std::max(1, info.local_world_size) : 1;
  return std::max(1, available_cores() / sharing);
}

int share_cores_among_ranks(const parallel::RankInfo& info, Device device) {
  const char* env_threads = std::getenv("EMBER_NUM_THREADS");
  if (!device.is_cpu() || (env_threads != nullptr && *env_threads != '\0')) return 0;
  const int n = kernel_threads_per_rank(info);
  set_num_threads(n);
  return n;
}

std::string ParallelRun::batch_text(int64_t batch_size, int64_t accumulation_steps) const {
  std::string text = "batch " + std::to_string(batch_size);
  int64_t total = batch_size;
  if (mode == ParallelMode::ddp) {
    text += " per rank x " + std::to_string(world_size) + " rank" + (world_size == 1 ? "" : "s");
    total *= world_size;
  }
  if (mode == ParallelMode::dp) {
    std::string list;
    for (const Device& d : devices) list += (list.empty() ? "" : ", ") + d.str();
    text += " split over " + list;
  }
  if (accumulation_steps > 1) {
    text += " x " + std::to_string(accumulation_steps) + " accumulation steps";
    total *= accumulation_steps;
  }
  return mode == ParallelMode::ddp || accumulation_steps > 1 ? text + " = " + std::to_string(total) : text;
}

std::vector<Device> data_parallel_devices(const ParallelConfig& parallel) {
  std::vector<Device> devices;
  for (const std::string& d : parallel.devices) devices.push_back(Device(d));
  if (devices.empty()) {
    const int n = cuda_device_count();
    EMBER_CHECK(n > 0, "parallel.mode dp with parallel.devices [] uses every visible GPU, but there is none (",
                cuda_unavailable_reason(), "); list devices, e.g. parallel.devices=cpu,cpu");
    for (int i = 0; i < n; ++i) devices.push_back(Device::cuda(i));
  }
  for (const Device& d : devices) {
    try {
      d.validate();
    } catch (const Error& e) {
      throw Error("parallel.devices: " + d.str() + ": " + e.message());
    }
  }
  return devices;
}

ParallelRun start_parallel(const ExperimentConfig& c) { return start_parallel(c.device, c.parallel); }

ParallelRun start_parallel(const std::string& device, const ParallelConfig& parallel) {
  ParallelRun run;
  run.mode = parallel.mode;
  if (run.mode == ParallelMode::dp) {
    run.devices = data_parallel_devices(parallel);
    run.device = run.devices[0];
    return run;
  }
  if (run.mode == ParallelMode::ddp && !parallel::launcher_rank()) {
    // A config written for DDP also runs as it is without a launcher: as one plain process.
    run.mode = ParallelMode::none;
    run.note =
        "parallel.mode ddp without a launcher: training as one process (start it with "
        "ember-run --nproc-per-node N, torchrun, srun or mpirun for DistributedDataParallel)";
  }
  if (run.mode == ParallelMode::ddp) {
    const parallel::RankInfo info = parallel::discover_rank({});
    const std::string& want = device;
    if (want == "cpu" || (want == "auto" && cuda_device_count() == 0)) {
      run.device = Device::cpu();
    } else if (want == "auto" || want == "cuda") {
      const int n = cuda_device_count();
      EMBER_CHECK(n > 0, "device cuda with parallel.mode ddp: no usable GPU (", cuda_unavailable_reason(), ")");
      run.device = Device::cuda(info.local_rank % n);
    } else {
      run.device = Device(want);
    }
    run.device.validate();
    // CPU ranks on one machine share its cores instead of all oversubscribing every core.
    run.kernel_threads_set = share_cores_among_ranks(info, run.device);
    parallel::InitOptions o;
    o.backend = parallel.backend;
    o.algorithm = parallel.algorithm;
    // The config's key when set, else the environment's EMBER_COLLECTIVE_TIMEOUT, else 300 s.
    if (parallel.timeout_s) {
      o.timeout_s = *parallel.timeout_s;
      run.timeout_source = "parallel.timeout_s";
    } else {
      const parallel::CollectiveTimeout t = parallel::collective_timeout_from_env();
      o.timeout_s = t.seconds;
      run.timeout_source = t.source;
    }
    if (run.device.is_cuda()) o.device = run.device;
    run.group = parallel::init_process_group(o);
    run.rank = run.group->rank();
    run.world_size = run.group->world_size();
    return run;
  }
  // One rank of several that would train alone: every rank would write the same run directory.
  if (const auto info = parallel::launcher_rank(); info && info->world_size > 1) {
    throw Error("this process is rank " + std::to_string(info->rank) + " of " + std::to_string(info->world_size) +
                " (" + info->source + " variables) but parallel.mode is " + config_name(run.mode) +
                ": set parallel.mode=ddp to train with DistributedDataParallel, or start one process");
  }
  run.device = device == "auto" ? Device::best() : Device(device);
  run.device.validate();
  return run;
}

std::shared_ptr<layers::Module> wrap_model(const ParallelRun& run, const ParallelConfig& config,
                                           const std::shared_ptr<layers::Module>& model) {
  if (run.mode == ParallelMode::dp) return std::make_shared<parallel::DataParallel>(model, run.devices, run.device);
  if (run.mode == ParallelMode::ddp && config.sync_batchnorm) parallel::convert_sync_batchnorm(model, run.group);
  if (run.mode == ParallelMode::ddp)
    return std::make_shared<parallel::DistributedDataParallel>(
        model, run.group,
        parallel::DdpOptions{.bucket_cap_mb = config.bucket_cap_mb,
                             .comm_hook = parallel::comm_hook_named(config.comm_hook)});
  return model;
}

int max_over_ranks(const ParallelRun& run, int value) {
  if (!run.distributed()) return value;
  Tensor t = from_vector(std::vector<int64_t>{value}, {1}).to(run.group->message_device());
  run.group->all_reduce(t, parallel::ReduceOp::max)->wait();
  return static_cast<int>(t.item<int64_t>());
}

}  // namespace ember::train
