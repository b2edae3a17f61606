#pragma once
// Reducer: the gradient synchronisation inside DistributedDataParallel.
//
// Parameters are laid out in flat buckets in reverse registration order (roughly the order in
// which backward produces their gradients), one dtype and device per bucket, each up to
// bucket_cap_mb (the first one only up to first_bucket_cap_mb, so communication starts early in
// backward). A grad-accumulated hook on every parameter copies its finished gradient into its
// bucket; once every gradient of a bucket is in, and every earlier bucket has been launched, the
// bucket's all-reduce (average; or whatever ReducerOptions::comm_hook starts) starts on the group
// while backward goes on. At the end of the backward pass (an engine callback,
// autograd::queue_callback) the reducer launches what is left, waits for every bucket and copies
// the averages back into the parameters' .grad().
//
// Every rank must launch the same all-reduces in the same order: buckets launch strictly in index
// order, and a parameter that got no gradient is either an error naming it (the ranks' graphs may
// differ) or, with find_unused_parameters, reduced as zeros.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/stream.h>
#include <ember/core/tensor.h>
#include <ember/parallel/comm_hooks.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Time and volume of gradient communication, summed since the last Reducer::take_stats().
struct CommStats {
  /// Seconds the backend spent running the all-reduces (Work::busy_seconds, summed).
  double comm_seconds = 0;
  /// Seconds the end of backward waited for all-reduces still running: communication that did not
  /// overlap backward. comm_seconds - exposed_seconds was hidden behind it.
  double exposed_seconds = 0;
  int64_t all_reduces = 0;
  /// Gradient bytes this rank all-reduced (the buckets' bytes, in the parameters' dtype).
  int64_t bytes = 0;
  /// Bytes this rank handed to the all-reduces (GradBucket::all_reduce): `bytes` without a comm
  /// hook, half of it with fp16_compress_hook or bf16_compress_hook on f32 buckets.
  int64_t bytes_reduced = 0;
  /// Synchronised backward passes.
  int64_t syncs = 0;
  /// Gradients that arrived after their pass's first all-reduce was launched, summed over passes:
  /// > 0 means communication started while backward was still computing gradients (the overlap
  /// that bucketing in reverse order is for); 0 when one bucket holds every parameter.
  int64_t grads_after_first_launch = 0;
  CommStats& operator+=(const CommStats& o);
};

/// One bucket's layout.
struct BucketInfo {
  std::vector<std::string> names;  // its parameters, in bucket order
  int64_t numel = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

struct ReducerOptions {
  double bucket_cap_mb = 25;  // > 0
  double first_bucket_cap_mb = 1;  // > 0; the effective first cap is min(this, bucket_cap_mb)
  bool find_unused_parameters = false;
  /// Starts each bucket's reduction (see comm_hooks.h); empty: allreduce_hook.
  CommHook comm_hook = nullptr;
};

class Reducer {
 public:
  /// `params`: (module path, parameter) in registration order. Registers a hook on each.
  Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> group, ReducerOptions opts);
  /// Removes the hooks.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Called by each forward: whether the backward of the graph being built synchronises
  /// (false under no_sync: gradients only accumulate locally). Also abandons a pass that a
  /// failed backward left unfinished.
  void prepare_for_backward(bool sync);
  const std::vector<BucketInfo>& buckets() const { return info_; }
  /// Replaces ReducerOptions::comm_hook for the buckets launched from now on (call it between
  /// backward passes, on every rank alike).
  void set_comm_hook(CommHook hook) { opts_.comm_hook = std::move(hook); }
  /// The totals since the last call, then resets them. Waits for the all-reduces still running on
  /// the device (nccl), so that their busy time is counted.
  CommStats take_stats();
  /// For a rank that has run out of inputs (parallel::Join): the collectives of one synchronised
  /// backward pass of the other ranks, every bucket reduced through the hook as zeros, waited for;
  /// this rank's gradients are not touched.
  void shadow_backward();

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;  // each parameter's first element in `flat`
    Tensor flat;
    size_t pending = 0;  // parameters not yet ready in this pass
    std::shared_ptr<Work> work;
  };
  struct Param {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    size_t slot = 0;  // index within the bucket
    int64_t hook = 0;
    bool ready = false;
  };

  void on_grad_ready(size_t index);
  void mark_ready(size_t index, const Tensor& grad);
  void launch_ready_buckets();
  void finish_pass();
  void reset_pass();
  /// Adds the busy time of the finished all-reduces in untimed_ and the exposed time of the spans
  /// in untimed_exposed_ to stats_; with `wait`, waits for each to complete first.
  void collect_times(bool wait);

  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> info_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions opts_;
  bool sync_ = true;  // set by prepare_for_backward
  bool in_pass_ = false;  // a synchronised pass has started (its callback is queued)
  size_t next_launch_ = 0;  // buckets below this index have been launched
  CommStats stats_;
  /// All-reduces waited for whose busy time is not known yet: NCCL's wait() only orders the
  /// caller's stream, so the device may still be running them when the pass ends.
  std::vector<std::shared_ptr<Work>> untimed_;
  /// The end of a pass's backward and the end of its wait for the all-reduces, as events on the
  /// gradients' stream: on a GPU the time between them is what the stream waited for communication
  /// (the host does not wait for NCCL); on the CPU, host times.
  struct ExposedSpan {
    Event begin, end;
  };
  std::vector<ExposedSpan> untimed_exposed_;
};

}  // namespace ember::parallel
