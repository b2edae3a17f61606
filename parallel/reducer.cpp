// Reducer: bucketed, overlapped gradient all-reduce (see reducer.h).
#include <ember/parallel/reducer.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include <ember/autograd/engine.h>
#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>
#include <ember/core/record.h>
#include <ember/kernels/factory.h>

namespace ember::parallel {

CommStats& CommStats::operator+=(const CommStats& o) {
  comm_seconds += o.comm_seconds;
  exposed_seconds += o.exposed_seconds;
  all_reduces += o.all_reduces;
  bytes += o.bytes;
  bytes_reduced += o.bytes_reduced;
  syncs += o.syncs;
  grads_after_first_launch += o.grads_after_first_launch;
  return *this;
}

namespace {

// The view of one parameter's elements inside its bucket, laid out as the parameter (a
// channels-last weight's gradient copies in and out without a transpose; the all-reduce is
// elementwise, and every rank lays out its replica alike).
Tensor slot_view(const Tensor& flat, int64_t offset, const Tensor& param) {
  return as_strided_raw(flat, param.sizes(), strides_for(param.sizes(), param.suggest_memory_format()),
                        flat.offset() + offset);
}

}  // namespace

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> group,
                 ReducerOptions opts)
    : group_(std::move(group)), opts_(opts) {
  EMBER_CHECK(group_ != nullptr, "Reducer: no process group");
  EMBER_CHECK(opts_.bucket_cap_mb > 0 && opts_.first_bucket_cap_mb > 0,
              "DistributedDataParallel: bucket_cap_mb and first_bucket_cap_mb must be positive, got ",
              opts_.bucket_cap_mb, " and ", opts_.first_bucket_cap_mb);
  for (auto& [name, t] : params) params_.push_back({name, t});

  // Buckets over the reverse registration order; one open bucket per (dtype, device).
  const double mib = 1024.0 * 1024.0;
  std::map<std::pair<int, std::string>, size_t> open;  // (dtype, device) -> bucket index
  for (size_t k = params_.size(); k-- > 0;) {
    Param& p = params_[k];
    const auto key = std::make_pair(static_cast<int>(p.tensor.dtype()), p.tensor.device().str());
    auto it = open.find(key);
    if (it == open.end()) {
      it = open.emplace(key, buckets_.size()).first;
      buckets_.emplace_back();
      info_.push_back({{}, 0, p.tensor.dtype(), p.tensor.device()});
    }
    const size_t b = it->second;
    p.bucket = b;
    p.slot = buckets_[b].params.size();
    buckets_[b].params.push_back(k);
    buckets_[b].offsets.push_back(info_[b].numel);
    info_[b].names.push_back(p.name);
    info_[b].numel += p.tensor.numel();
    const double cap = b == 0 ? std::min(opts_.first_bucket_cap_mb, opts_.bucket_cap_mb) : opts_.bucket_cap_mb;
    if (static_cast<double>(info_[b].numel) * static_cast<double>(dtype_size(p.tensor.dtype())) >= cap * mib)
      open.erase(it);  // full: the next parameter of this kind opens a new bucket
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    buckets_[b].flat = zeros({info_[b].numel}, {.dtype = info_[b].dtype, .device = info_[b].device});

  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].hook = params_[k].tensor.register_grad_accumulated_hook([this, k](const Tensor&) { on_grad_ready(k); });
  reset_pass();
}

Reducer::~Reducer() {
  for (Param& p : params_) {
    try {
      p.tensor.remove_grad_accumulated_hook(p.hook);
    } catch (const std::exception&) {  // a destructor must not throw; the hook dies with the tensor
    }
  }
}

void Reducer::prepare_for_backward(bool sync) {
  if (in_pass_) reset_pass();  // an earlier backward threw before its end-of-pass callback
  sync_ = sync;
}

CommStats Reducer::take_stats() {
  collect_times(true);
  return std::exchange(stats_, CommStats{});
}

void Reducer::collect_times(bool wait) {
  // A pass's exposed span ends after its stream waited for every all-reduce of the pass: once the
  // span's end has completed (with `wait`, waited for here), so have they.
  std::erase_if(untimed_exposed_, [&](const ExposedSpan& e) {
    if (wait) e.end.synchronize();
    if (!e.end.query()) return false;
    stats_.exposed_seconds += e.begin.elapsed_ms(e.end) / 1e3;
    return true;
  });
  std::erase_if(untimed_, [&](const std::shared_ptr<Work>& w) {
    if (!w->is_completed()) return false;
    stats_.comm_seconds += w->busy_seconds();
    return true;
  });
}

