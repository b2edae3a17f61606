#pragma once
// init_process_group: the one call a distributed program makes first.
//
//   auto pg = parallel::init_process_group();       // rank etc. from ember-run / torchrun / Slurm / mpirun
//   pg->all_reduce(grad)->wait();                    // or parallel::default_group().all_reduce(...)
//   std::printf("rank %d of %d (from %s)\n", pg->rank(), pg->world_size(), pg->info().source.c_str());
//
// Rank 0 hosts the TCP store at MASTER_ADDR:MASTER_PORT; every rank connects to it, then the chosen
// backend connects the ranks to each other.
#include <memory>
#include <string>

#include <ember/parallel/env.h>
#include <ember/parallel/process_group.h>
#include <ember/parallel/store.h>

namespace ember::parallel {

/// What init_process_group() does; every field has a default that works under a launcher.
struct InitOptions {
  /// "auto" (nccl for CUDA tensors when NCCL is usable, tcp otherwise), "tcp" or "nccl".
  std::string backend = "auto";
  /// Explicit rank, world size and master; fields left unset come from the environment.
  RankOptions rank;
  /// Per-collective timeout in seconds; 0: EMBER_COLLECTIVE_TIMEOUT when set, else 300.
  double timeout_s = 0;
  /// Check that every rank calls the same collective with the same shape and dtype before each
  /// one (also turned on by EMBER_DISTRIBUTED_DEBUG=1).
  bool debug = false;
  /// nccl all_reduce: "native" (ncclAllReduce) or "ring" (ember's ring over ncclSend/ncclRecv).
  std::string algorithm = "native";
  /// nccl device; the CPU value means cuda:<local_rank % device count>.
  Device device = Device::cpu();
  /// Ring slice size in bytes (0: the backend's default).
  int64_t slice_bytes = 0;
  /// A store to use instead of hosting/connecting one at MASTER_ADDR:MASTER_PORT.
  std::shared_ptr<Store> store;
};

/// Discovers this process's rank (discover_rank), sets up the store and the group, and keeps the
/// group as the default group. Errors name the setting at fault (MASTER_PORT in use, MASTER_ADDR
/// that does not resolve, RANK >= WORLD_SIZE, an unknown backend, ...).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts = {});
/// init_process_group's warning on rank 0 (printed to stderr), or "": the store is served at
/// `served`, a loopback address, while the job spans several nodes (local_world_size below
/// world_size), which other hosts cannot reach (a host name /etc/hosts maps to 127.0.1.1).
std::string loopback_master_warning(const RankInfo& info, const std::string& served);
/// The group of the last init_process_group(); throws when there is none.
ProcessGroup& default_group();
/// True between init_process_group() and destroy_process_group().
bool is_initialized();
/// Drops the default group (its connections close once no other handle holds it).
void destroy_process_group();

}  // namespace ember::parallel
