#pragma once
// ProcessGroup: the ranks of a job and the collectives between them, behind one interface for
// every backend ("tcp": CPU tensors over sockets, and CUDA tensors staged through pinned host
// memory; "nccl": CUDA tensors over NCCL). Calls are asynchronous: each returns a Work handle at
// once and the transfer runs on the group's progress thread (tcp) or communication stream (nccl),
// so callers overlap communication with compute and call wait() before touching the tensor again.
//
// Every rank must issue the same collectives in the same order. Each collective gets the next
// sequence number of its group (#1, #2, ...), which errors name. Every collective has a timeout
// (GroupOptions::timeout_s; default 300 s or EMBER_COLLECTIVE_TIMEOUT): a dead, stuck or missing
// rank turns into an error on every other rank, never a hang, and the group is unusable after it.
#include <cstdint>
#include <memory>
#include <string>

#include <ember/core/tensor.h>
#include <ember/parallel/env.h>

namespace ember::parallel {

/// How all_reduce and reduce_scatter combine the ranks' values.
enum class ReduceOp : uint8_t { sum, avg, max, min };
/// "sum", "avg", "max", "min".
const char* reduce_op_name(ReduceOp op);

/// A collective in flight. wait() returns once the result is usable (tcp: the tensor holds it;
/// nccl: work queued afterwards on the caller's current stream sees it) and throws the
/// collective's error, if any.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective is done (nccl: orders the current stream after it); rethrows its
  /// error.
  virtual void wait() = 0;
  /// True once the collective has finished, successfully or not (does not block).
  virtual bool is_completed() = 0;
  /// Once completed: seconds the backend spent running this collective, from when it started
  /// moving data (not when it was queued) to its end (tcp: on the progress thread; nccl: between
  /// events on the communication stream). 0 before completion.
  virtual double busy_seconds() = 0;
};

/// Settings shared by every backend.
struct GroupOptions {
  double timeout_s = 300.0;  // per collective; see collective_timeout_from_env
  bool debug = false;  // check every collective's op, shape and dtype on all ranks first
  /// all_reduce algorithm of the nccl backend: "native" (ncclAllReduce) or "ring" (ember's ring
  /// over ncclSend/ncclRecv). The tcp backend always runs the ring.
  std::string algorithm = "native";
  /// The group's device for nccl (default: cuda:<local_rank % device count>).
  Device device = Device::cpu();
  /// Ring pipelining: bytes per slice sent and reduced as a unit (0: the backend's default).
  int64_t slice_bytes = 0;
};

/// The ranks of a job and the collectives between them.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return info_.rank; }
  int world_size() const { return info_.world_size; }
  int local_rank() const { return info_.local_rank; }
  /// Where rank and world size came from (info().source: "options", "torchrun", "slurm", ...).
  const RankInfo& info() const { return info_; }
  /// "tcp", "nccl" or "auto".
  virtual std::string backend() const = 0;
  /// Timeout of each collective, in seconds.
  double timeout_s() const { return opts_.timeout_s; }
  const GroupOptions& options() const { return opts_; }
  /// Where small tensors of bookkeeping collectives go: the group's CUDA device for nccl, else
  /// the CPU.
  virtual Device message_device() const { return Device::cpu(); }

  /// In place: every rank's `t` becomes the elementwise reduction of all ranks' `t` (same shape
  /// and dtype on every rank; contiguous). Dtypes f32, f64, f16, bf16, i32, i64 (avg of an
  /// integer tensor divides with truncation).
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  /// In place: every rank's `t` becomes rank `root`'s `t`.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  /// `out` (world_size * input.numel() elements, any shape, input's dtype) receives every rank's
  /// `input` in rank order: rank r's input lands at elements [r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& input) = 0;
  /// `input` holds world_size blocks of out.numel() elements; `out` receives the reduction over
  /// all ranks of block `rank()`. `input` is not modified.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& input, ReduceOp op = ReduceOp::sum) = 0;
  /// Completes once every rank has called it.
  virtual std::shared_ptr<Work> barrier() = 0;
  /// Sends `t` to rank `dst`, which must call recv with the same size and dtype. Sends and
  /// receives between two ranks are matched in the order they are issued.
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst) = 0;
  /// Receives into `t` what rank `src` sends.
  virtual std::shared_ptr<Work> recv(const Tensor& t, int src) = 0;

  /// Sequence number the last collective got (0 before the first).
  virtual uint64_t sequence_number() const = 0;

 protected:
  ProcessGroup(RankInfo info, GroupOptions opts) : info_(std::move(info)), opts_(std::move(opts)) {}

  RankInfo info_;
  GroupOptions opts_;
};

}  // namespace ember::parallel
