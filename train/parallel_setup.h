#pragma once
// The parallel side of an ember-train run (config key `parallel`): the process group and this
// rank's device under ddp, the device list under dp, and the module the training loop calls.
//
//   none  one process, one device (`device`).
//   dp    one process; parallel::DataParallel splits every batch over `parallel.devices`.
//   ddp   one process per device, started by a launcher (ember-run, torchrun, srun, mpirun);
//         parallel::DistributedDataParallel averages gradients; each rank reads its own share of
//         the data (data::DistributedSampler); rank 0 alone writes the run directory.
#include <memory>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/layers/module.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/env.h>
#include <ember/parallel/process_group.h>
#include <ember/train/config.h>

namespace ember::train {

struct ParallelRun {
  ParallelMode mode = ParallelMode::none;
  /// ddp only.
  std::shared_ptr<parallel::ProcessGroup> group;
  /// ddp: this process's rank and the number of processes; otherwise 0 and 1.
  int rank = 0, world_size = 1;
  /// Where this process keeps its model and batches (dp: the output device).
  Device device = Device::cpu();
  /// dp: the replicas' devices.
  std::vector<Device> devices;
  /// ddp on the CPU: the kernel threads this rank took (kernel_threads_per_rank); 0 when left as
  /// they were (a GPU, or EMBER_NUM_THREADS set).
  int kernel_threads_set = 0;
  /// What the run should say about how it was set up ("" when nothing).
  std::string note;
  /// ddp: where the collective timeout (group->timeout_s()) came from: "parallel.timeout_s",
  /// "EMBER_COLLECTIVE_TIMEOUT" or "the default".
  std::string timeout_source;

  bool is_root() const { return rank == 0; }
  bool distributed() const { return group != nullptr && world_size > 1; }
  /// How many devices train: processes under ddp, replicas under dp, else 1.
  int64_t device_count() const { return mode == ParallelMode::dp ? static_cast<int64_t>(devices.size()) : world_size; }
  /// Processes that each load a batch per step: the world size under ddp, else 1 (DataParallel
  /// splits one batch inside its process).
  int64_t processes() const { return mode == ParallelMode::ddp ? world_size : 1; }
  /// "batch 32 per rank x 4 ranks = 128", "batch 64 split over cpu, cpu", "batch 64", with
  /// accumulation "batch 32 per rank x 2 ranks x 4 accumulation steps = 256".
  std::string batch_text(int64_t batch_size, int64_t accumulation_steps = 1) const;
};

/// Kernel threads for one CPU rank: the cores this process may run on (its CPU affinity, which
/// Slurm and HTCondor may narrow), divided among the ranks on this machine when they all share
/// them, as the ranks of ember-run and torchrun do ("torchrun" variables). srun usually binds each
/// task to its own --cpus-per-task cores, and mpirun binds ranks too, so their ranks keep theirs.
int kernel_threads_per_rank(const parallel::RankInfo& info);
/// On a CPU `device`, unless EMBER_NUM_THREADS is set: sets the kernel threads to
/// kernel_threads_per_rank(info) and returns that number; otherwise changes nothing and returns 0.
int share_cores_among_ranks(const parallel::RankInfo& info, Device device);

/// parallel.mode dp's devices: parallel.devices, or every visible GPU when it is empty; an error
/// naming the key when there is none or one is not usable here.
std::vector<Device> data_parallel_devices(const ParallelConfig& parallel);

/// Chooses the device(s) and, under ddp, joins the process group (rank, world size and master
/// from the launcher's environment; see parallel::init_process_group). ddp's device: `device`
/// auto or cuda means cuda:<local_rank % GPUs> when GPUs are usable, cpu otherwise; a CPU rank
/// takes kernel_threads_per_rank() threads unless EMBER_NUM_THREADS is set. ddp without a
/// launcher trains as one plain process (mode "none", with a note saying so).
ParallelRun start_parallel(const ExperimentConfig& config);
/// The same for a program without a config: `device` as the config key (auto, cpu, cuda, cuda:N),
/// `parallel` as the parallel keys.
ParallelRun start_parallel(const std::string& device, const ParallelConfig& parallel);

/// The module the loop calls: `model` itself, or wrapped in DataParallel / DDP (with
/// config.sync_batchnorm under ddp, its BatchNorm2d layers synced over the ranks first).
std::shared_ptr<layers::Module> wrap_model(const ParallelRun& run, const ParallelConfig& config,
                                           const std::shared_ptr<layers::Module>& model);

/// Under ddp: the largest `value` of all ranks, on every rank (one small all-reduce); else
/// `value`. A stop signal that reached any rank thereby ends every rank after the same step.
int max_over_ranks(const ParallelRun& run, int value);

}  // namespace ember::train
