#pragma once
// The "nccl" backend, for CUDA tensors (CUDA builds only; elsewhere the factory throws).
//
// Rank 0 creates the ncclUniqueId and passes it through the store; the group has one communicator
// on its device and one communication stream. A collective waits (device-side, through an event)
// for the work already queued on the caller's current stream, runs on the communication stream,
// and its Work::wait() makes the caller's current stream wait for it in turn; the tensors are
// recorded with the caching allocator's record_stream so their memory is not reused while NCCL
// still reads it. all_reduce runs ncclAllReduce ("native") or ember's ring over
// ncclSend/ncclRecv with a CUDA reduction kernel ("ring"). A watchdog thread polls
// ncclCommGetAsyncError and the collectives' completion, and aborts the communicator when one
// fails or outlives the timeout; later calls then throw the failure.
#include <memory>

#include <ember/parallel/process_group.h>
#include <ember/parallel/store.h>

namespace ember::parallel {

/// True when this build has NCCL and a GPU of its own for each of `local_world_size` ranks on this
/// machine (NCCL refuses two ranks on one device).
bool nccl_usable(int local_world_size);

/// Creates the communicator (all ranks call this together). Throws in builds without CUDA.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, const RankInfo& info,
                                                      const GroupOptions& opts);

namespace detail {
/// Test hook for one GPU: the nccl ring's transport and reduction with this process as its own
/// next and previous rank. Sends `src` to itself through one ncclSend/ncclRecv group into a
/// staging buffer, then reduces it into `dst` (dst = op(dst, src)) with the ring's CUDA kernel.
/// Blocks until done. Throws in builds without CUDA.
void nccl_ring_self_exchange(const Tensor& src, const Tensor& dst, ReduceOp op);
}  // namespace detail

}  // namespace ember::parallel
