#pragma once
// SyncBatchNorm: BatchNorm2d whose training statistics are those of the global batch of a
// process group (PyTorch's torch.nn.SyncBatchNorm), for DDP runs whose per-rank batches are too
// small for good statistics (detection, segmentation, large models at a few images per GPU).
//
//   auto model = models::resnet18(10);
//   parallel::convert_sync_batchnorm(model, group);   // before wrapping it in DDP
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, group);
//
// In training, each BatchNorm2d gathers every rank's per-channel (mean, biased variance, count)
// in one all_gather, combines them into the global batch's statistics (ranks may hold different
// numbers of images, or none), and backward sums the statistics' gradients over the ranks in one
// all_reduce: N ranks compute what one process with plain BatchNorm2d computes on the
// concatenated batch. The running statistics are updated identically on every rank. Eval mode
// uses them and communicates nothing. Every rank must run the same layers in the same order (as
// DDP requires anyway).
//
// ember's models hold their layers as typed members (a ResNet block calls its bn1_ directly), so
// conversion switches the existing BatchNorm2d modules to synced statistics in place
// (BatchNorm2d::set_stats_exchange) instead of replacing them: parameters, buffers, optimizers
// built over them and checkpoints are untouched, and a checkpoint of a synced model loads into a
// plain one and back.
#include <cstdint>
#include <memory>
#include <vector>

#include <ember/layers/batchnorm.h>
#include <ember/layers/module.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// BatchNorm2d's StatsExchange over a process group: all_gather forward, all_reduce backward.
class GroupStatsExchange final : public layers::StatsExchange {
 public:
  explicit GroupStatsExchange(std::shared_ptr<ProcessGroup> group);
  int replicas() const override { return group_->world_size(); }
  std::vector<Tensor> gather(const std::vector<Tensor>& local) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

/// Makes every BatchNorm2d in `module` (itself included, at any depth) compute its training
/// statistics over the ranks of `group`, in place, and returns `module`. A group of one rank
/// changes nothing in what is computed.
std::shared_ptr<layers::Module> convert_sync_batchnorm(std::shared_ptr<layers::Module> module,
                                                       std::shared_ptr<ProcessGroup> group);
/// The number of BatchNorm2d layers of `module` that share their statistics (convert_sync_batchnorm).
int64_t count_sync_batchnorm(const layers::Module& module);

/// A BatchNorm2d synced over `group` from the start.
class SyncBatchNorm2d : public layers::BatchNorm2d {
 public:
  SyncBatchNorm2d(int64_t num_features, std::shared_ptr<ProcessGroup> group,
                  const layers::BatchNorm2dOptions& options = {});
  std::string name() const override { return "SyncBatchNorm2d"; }
};

}  // namespace ember::parallel