void Reducer::on_grad_ready(size_t index) {
  if (!sync_) return;  // no_sync: the gradient stays where AccumulateGrad put it
  if (!in_pass_) {
    in_pass_ = true;
    autograd::queue_callback([this] { finish_pass(); });
  }
  Param& p = params_[index];
  EMBER_CHECK(!p.ready, "DistributedDataParallel: parameter '", p.name,
              "' got its gradient twice in one backward pass (is it registered in two places?)");
  if (next_launch_ > 0) ++stats_.grads_after_first_launch;  // an all-reduce already runs beside backward
  mark_ready(index, p.tensor.grad());
  launch_ready_buckets();
}

// Copies the gradient (zeros when undefined) into the bucket; counts the bucket down.
void Reducer::mark_ready(size_t index, const Tensor& grad) {
  NoGradGuard no_grad;
  Param& p = params_[index];
  Bucket& b = buckets_[p.bucket];
  Tensor dst = slot_view(b.flat, b.offsets[p.slot], p.tensor);
  if (grad.defined()) dst.copy_(grad);
  else dst.zero_();
  p.ready = true;
  --b.pending;
}

void Reducer::shadow_backward() {
  EMBER_CHECK(!in_pass_, "Join: a rank that has run out of inputs is still inside a backward pass");
  for (Bucket& b : buckets_) {
    b.flat.zero_();
    b.pending = 0;
  }
  next_launch_ = 0;
  launch_ready_buckets();
  for (Bucket& b : buckets_) b.work->wait();
  reset_pass();
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_];
    GradBucket bucket(next_launch_, b.flat, group_);
    b.work = opts_.comm_hook ? opts_.comm_hook(bucket) : allreduce_hook(bucket);
    EMBER_CHECK(b.work != nullptr, "DistributedDataParallel: the communication hook returned no Work for bucket ",
                next_launch_, "; a hook must return the Work of the reduction it started");
    stats_.bytes_reduced += bucket.bytes_reduced();
    stats_.all_reduces += 1;
    stats_.bytes += b.flat.numel() * static_cast<int64_t>(b.flat.element_size());
    ++next_launch_;
  }
}

void Reducer::finish_pass() {
  // Parameters whose hook never fired were not in this backward's graph.
  std::vector<size_t> unused;
  for (size_t k = 0; k < params_.size(); ++k)
    if (!params_[k].ready) unused.push_back(k);
  if (!unused.empty()) {
    if (!opts_.find_unused_parameters) {
      std::ostringstream names;
      for (size_t i = 0; i < unused.size() && i < 10; ++i) names << (i ? ", " : "") << params_[unused[i]].name;
      if (unused.size() > 10) names << ", ... (" << unused.size() << " in all)";
      reset_pass();
      throw Error("DistributedDataParallel: these parameters got no gradient in this backward pass: " + names.str() +
                  ". Every rank must reduce every bucket, so this is an error; construct DistributedDataParallel "
                  "with find_unused_parameters = true to reduce zeros for them instead, or leave the parameters out "
                  "of the module");
    }
    for (size_t k : unused) mark_ready(k, Tensor());
    launch_ready_buckets();
  }

  // Wait in launch order; the time spent here is communication that backward did not hide. On a
  // GPU the waits only order the stream, so the time is taken between events on it.
  const Stream stream = current_stream(buckets_.front().flat.device());
  ExposedSpan exposed;
  exposed.begin.record(stream);
  {
    profiler::RecordScope span("wait for gradient all-reduce", profiler::Category::comm);
    for (Bucket& b : buckets_) b.work->wait();
  }
  exposed.end.record(stream);
  untimed_exposed_.push_back(std::move(exposed));

  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    untimed_.push_back(b.work);  // counted once it has completed (the device may still run it)
    for (size_t s = 0; s < b.params.size(); ++s) {
      const Tensor& param = params_[b.params[s]].tensor;
      Tensor avg = slot_view(b.flat, b.offsets[s], param);
      Tensor g = param.grad();
      if (g.defined()) g.copy_(avg);
      else param.set_grad(avg.clone());
    }
  }
  stats_.syncs += 1;
  collect_times(false);
  reset_pass();
}

void Reducer::reset_pass() {
  for (Bucket& b : buckets_) {
    // A pass abandoned by an error may leave all-reduces in flight on `flat`: let them end (each
    // has the group's timeout) before the next pass writes there. Their errors were the pass's.
    if (b.work) {
      try {
        b.work->wait();
      } catch (const std::exception&) {
      }
    }
    b.pending = b.params.size();
    b.work.reset();
  }
  for (Param& p : params_) p.ready = false;
  next_launch_ = 0;
  in_pass_ = false;
}

}  // namespace ember::parallel
