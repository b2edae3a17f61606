#pragma once
// BatchNorm2d: per-channel normalization of NCHW input with running statistics; with a
// StatsExchange (parallel::convert_sync_batchnorm) the training statistics are those of the
// global batch of every process, as PyTorch's SyncBatchNorm computes them.
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/layers/module.h>

namespace ember::layers {

/// BatchNorm2d's options, as Conv2d takes Conv2dOptions: BatchNorm2d(64, {.momentum = 0.01}).
struct BatchNorm2dOptions {
  /// Added to the variance before its square root; must be positive.
  double eps = 1e-5;
  /// Weight of the batch statistics in the running ones, in [0, 1].
  double momentum = 0.1;
  /// Learnable per-channel weight and bias.
  bool affine = true;
};

/// How a BatchNorm2d shares its training statistics with the replicas of other processes (one
/// per rank). parallel::convert_sync_batchnorm gives each BatchNorm2d one over a process group;
/// layers/ only knows this interface.
class StatsExchange {
 public:
  virtual ~StatsExchange() = default;
  /// Replicas taking part (the process group's size).
  virtual int replicas() const = 0;
  /// Every replica's values of each 1-D tensor in `local` (each the same length on every
  /// replica), gathered in rank order into (replicas(), length) tensors: one collective. Recorded
  /// in autograd: the gradient reaching a replica's `local[i]` is the sum of the gradients that
  /// every replica's gathered row of it received (the adjoint of an all-gather). Every replica
  /// must call it with the same lengths, in the same order.
  virtual std::vector<Tensor> gather(const std::vector<Tensor>& local) = 0;
};

/// Parameters (affine): weight (C) = 1, bias (C) = 0. Buffers: running_mean (C) = 0,
/// running_var (C) = 1, num_batches_tracked (0-d i64) = 0. Training mode normalizes with the
/// batch's mean and biased variance and updates running = (1 - momentum) * running + momentum *
/// batch (unbiased variance for running_var); eval mode normalizes with the running statistics.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNorm2dOptions& options = {});
  /// The positional form, PyTorch's order: BatchNorm2d(64, 1e-3, 0.01, false). eps must be a
  /// floating value, so that BatchNorm2d(64, {}) means the default options, never eps = 0.
  BatchNorm2d(int64_t num_features, std::floating_point auto eps, double momentum = 0.1, bool affine = true)
      : BatchNorm2d(num_features, BatchNorm2dOptions{.eps = double(eps), .momentum = momentum, .affine = affine}) {}
  /// x (N, C, H, W) -> (N, C, H, W).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm2d"; }
  std::shared_ptr<Module> clone_structure() const override;
  std::string extra_repr() const override;

  int64_t num_features() const { return c_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  Tensor weight() const { return weight_; }  // undefined when !affine
  Tensor bias() const { return bias_; }  // undefined when !affine
  Tensor running_mean() const { return running_mean_; }
  Tensor running_var() const { return running_var_; }
  Tensor num_batches_tracked() const { return num_batches_tracked_; }

  /// From now on, training mode normalizes with the mean and biased variance of the union of
  /// every replica's batch (their counts may differ, and may be 0), gathered through `exchange`,
  /// and updates the running statistics with them (identical on every replica); the gradients
  /// reach every replica's input through the exchange. Eval mode is unchanged and communicates
  /// nothing. nullptr: local statistics again.
  void set_stats_exchange(std::shared_ptr<StatsExchange> exchange) { exchange_ = std::move(exchange); }
  const std::shared_ptr<StatsExchange>& stats_exchange() const { return exchange_; }

 private:
  /// Training mode with an exchange of more than one replica.
  Tensor synced_forward(const Tensor& x);

  int64_t c_;
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
  std::shared_ptr<StatsExchange> exchange_;
};

}  // namespace ember::layers
