#include <ember/data/dataloader.h>

#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <ember/core/device_check.h>
#include <ember/core/error.h>
#include <ember/core/pinned.h>
#include <ember/core/record.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/data/transfer.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/index.h>

namespace ember::data {

namespace {

// CPU time the calling thread has used, in nanoseconds.
int64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Keeps the transforms' Philox key apart from the sampler's (both derive from options.seed).
constexpr uint64_t kTransformSalt = 0x7472616e73666f72ULL;  // "transfor"

}  // namespace

// One pass over the rest of an epoch: the batches [k * B, (k + 1) * B) of `order_`.
class DataLoader::Run {
 public:
  Run(DataLoader& loader, std::vector<int64_t> order, int64_t epoch)
      : loader_(loader),
        opts_(loader.options_),
        order_(std::move(order)),
        epoch_(epoch),
        transform_seed_(splitmix64(loader.options_.seed ^ kTransformSalt)) {
    const int64_t r = static_cast<int64_t>(order_.size()), b = opts_.batch_size;
    num_batches_ = opts_.drop_last ? r / b : (r + b - 1) / b;
    const Device dev = opts_.device;
    if (opts_.resident) {
      // The whole pass's order goes to the device once; batches are slices of it.
      Tensor host =
          dev.is_cpu() ? empty({r}, {.dtype = DType::i64}) : ember::detail::pinned_empty({r}, DType::i64, dev);
      if (r > 0) std::memcpy(host.data_ptr(), order_.data(), order_.size() * sizeof(int64_t));
      order_device_ = detail::to_device_async(host, dev);
      return;
    }
    if (dev.is_cuda()) copy_stream_ = new_stream(dev);
    capacity_ = static_cast<int64_t>(std::max(opts_.workers, 1)) * opts_.prefetch;
    for (int w = 0; w < opts_.workers; ++w) threads_.emplace_back([this, w] { worker(w); });
  }

  ~Run() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();  // a worker finishes at most the batch it is collating
    // A staged batch's blocks belong to the consumer stream: it must not reuse them before the
    // copy into them is done (an early break leaves one in flight).
    if (staged_) {
      try {
        staged_->ready.wait(staged_->consumer);
      } catch (...) {  // a destructor must not throw; a broken device fails the next op anyway
      }
    }
  }

  int64_t num_batches() const { return num_batches_; }
  int64_t examples_through(int64_t k) const {
    return std::min<int64_t>((k + 1) * opts_.batch_size, static_cast<int64_t>(order_.size()));
  }

  /// Batch k of this pass, on the loader's device. Rethrows a worker's exception for batch k.
  Batch next(int64_t k) {
    if (opts_.resident) return resident_batch(k);
    Batch out;
    if (staged_ && staged_->k == k) {
      staged_->ready.wait(staged_->consumer);  // only now: the copy overlapped batch k-1's step
      out = std::move(staged_->batch);
      staged_.reset();
    } else {
      if (staged_) {  // staged for another k (not sequential use): order its copy before dropping it
        staged_->ready.wait(staged_->consumer);
        staged_.reset();
      }
      out = to_device(take(k), nullptr);
    }
    // Start the next batch's copy now, so it overlaps with the work on this one.
    if (opts_.device.is_cuda() && opts_.workers > 0 && k + 1 < num_batches_) {
      std::optional<HostBatch> hb = try_take(k + 1);
      if (hb) {
        Staged st;  // filled completely before it replaces staged_, so a throwing copy leaves none
        st.k = k + 1;
        st.consumer = current_stream(opts_.device);
        st.batch = to_device(std::move(*hb), &st.ready);
        staged_ = std::move(st);
      }
    }
    return out;
  }

 private:
  struct HostBatch {
    Tensor input, target;
    std::vector<int64_t> indices;
  };
  struct Slot {
    HostBatch batch;
    std::exception_ptr error;
  };

  std::vector<int64_t> batch_indices(int64_t k) const {
    const int64_t begin = k * opts_.batch_size, end = examples_through(k);
    return std::vector<int64_t>(order_.begin() + begin, order_.begin() + end);
  }

