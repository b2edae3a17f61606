#pragma once
// The "tcp" backend: a TCP connection between every pair of ranks (set up through the store), one
// progress thread per group that runs the queued calls in order, ember's ring for all_reduce,
// reduce_scatter and all_gather, a pipelined chain for broadcast. CPU tensors are used in place;
// CUDA tensors are staged through pinned host memory (slower, but two processes can then share
// one GPU, which NCCL refuses).
//
// Failures: a peer that closes or resets its connection is reported at once by the ranks that
// exchange data with it, which also publish the failure in the store; a rank blocked in a
// collective checks the store about once a second, so the others report it too. Otherwise the
// collective's timeout ends the wait, and the error says which ranks have not called the
// collective yet (each rank records in the store which collective it has started).
#include <memory>

#include <ember/parallel/process_group.h>
#include <ember/parallel/store.h>

namespace ember::parallel {

/// Connects this rank to every other rank of `info.world_size` through `store` (all ranks call
/// this at about the same time) and returns the group. Connecting waits at most
/// opts.timeout_s; the error names the ranks that never showed up.
std::shared_ptr<ProcessGroup> make_tcp_process_group(std::shared_ptr<Store> store, const RankInfo& info,
                                                     const GroupOptions& opts);

}  // namespace ember::parallel
