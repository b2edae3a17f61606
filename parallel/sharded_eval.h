#pragma once
// Evaluating a test set split over the ranks by a data::DistributedSampler: each rank counts only
// the real (non-padding) examples of its share, and one all-reduce of the totals gives every rank
// the whole test set's loss and accuracy, each example counted exactly once.
//
//   data::DistributedSampler shard(test.size(), pg->rank(), pg->world_size(), {.shuffle = false});
//   EvalTotals mine;                       // per batch: count_real_rows() rows, from the first
//   ...
//   const EvalTotals all = all_reduce_totals(*pg, mine);   // all.count == test.size()
#include <cstdint>

#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Sums over (part of) a test set.
struct EvalTotals {
  double loss_sum = 0;  // summed per-example loss
  int64_t correct = 0;
  int64_t count = 0;
  double accuracy() const { return count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0; }
  double mean_loss() const { return count > 0 ? loss_sum / static_cast<double>(count) : 0; }
};

/// How many leading rows of a batch of `batch_rows` are real examples, when `seen` of this rank's
/// examples came in earlier batches and its share holds `real_size` real ones (they come first:
/// DistributedSampler::real_size()).
inline int64_t count_real_rows(int64_t seen, int64_t batch_rows, int64_t real_size) {
  const int64_t left = real_size - seen;
  return left <= 0 ? 0 : (left < batch_rows ? left : batch_rows);
}

/// Every rank's totals summed (one f64 all-reduce on the group's message device). Collective.
EvalTotals all_reduce_totals(ProcessGroup& group, const EvalTotals& mine);

}  // namespace ember::parallel