  // Runs on worker threads (or the consumer when workers == 0): reads only const state.
  HostBatch collate(int64_t k) const {
    HostBatch hb;
    hb.indices = batch_indices(k);
    const int64_t n = static_cast<int64_t>(hb.indices.size());
    const Dataset& ds = *loader_.dataset_;
    const bool pinned = opts_.device.is_cuda() && opts_.pin_memory;
    hb.target = pinned ? ember::detail::pinned_empty({n}, DType::i64, opts_.device) : empty({n}, {.dtype = DType::i64});
    int64_t* target = hb.target.data<int64_t>();
    Shape first;
    int64_t per = 0;
    for (int64_t b = 0; b < n; ++b) {
      const int64_t i = hb.indices[static_cast<size_t>(b)];
      Example ex = ds.get(i);
      Tensor img = ex.image;
      EMBER_CHECK(img.defined() && img.dim() == 3, "DataLoader: ", ds.description(), ".get(", i,
                  ") returned an image of shape ", img.defined() ? img.shape_str() : "(undefined)",
                  ", expected (C, H, W)");
      if (img.dtype() != DType::f32 || !img.device().is_cpu() || !img.is_contiguous()) {
        img = img.to(Device::cpu()).to(DType::f32).contiguous();
      }
      if (!opts_.transform.empty()) {
        RandomStream rng(transform_seed_, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch_));
        img = opts_.transform.apply(img, rng);
      }
      if (b == 0) {
        first = img.sizes();
        per = img.numel();
        Shape s{n};
        s.insert(s.end(), first.begin(), first.end());
        hb.input = pinned ? ember::detail::pinned_empty(s, DType::f32, opts_.device) : empty(s, {.dtype = DType::f32});
      }
      EMBER_CHECK(img.sizes() == first, "DataLoader: example ", i, " has shape ", img.shape_str(),
                  " after the transform, but the batch's first example (", hb.indices[0], ") has ", shape_str(first),
                  "; every example of a batch needs one shape");
      std::memcpy(hb.input.data<float>() + b * per, img.data<float>(), static_cast<size_t>(per) * sizeof(float));
      target[b] = ex.label;
    }
    return hb;
  }

  void worker(int index) {
    profiler::set_thread_name("loader worker " + std::to_string(index));
    int64_t cpu_before = thread_cpu_ns();
    for (;;) {
      int64_t k;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || next_claim_ >= num_batches_ || next_claim_ < consumed_ + capacity_; });
        if (stop_ || next_claim_ >= num_batches_) return;
        k = next_claim_++;
      }
      Slot slot;
      try {
        profiler::RecordScope profile_scope("collate batch", profiler::Category::data);
        slot.batch = collate(k);
      } catch (...) {
        slot.error = std::current_exception();
      }
      const int64_t cpu_now = thread_cpu_ns();
      loader_.worker_cpu_ns_.fetch_add(cpu_now - cpu_before, std::memory_order_relaxed);
      cpu_before = cpu_now;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(k, std::move(slot));
      }
      cv_.notify_all();
    }
  }

  HostBatch take(int64_t k) {
    if (opts_.workers == 0) {
      profiler::RecordScope profile_scope("collate batch", profiler::Category::data);
      return collate(k);
    }
    profiler::RecordScope profile_scope("wait for batch", profiler::Category::data);
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_.count(k) > 0; });
      auto it = ready_.find(k);
      slot = std::move(it->second);
      ready_.erase(it);
      consumed_ = k + 1;
    }
    cv_.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

  // Batch k when a worker already has it (errors are left for take(), in order).
  std::optional<HostBatch> try_take(int64_t k) {
    std::optional<HostBatch> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = ready_.find(k);
      if (it == ready_.end() || it->second.error) return out;
      out = std::move(it->second.batch);
      ready_.erase(it);
      consumed_ = k + 1;
    }
    cv_.notify_all();
    return out;
  }

  /// Starts the batch's copies; with `ready`, the consumer waits only when told to (see next()).
  Batch to_device(HostBatch hb, Event* ready) {
    const Device dev = opts_.device;
    if (dev.is_cpu()) return {std::move(hb.input), std::move(hb.target), std::move(hb.indices)};
    Stream consumer = current_stream(dev);
    Batch out;
    // Both copies run in order on copy_stream_, so an event after the second covers both.
    out.input = detail::copy_to_device_async(hb.input, dev, consumer, copy_stream_, ready);
    out.target = detail::copy_to_device_async(hb.target, dev, consumer, copy_stream_, ready);
    out.indices = std::move(hb.indices);
    return out;
  }

  Batch resident_batch(int64_t k) {
    // A bad index found on the device while this batch is gathered is reported later (at the next
    // synchronization); the label says which batch it was.
    const DeviceCheckContext check_label("DataLoader batch " + std::to_string(k) + " of epoch " +
                                         std::to_string(epoch_));
    Batch out;
    out.indices = batch_indices(k);
    const int64_t begin = k * opts_.batch_size, n = static_cast<int64_t>(out.indices.size());
    Tensor idx = order_device_.narrow(0, begin, n);
    // (B, C, H, W) u8 -> f32 in [0, 1]: the same division as TensorDataset::get.
    Tensor x = kernels::index_select(loader_.resident_images_, 0, idx);
    x = kernels::binary(kernels::BinaryOp::Div, kernels::cast(x, DType::f32), 255.0);
    if (!opts_.transform.empty()) {
      std::vector<RandomStream> rngs;
      rngs.reserve(static_cast<size_t>(n));
      for (int64_t i : out.indices)
        rngs.emplace_back(transform_seed_, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch_));
      x = opts_.transform.apply_batch(x, rngs);
    }
    out.input = x;
    out.target = kernels::index_select(loader_.resident_labels_, 0, idx);
    return out;
  }

  DataLoader& loader_;
  const Options& opts_;
  std::vector<int64_t> order_;  // dataset indices of this pass
  int64_t epoch_;
  uint64_t transform_seed_;
  int64_t num_batches_ = 0;
  Tensor order_device_;  // resident mode: order_ on the device
  Stream copy_stream_;  // CUDA host mode: side stream for copies
  struct Staged {
    int64_t k = -1;
    Stream consumer;  // the stream its device memory was allocated for
    Batch batch;
    Event ready;  // recorded after its copies; the consumer waits on it when batch k is handed out
  };
  std::optional<Staged> staged_;  // a batch whose copy already started

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Slot> ready_;
  int64_t next_claim_ = 0;  // next batch a worker takes on
  int64_t consumed_ = 0;  // batches handed to the consumer
  int64_t capacity_ = 1;  // bound on batches claimed ahead of the consumer
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started after everything above exists
};

