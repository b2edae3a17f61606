#pragma once
// Where a process sits in a distributed job, read from the launcher's environment: torchrun and
// ember-run (RANK, WORLD_SIZE, ...), Open MPI's mpirun (OMPI_COMM_WORLD_*), Slurm's srun
// (SLURM_PROCID, ...). init_process_group() calls discover_rank(); docs/launch.md describes the
// variables, their order and the errors.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ember::parallel {

/// Where a process learned its place in the job.
struct RankInfo {
  int rank = -1, world_size = -1, local_rank = -1, local_world_size = -1;
  std::string master_addr;  // host name or IP of rank 0's store
  int master_port = -1;
  std::string source;  // "options", "torchrun", "slurm", "openmpi" (which source was used)
};

/// Explicit values; any field left at -1 / "" is read from the environment.
struct RankOptions {
  int rank = -1, world_size = -1, local_rank = -1, local_world_size = -1;
  std::string master_addr{};
  int master_port = -1;
};

/// Fills a RankInfo from `opts` and the environment. When `opts` gives rank and world_size, the
/// caller describes the job: no launcher variable is read, the local values come from `opts` or
/// default to one node. Otherwise every field not in `opts` comes from one launcher's variables,
/// the launcher chosen by which rank variable is present, the innermost launcher first (a launcher
/// started under another inherits the outer one's variables, which describe the outer processes):
///   1. torchrun / ember-run: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
///   2. Open MPI (mpirun):    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
///   3. Slurm (srun):         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
///                            SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE at SLURM_NODEID); master
///                            = first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, expanded
/// MASTER_ADDR / MASTER_PORT set the master in every case (after `opts`). Defaults: master_addr
/// 127.0.0.1 when the whole job is on one node (else an error); master_port 29500, under Slurm
/// 15000 + SLURM_JOB_ID % 20000 (the same on every node of a job, different between jobs);
/// local_world_size = world_size and local_rank = rank % local_world_size when nothing says.
/// `source` is "options" when opts gave rank and world_size, else the launcher's name.
/// `getenv_fn` defaults to std::getenv (tests pass a map). Missing or contradictory settings throw
/// ember::Error naming the variable and its value ("RANK=3 is not below WORLD_SIZE=2",
/// "MASTER_PORT=abc is not an integer").
RankInfo discover_rank(const RankOptions& opts = {}, const std::function<const char*(const char*)>& getenv_fn = {});

/// The rank this process has when a launcher started it (one of RANK, WORLD_SIZE,
/// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE or SLURM_PROCID is set: then discover_rank(), so a
/// launcher that set only part of its variables is an error naming what is missing), or nothing for
/// a plain start. A program that trains alone by default uses it to notice it is one rank of
/// several (world_size > 1). `getenv_fn` as for discover_rank().
std::optional<RankInfo> launcher_rank(const std::function<const char*(const char*)>& getenv_fn = {});

/// Slurm's compact host list -> hosts, in order: "gpu[01-04,07],cpu1" -> gpu01 gpu02 gpu03 gpu04
/// gpu07 cpu1. A range keeps the zero padding of its first bound ("[08-10]" -> 08 09 10); several
/// bracket groups in one name multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). "" -> no hosts.
/// A malformed list (unbalanced brackets, "[3-1]", "[a-b]") throws naming the list.
std::vector<std::string> expand_slurm_nodelist(const std::string& list);

/// Which attempt of a job this process belongs to: EMBER_RESTART_COUNT (set by ember-run
/// --max-restarts), else torchrun's TORCHELASTIC_RESTART_COUNT, else 0. A value that is not a
/// whole number >= 0 throws naming the variable and its value.
int restart_count_from_env();

/// A per-collective timeout and where it came from.
struct CollectiveTimeout {
  double seconds = 300.0;
  std::string source;  // "EMBER_COLLECTIVE_TIMEOUT" or "the default"
};

/// EMBER_COLLECTIVE_TIMEOUT (seconds, > 0, may be fractional) if set, else `fallback_s`; a value
/// that is not a positive number (an empty one included) throws naming the variable and its value.
CollectiveTimeout collective_timeout_from_env(double fallback_s = 300.0);

}  // namespace ember::parallel
