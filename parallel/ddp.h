#pragma once
// DistributedDataParallel: one process per device, each with a full copy of the model, each
// training on its own share of the batch; gradients are averaged across the processes during
// backward, so every rank takes the same optimizer step and the copies stay identical.
//
//   auto pg = parallel::init_process_group();                    // under ember-run, torchrun, srun
//   auto model = std::make_shared<parallel::DistributedDataParallel>(models::mnist_cnn(), pg);
//   optim::SGD opt(model->parameters(), {.lr = 0.1});           // the wrapped module's parameters
//   loss = cross_entropy((*model)(x), y); opt.zero_grad(); loss.backward(); opt.step();
//
// At construction every rank checks that all ranks hold the same parameter and buffer names,
// shapes and dtypes (an error names the first difference and both ranks), then takes rank 0's
// values. Gradients are reduced in buckets that start while backward still runs (see
// parallel/reducer.h); when backward() returns, every parameter's .grad() is the average over the
// ranks. Every rank must call forward and backward the same number of times.
#include <memory>
#include <string>
#include <vector>

#include <ember/layers/module.h>
#include <ember/parallel/comm_hooks.h>
#include <ember/parallel/process_group.h>
#include <ember/parallel/reducer.h>

namespace ember::parallel {

class Join;

struct DdpOptions {
  /// Bucket size in MiB; larger buckets mean fewer, more efficient all-reduces but less overlap.
  double bucket_cap_mb = 25;
  /// Before each forward, every rank takes rank 0's buffers (BatchNorm running statistics).
  bool broadcast_buffers = true;
  /// Reduce zeros for parameters that got no gradient instead of raising an error naming them.
  bool find_unused_parameters = false;
  /// Starts each gradient bucket's reduction (parallel/comm_hooks.h: fp16_compress_hook,
  /// bf16_compress_hook, or a user's); empty: allreduce_hook, one all_reduce(avg) per bucket.
  CommHook comm_hook = nullptr;
};

class DistributedDataParallel : public layers::Module {
 public:
  using Options = DdpOptions;

  /// `module` is registered as child "module" (state-dict keys "module.<name>"). Collective: every
  /// rank of `group` must construct it.
  DistributedDataParallel(layers::ModulePtr module, std::shared_ptr<ProcessGroup> group, Options opts = {});

  /// Takes rank 0's buffers (when broadcast_buffers and there are several ranks), then runs the
  /// wrapped module. The backward of the result averages the gradients unless under no_sync().
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "DistributedDataParallel"; }
  std::string extra_repr() const override;

  layers::Module& module() const { return *module_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  const Options& options() const { return opts_; }
  /// Every rank takes rank `root`'s buffers now (forward does it itself with broadcast_buffers;
  /// call this before evaluating module() directly, so every rank evaluates with the same
  /// statistics). Collective.
  void sync_buffers(int root = 0);
  /// As PyTorch's register_comm_hook: `hook` starts each bucket's reduction from the next backward
  /// pass on (empty: allreduce_hook). Call it between steps, on every rank alike.
  void register_comm_hook(CommHook hook);
  /// The gradient buckets, in launch order.
  const std::vector<BucketInfo>& buckets() const { return reducer_->buckets(); }
  /// Communication totals since the last call (then reset): for phase timers and reports.
  CommStats take_comm_stats() { return reducer_->take_stats(); }

  /// While alive, forwards build graphs whose backward only accumulates gradients locally; the
  /// first backward of a forward run outside it reduces everything accumulated (gradient
  /// accumulation: no_sync on every micro-batch but the last).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), saved_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = saved_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool saved_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

 private:
  friend class Join;  // parallel/join.h: uneven inputs
  layers::ModulePtr module_;
  std::shared_ptr<ProcessGroup> group_;
  Options opts_;
  std::unique_ptr<Reducer> reducer_;
  bool sync_ = true;
  Join* join_ = nullptr;  // set while a Join is active
};

/// Checks that every rank of `group` holds the same (name, dtype, shape, memory layout) list
/// (channels-last or not: convert a model before wrapping it, on every rank); the error names
/// the first difference, both ranks and `what` ("parameter", "buffer"). Collective.
void check_same_across_ranks(ProcessGroup& group, const std::vector<std::pair<std::string, Tensor>>& named,
                             const std::string& what);
/// Every rank's tensors become rank `root`'s; same-dtype, same-device tensors travel as one
/// flat message. Collective.
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root);

}  // namespace ember::parallel
