#pragma once
// ZeroRedundancyOptimizer: ZeRO stage 1, as PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer.
// Every rank keeps the whole model, but the optimizer state (momentum buffers, Adam moments) is
// partitioned: each rank runs the inner optimizer over its own shard of the parameters only, so
// it holds about 1/world_size of the state. After each step every rank receives the others'
// updated parameters, so the replicas stay identical.
//
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, pg);   // averages grads
//   parallel::ZeroRedundancyOptimizer opt(ddp->parameters(), pg, [](std::vector<Tensor> ps) {
//     return std::make_unique<optim::Adam>(std::move(ps), optim::AdamOptions{.lr = 1e-3});
//   });
//   loss.backward(); opt.step();                 // collective: every rank calls it
//   StateDict full = opt.consolidate_state_dict(0);  // collective; full only on rank 0
//
// The partition is greedy by size (largest parameter first, onto the least-loaded rank), a pure
// function of the parameter shapes and the world size, so every rank computes the same one
// without communicating. Checkpoints hold what a plain inner optimizer over all parameters would
// hold (global parameter indices), so they load into any world size and into a plain optimizer.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ember/optim/optimizer.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Builds the inner optimizer (SGD, Adam, ...) over the parameters it is given.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

/// Bytes of the state tensors that `opt` holds for its parameter i (step counters included).
int64_t state_bytes(const optim::Optimizer& opt, size_t i);

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  /// `params`: the full list, in the same order on every rank (DDP's parameters). Every rank of
  /// `group` constructs it; construction does not communicate. `make_inner` is called once, with
  /// this rank's shard (ascending global order), and must optimize exactly those tensors.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                          const OptimizerFactory& make_inner);

  /// "ZeroRedundancyOptimizer(SGD)".
  std::string name() const override;
  /// Collective. Steps the inner optimizer on this rank's shard with the current lr (gradients
  /// must already be averaged over the ranks, as DDP leaves them), then every rank takes each
  /// owner's updated parameters (one broadcast per owner and dtype/device of a packed buffer).
  void step() override;

  /// Collective. Rank `to` gets the state dict a plain inner optimizer over all parameters would
  /// have (global indices, the current hyperparameters); the other ranks get an empty dict.
  StateDict consolidate_state_dict(int to = 0);
  /// Not collective. Takes a full state dict (consolidate_state_dict's, or a plain inner
  /// optimizer's over the same parameters, from any world size) on every rank and keeps this
  /// rank's shard. Everything is checked on every rank before anything changes.
  void load_state_dict(const StateDict& full) override;
  /// Always an error: a rank holds only its shard's state; use consolidate_state_dict().
  StateDict state_dict() const override;

  /// Owner rank of parameter i.
  int owner(size_t i) const;
  /// Global indices of the parameters this rank owns, ascending.
  const std::vector<size_t>& shard() const { return shard_; }
  /// Bytes of optimizer state this rank holds (its shard's buffers and step counters).
  int64_t local_state_bytes() const;
  /// The inner optimizer over shard(); its parameter j is params()[shard()[j]]. (state(i) of this
  /// optimizer is always empty: the state lives here.)
  const optim::Optimizer& inner() const { return *inner_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

  /// The partition: owner rank of each size, greedy (largest first, ties by lower index, onto
  /// the least-loaded rank, ties by lower rank). Any rank's load is within the largest size of
  /// the mean.
  static std::vector<int> partition(const std::vector<int64_t>& sizes, int world_size);

 protected:
  /// This optimizer keeps no state of its own (see inner()).
  std::vector<std::string> state_names() const override { return {}; }

 private:
  /// Every rank takes each owner's parameters after the owners stepped.
  void gather_parameters();
  /// Checks `full` against all parameters on this rank (indices, shapes, the inner type's names
  /// and hyperparameters); returns the entries of this rank's shard, re-indexed.
  StateDict shard_of(const StateDict& full) const;

  std::shared_ptr<ProcessGroup> group_;
  OptimizerFactory make_inner_;
  std::vector<int> owners_;  // per global parameter
  std::vector<size_t> shard_;  // global indices owned here
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace ember::parallel
