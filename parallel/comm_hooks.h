#pragma once
// DDP communication hooks, as PyTorch's DistributedDataParallel.register_comm_hook: the reducer
// hands each gradient bucket to a hook, which starts whatever communication it likes and returns
// a Work; once that Work's wait() returns, the bucket must hold the gradients averaged over the
// ranks. "Bucket in, future out".
//
//   parallel::DistributedDataParallel ddp(model, pg, {.comm_hook = parallel::fp16_compress_hook});
//   // or a user's: count, compress, or delegate
//   auto hook = [&calls](parallel::GradBucket& b) { ++calls; return parallel::allreduce_hook(b); };
//
// The built-in hooks: allreduce_hook (the default: one all_reduce(avg) of the bucket, as DDP
// without a hook), fp16_compress_hook and bf16_compress_hook (the bucket travels as f16 / bf16:
// half the bytes of f32 on the wire, at the price of one rounding to 11 / 8 significant bits).
// These only talk to the process group, so they sit in parallel/'s communication half.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ember/core/tensor.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// One gradient bucket, as a communication hook sees it. Built by the reducer for each launch.
class GradBucket {
 public:
  /// `buffer`: the bucket's flat gradients, (numel,) contiguous, the parameters' dtype and device.
  GradBucket(size_t index, Tensor buffer, std::shared_ptr<ProcessGroup> group)
      : index_(index), buffer_(std::move(buffer)), group_(std::move(group)) {}

  /// The bucket's index: buckets launch in index order 0, 1, ... in every backward pass.
  size_t index() const { return index_; }
  /// (numel,) contiguous: this rank's gradients on entry; the hook's Work leaves the averages here.
  const Tensor& buffer() const { return buffer_; }
  /// The DDP's process group.
  ProcessGroup& group() const { return *group_; }
  /// group().all_reduce(t, op), counting t's bytes into bytes_reduced() (CommStats::bytes_reduced
  /// counts what hooks send through here; a hook that calls group() directly is not counted).
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op);
  /// Bytes handed to all_reduce() so far.
  int64_t bytes_reduced() const { return bytes_reduced_; }

 private:
  size_t index_;
  Tensor buffer_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t bytes_reduced_ = 0;
};

/// A communication hook: starts the bucket's reduction and returns its Work (never null); after
/// wait(), bucket.buffer() holds the average over the ranks. Every rank must issue the same
/// collectives in the same order. Called on the thread running backward, in bucket order.
using CommHook = std::function<std::shared_ptr<Work>(GradBucket& bucket)>;

/// The default: all_reduce(avg) of the buffer in place; DDP with an empty hook does exactly this.
/// (PyTorch's allreduce_hook divides by the world size, then sums; ember's avg sums, then divides
/// once, as DDP without a hook always did here.)
std::shared_ptr<Work> allreduce_hook(GradBucket& bucket);
/// As PyTorch's fp16_compress_hook: the buffer is cast to a new f16 tensor, divided by the world
/// size (before the sum, so the sum of world_size values below f16's max cannot overflow), summed
/// by an asynchronous all_reduce, and on wait() cast back into the buffer. Half the bytes of an
/// f32 bucket on the wire; each gradient is rounded to f16 (relative error 2^-11, and elements
/// below 2^-24 in magnitude are lost).
std::shared_ptr<Work> fp16_compress_hook(GradBucket& bucket);
/// fp16_compress_hook with bf16: f32's range (no overflow, no underflow to speak of), relative
/// rounding 2^-8.
std::shared_ptr<Work> bf16_compress_hook(GradBucket& bucket);

/// The hook a config names: "none" (an empty hook: allreduce_hook), "fp16", "bf16"; anything else
/// is an error naming the choices.
CommHook comm_hook_named(const std::string& name);

}  // namespace ember::parallel