// ---- Iterator ----

DataLoader::Iterator::Iterator(DataLoader* loader, std::unique_ptr<Run> run)
    : loader_(loader), run_(std::move(run)), epoch_start_(loader->sampler_->position()), done_(false) {
  loader_->active_ = true;
  advance();
}

DataLoader::Iterator::Iterator(Iterator&& o) noexcept
    : loader_(std::exchange(o.loader_, nullptr)),
      run_(std::move(o.run_)),
      current_(std::move(o.current_)),
      epoch_start_(o.epoch_start_),
      next_(o.next_),
      done_(std::exchange(o.done_, true)) {}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    run_.reset();
    if (loader_ && !done_) loader_->active_ = false;
    loader_ = std::exchange(o.loader_, nullptr);
    run_ = std::move(o.run_);
    current_ = std::move(o.current_);
    epoch_start_ = o.epoch_start_;
    next_ = o.next_;
    done_ = std::exchange(o.done_, true);
  }
  return *this;
}

DataLoader::Iterator::~Iterator() {
  run_.reset();  // stops and joins the workers
  if (loader_ && !done_) loader_->active_ = false;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  advance();
  return *this;
}

void DataLoader::Iterator::advance() {
  if (done_) return;
  Sampler& sampler = *loader_->sampler_;
  try {
    if (next_ >= run_->num_batches()) {
      // The pass is complete: the next begin() starts the following epoch.
      current_ = {};
      run_.reset();
      done_ = true;
      loader_->active_ = false;
      sampler.set_epoch(sampler.epoch() + 1);
      return;
    }
    current_ = run_->next(next_);
    sampler.set_position(epoch_start_ + run_->examples_through(next_));
    ++next_;
  } catch (...) {
    // A failed batch ends the pass (workers joined); the position stays after the last good batch.
    current_ = {};
    run_.reset();
    done_ = true;
    loader_->active_ = false;
    throw;
  }
}

