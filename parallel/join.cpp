// Join (see join.h): the handshake each training forward runs, and the shadow loop of finish().
#include <ember/parallel/join.h>

#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/sync_batchnorm.h>

namespace ember::parallel {

Join::Join(DistributedDataParallel& ddp, JoinOptions options) : ddp_(ddp), options_(options) {
  EMBER_CHECK(ddp_.join_ == nullptr, "Join: this DistributedDataParallel module is already inside a Join");
  // A joined rank shadows DDP's collectives only: SyncBatchNorm's per-layer ones would go unanswered.
  const int64_t sync_bn = count_sync_batchnorm(ddp_.module());
  EMBER_CHECK(sync_bn == 0, "Join: the module has ", sync_bn,
              " SyncBatchNorm layer(s), whose collectives a rank that has run out of batches cannot shadow; "
              "use BatchNorm (its buffers follow a rank still training) or give every rank the same number of "
              "batches (DistributedSampler with drop_last)");
  ddp_.join_ = this;
}

Join::~Join() {
  if (ddp_.join_ == this) ddp_.join_ = nullptr;
}

Join::Round Join::handshake(bool training, bool syncing) {
  ProcessGroup& group = *ddp_.group();
  const int world = group.world_size();
  // On the group's message device, as its other bookkeeping collectives (NCCL takes only CUDA tensors).
  const Device dev = group.message_device();
  Tensor mine = from_vector(std::vector<int64_t>{training ? 1 : 0, syncing ? 1 : 0}, {2}, {.device = dev});
  Tensor all = empty({world, 2}, {.dtype = DType::i64, .device = dev});
  group.all_gather(all, mine)->wait();
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  Round r;
  for (int i = 0; i < world; ++i) {
    if (v[static_cast<size_t>(2 * i)] != 0) {
      if (r.training++ == 0) r.first_training = i;
      r.syncing = r.syncing || v[static_cast<size_t>(2 * i + 1)] != 0;
    } else {
      r.finished += (r.finished.empty() ? "rank " : ", rank ") + std::to_string(i);
    }
  }
  if (r.training > 0) last_trainer_ = r.first_training;
  return r;
}

int Join::before_forward(bool syncing) {
  EMBER_CHECK(!finished_, "Join: rank ", ddp_.group()->rank(), " ran a training forward after finish()");
  ++steps_;
  if (ddp_.group()->world_size() == 1) return 0;
  const Round r = handshake(true, syncing);
  EMBER_CHECK(!(options_.throw_on_early_termination && r.training < ddp_.group()->world_size()),
              "uneven inputs: ", r.finished, " ran out of batches before step ", steps_, " of rank ",
              ddp_.group()->rank(), " (Join with throw_on_early_termination)");
  return r.first_training;
}

int64_t Join::finish() {
  EMBER_CHECK(!finished_, "Join::finish: called twice");
  finished_ = true;
  int64_t shadowed = 0;
  if (ddp_.group()->world_size() == 1) return 0;
  while (true) {
    const Round r = handshake(false, false);
    if (r.training == 0) break;
    EMBER_CHECK(!options_.throw_on_early_termination, "uneven inputs: ", r.finished,
                " ran out of batches first, after ", steps_, " steps on rank ", ddp_.group()->rank(),
                " (Join with throw_on_early_termination)");
    // The others' forward: the buffer broadcast (from the first rank still training, as they
    // take it); their backward: every bucket's reduction.
    if (ddp_.options().broadcast_buffers) ddp_.sync_buffers(r.first_training);
    if (r.syncing) ddp_.reducer_->shadow_backward();
    ++shadowed;
  }
  // Every rank takes the model of a rank that trained to the end (a joined rank stopped stepping).
  std::vector<Tensor> state;
  for (const auto& [name, t] : ddp_.module().named_parameters()) state.push_back(t);
  for (const auto& [name, t] : ddp_.module().named_buffers()) state.push_back(t);
  broadcast_coalesced(*ddp_.group(), state, last_trainer_);
  return shadowed;
}

}  // namespace ember::parallel
