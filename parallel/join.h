#pragma once
// Join: DDP training when the ranks hold different numbers of batches (PyTorch's
// torch.distributed.algorithms.Join with DistributedDataParallel). Without it, a rank that runs
// out of batches leaves the others waiting in their next collective until the group's timeout.
//
//   parallel::Join join(*ddp);                        // every rank, before its loop
//   for (auto& batch : loader) {                      // this rank's batches: any number
//     opt.zero_grad();
//     cross_entropy((*ddp)(batch.input), batch.target).backward();
//     opt.step();
//   }
//   join.finish();                                    // every rank, after its loop
//
// While a Join is active, each training forward of the DDP module first tells every rank which
// ranks are still training (one all_gather of two integers per rank). A rank that has called
// finish() answers "done" and shadows the collectives of the others' steps: the buffer broadcast
// and, for a step that reduces gradients, every bucket reduced through the communication hook with
// zeros, until every rank has finished. The averages divide by the whole world size, as PyTorch's
// do by default: a rank that has joined contributes zeros, so a step taken by k of W ranks moves the
// parameters by k/W of the step all W would take on those batches. A rank that has joined does not
// step its optimizer, so at the end finish() gives every rank the parameters and buffers of a rank
// that trained to the last step: the ranks end identical (optimizer state aside: a joined rank's
// momentum stopped when it joined).
//
// With JoinOptions::throw_on_early_termination, the first step at which some rank has finished
// ends the job instead: every rank throws an error naming the ranks that ran out of batches.
//
// Buffers (BatchNorm's running statistics) are broadcast at each step from the lowest rank still
// training, so a rank that has joined does not reset them to its own stale values.
//
// The loop inside a Join must run no collectives of its own per step (no metrics all-reduce, no
// evaluation through the DDP module) and must not use no_sync() on some ranks only. So a module
// with SyncBatchNorm is refused (its per-layer collectives cannot be shadowed), and a ZeRO-1
// optimizer (parallel/zero.h), whose step broadcasts the updated shards, is not supported inside
// a Join.
#include <cstdint>

#include <ember/parallel/ddp.h>

namespace ember::parallel {

struct JoinOptions {
  /// Every rank throws (an error naming the ranks that ran out) at the first step some rank has
  /// finished, instead of training on with the ranks that remain.
  bool throw_on_early_termination = false;
};

class Join {
 public:
  /// Attaches to `ddp` (not collective). One Join per DDP module at a time.
  explicit Join(DistributedDataParallel& ddp, JoinOptions options = {});
  /// Detaches. Without finish(), the ranks still training wait for this one until their timeout.
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  /// Collective, after this rank's last batch: shadows the other ranks' remaining steps, then
  /// returns once every rank has called it. Returns how many steps this rank shadowed.
  int64_t finish();

  /// Training forwards this rank has run inside the Join.
  int64_t steps() const { return steps_; }

 private:
  friend class DistributedDataParallel;
  /// One handshake: this rank's (training, reduces gradients this step) against every rank's.
  /// Returns how many ranks are training and whether any of them reduces gradients this step.
  struct Round {
    int training = 0;
    int first_training = -1;  // the lowest rank still training
    bool syncing = false;
    std::string finished;  // "rank 0, rank 2": the ranks not training, for messages
  };
  Round handshake(bool training, bool syncing);
  /// Called by the DDP module's training forward; returns the rank to broadcast buffers from (the
  /// lowest rank still training: a rank that has joined keeps stale buffers).
  int before_forward(bool syncing);

  DistributedDataParallel& ddp_;
  JoinOptions options_;
  int64_t steps_ = 0;
  bool finished_ = false;
  int last_trainer_ = 0;  // a rank training in the last round in which any was (the same on every rank)
};

}  // namespace ember::parallel