// ---- DataLoader ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Options options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  EMBER_CHECK(options_.batch_size > 0, "DataLoader: expected batch_size > 0, got ", options_.batch_size);
  EMBER_CHECK(options_.workers >= 0, "DataLoader: expected workers >= 0, got ", options_.workers);
  EMBER_CHECK(options_.prefetch >= 1, "DataLoader: expected prefetch >= 1, got ", options_.prefetch);
  options_.device.validate();
  const int64_t n = dataset_->size();
  if (options_.sampler) {
    EMBER_CHECK(!options_.shuffle, "DataLoader: shuffle = true with a custom sampler (", options_.sampler->name(),
                "); the sampler decides the order, set shuffle = false");
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(n, options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(n);
  }
  if (options_.resident) {
    DatasetStorage s = dataset_->storage();
    EMBER_CHECK(s.defined(), "DataLoader: resident = true needs a dataset held in memory as u8 tensors, but ",
                dataset_->description(), " has no storage()");
    EMBER_CHECK(s.images.dim() == 4 && s.images.dtype() == DType::u8 && s.labels.dtype() == DType::i64 &&
                    s.labels.dim() == 1 && s.labels.size(0) == s.images.size(0),
                "DataLoader: storage() of ", dataset_->description(), " should be u8 (N, C, H, W) and i64 (N), got ",
                dtype_name(s.images.dtype()), " ", s.images.shape_str(), " and ", dtype_name(s.labels.dtype()), " ",
                s.labels.shape_str());
    resident_images_ = s.images.to(options_.device).contiguous();
    resident_labels_ = s.labels.to(options_.device).contiguous();
  }
}

DataLoader::~DataLoader() = default;

DataLoader::Iterator DataLoader::begin() {
  EMBER_CHECK(!active_, "DataLoader: a pass over this loader is already running; finish or destroy its iterator ",
              "before starting another");
  const int64_t epoch = sampler_->epoch(), position = sampler_->position();
  std::vector<int64_t> all = sampler_->indices(epoch);
  EMBER_CHECK(static_cast<int64_t>(all.size()) == sampler_->size(), "DataLoader: ", sampler_->name(), " returned ",
              all.size(), " indices for epoch ", epoch, ", expected size() = ", sampler_->size());
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < all.size(); ++k) {
    EMBER_CHECK(all[k] >= 0 && all[k] < n, "DataLoader: ", sampler_->name(), " gave index ", all[k], " at position ", k,
                " of epoch ", epoch, ", outside [0, ", n, ") of ", dataset_->description());
  }
  std::vector<int64_t> rest(all.begin() + std::min<int64_t>(position, static_cast<int64_t>(all.size())), all.end());
  return Iterator(this, std::make_unique<Run>(*this, std::move(rest), epoch));
}

int64_t DataLoader::num_examples() const { return sampler_->size(); }

double DataLoader::worker_cpu_seconds() const {
  return static_cast<double>(worker_cpu_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

int64_t DataLoader::len() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::epoch() const { return sampler_->epoch(); }

void DataLoader::set_epoch(int64_t epoch) {
  EMBER_CHECK(!active_, "DataLoader::set_epoch: a pass is running");
  sampler_->set_epoch(epoch);
}

StateDict DataLoader::state_dict() const { return sampler_->state_dict(); }

void DataLoader::load_state_dict(const StateDict& state) {
  EMBER_CHECK(!active_, "DataLoader::load_state_dict: a pass is running");
  sampler_->load_state_dict(state);
}

}  // namespace ember::data
