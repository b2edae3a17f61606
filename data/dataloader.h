#pragma once
// DataLoader: batches of a Dataset, in a Sampler's order, on a device.
//
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .workers = 2, .device = dev});
//   for (auto& batch : loader) { ... batch.input (B, C, H, W) f32, batch.target (B) i64 ... }
//
// Host mode: worker threads each collate whole batches (dataset.get, transform per example, copy
// into one (B, C, H, W) buffer) into a bounded prefetch queue; the consumer takes batches in
// order, so the batches are the same for any number of workers (0 = collate on the consumer
// thread). For a CUDA device the buffers are pinned and each batch is copied asynchronously on a
// side stream; with worker threads the next batch's copy starts while the current one is in use.
//
// Resident mode (.resident = true): the whole dataset (u8) is copied to the device once; each
// batch is index_select + cast + divide by 255 + the transform's batch path, all on the device.
// Only a few index vectors cross the bus per batch, so input loading never starves the GPU.
// Both modes give the same batches (up to float rounding of the batch transform kernels).
//
// Progress lives in the sampler: a loop that runs to the end moves to the next epoch (a new
// order when shuffling); a loop left early (break, exception) leaves the position where it
// stopped, and the next loop continues that epoch. state_dict()/load_state_dict() save and
// restore it, so a resumed run continues mid-epoch exactly. set_epoch() starts an epoch afresh.
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/state_dict.h>
#include <ember/core/tensor.h>
#include <ember/data/dataset.h>
#include <ember/data/sampler.h>
#include <ember/data/transforms.h>

namespace ember::data {

/// Options, in the order designated initializers must follow.
struct DataLoaderOptions {
  int64_t batch_size = 64;
  /// RandomSampler(n, seed) when true, SequentialSampler(n) when false (ignored with `sampler`).
  bool shuffle = false;
  /// Worker threads collating batches (0: on the consumer thread). Unused in resident mode.
  int workers = 0;
  /// Skip the last batch when it would be smaller than batch_size.
  bool drop_last = false;
  /// Where batches are delivered.
  Device device = Device::cpu();
  /// Seeds the shuffle order and the transforms' random streams.
  uint64_t seed = 0;
  /// Collate into page-locked host memory when `device` is a GPU (asynchronous copies).
  bool pin_memory = true;
  /// Keep the whole dataset on `device` and batch there (needs Dataset::storage()).
  bool resident = false;
  /// Applied to every example (empty: none).
  Compose transform = {};
  /// Batches each worker may have ready ahead of the consumer (queue bound = workers * prefetch).
  int prefetch = 2;
  /// A custom order (e.g. parallel::DistributedSampler); shuffle must then be false.
  std::shared_ptr<Sampler> sampler = nullptr;
};

/// One batch. input (B, C, H, W) f32 and target (B) i64 on the loader's device; indices are the
/// dataset indices of the B examples.
struct Batch {
  Tensor input;
  Tensor target;
  std::vector<int64_t> indices;
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

class DataLoader {
 public:
  using Options = DataLoaderOptions;
  class Run;
  struct Sentinel {};

  /// Iterates one epoch (from the sampler's position). Move-only; leaving the loop destroys it,
  /// which stops and joins the workers.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();
    Batch& operator*() { return current_; }
    Batch* operator->() { return &current_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(Sentinel) const { return done_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::unique_ptr<Run> run);
    void advance();
    DataLoader* loader_ = nullptr;
    std::unique_ptr<Run> run_;
    Batch current_;
    int64_t epoch_start_ = 0;  // sampler position when this epoch pass began
    int64_t next_ = 0;  // index (within the pass) of the batch advance() fetches next
    bool done_ = true;
  };

  DataLoader(std::shared_ptr<const Dataset> dataset, Options options = {});
  /// Copies `dataset` (the built-in datasets share their tensors, so this is cheap).
  template <typename D>
  requires std::is_base_of_v<Dataset, D> DataLoader(const D& dataset, Options options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<D>(dataset)), std::move(options)) {}
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts a pass over the rest of the current epoch. One pass at a time per loader.
  Iterator begin();
  Sentinel end() const { return {}; }

  /// Batches in a whole epoch: ceil(n / batch_size), or floor with drop_last.
  int64_t len() const;
  /// Examples in a whole epoch (the sampler's size).
  int64_t num_examples() const;
  int64_t epoch() const;
  /// Starts `epoch` from its beginning at the next begin().
  void set_epoch(int64_t epoch);
  /// The sampler's progress (see Sampler::state_dict).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  /// CPU time the worker threads of this loader's passes have used so far (diagnostics: the
  /// trainer records it per epoch). 0 with no workers (batches made on the consumer thread).
  double worker_cpu_seconds() const;

  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() { return *sampler_; }
  const Options& options() const { return options_; }

 private:
  friend class Run;
  std::shared_ptr<const Dataset> dataset_;
  Options options_;
  std::shared_ptr<Sampler> sampler_;
  bool active_ = false;  // an Iterator is running
  std::atomic<int64_t> worker_cpu_ns_{0};  // see worker_cpu_seconds()
  // Resident mode: the dataset on the device (loaded by the first begin()).
  Tensor resident_images_;  // u8 (N, C, H, W)
  Tensor resident_labels_;  // i64 (N)
};

}  // namespace ember::data
