// all_reduce_totals (see sharded_eval.h).
#include <ember/parallel/sharded_eval.h>

#include <vector>

#include <ember/kernels/factory.h>

namespace ember::parallel {

EvalTotals all_reduce_totals(ProcessGroup& group, const EvalTotals& mine) {
  if (group.world_size() == 1) return mine;
  // Counts travel as f64: exact up to 2^53 examples.
  const Device dev = group.message_device();
  Tensor t =
      from_vector(
          std::vector<double>{mine.loss_sum, static_cast<double>(mine.correct), static_cast<double>(mine.count)}, {3})
          .to(dev);
  group.all_reduce(t, ReduceOp::sum)->wait();
  const std::vector<double> v = t.to_vector<double>();
  return {v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2])};
}

}  // namespace ember::parallel
