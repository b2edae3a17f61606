#pragma once
// Datasets: indexable collections of (image, label) examples.
//
// Every built-in dataset keeps the whole split in memory as one u8 tensor (N, C, H, W) plus an
// i64 label tensor (N): MNIST is 47 MB, CIFAR 150 MB. get(i) converts one image to f32 in [0, 1];
// storage() hands out the u8 tensors themselves, which DataLoader's device-resident mode copies
// to the GPU once and batches from there.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::data {

/// Which part of a dataset to read.
enum class Split { Train, Test };
/// "train" / "test".
const char* split_name(Split s);

/// One example: image (C, H, W) f32 in [0, 1] on the CPU (before any transform), label in
/// [0, num_classes()).
struct Example {
  Tensor image;
  int64_t label = 0;
};

/// The whole dataset as tensors on the CPU: images u8 (N, C, H, W), labels i64 (N).
struct DatasetStorage {
  Tensor images;
  Tensor labels;
  bool defined() const { return images.defined() && labels.defined(); }
};

/// The interface DataLoader reads. get() must be safe to call from several threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Example i (0 <= i < size(); anything else is an error naming i and the size).
  virtual Example get(int64_t i) const = 0;
  /// (C, H, W) of every image.
  virtual Shape image_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  /// Whole-dataset storage when the data is held in memory as u8 images (needed by
  /// DataLoader's resident mode); undefined tensors otherwise.
  virtual DatasetStorage storage() const { return {}; }
  /// For messages: "Mnist(train, 60000 examples)".
  virtual std::string description() const;
};

/// An in-memory dataset over u8 images (N, C, H, W) and i64 labels (N), both on the CPU.
/// The base of Mnist, Cifar10, Cifar100 and Synthetic. Copies share the tensors (cheap).
class TensorDataset : public Dataset {
 public:
  TensorDataset() = default;
  /// images: u8 (N, C, H, W); labels: i64 (N) with values in [0, num_classes). num_classes < 0:
  /// max(label) + 1. Checks shapes, dtypes, devices and the label range.
  TensorDataset(Tensor images, Tensor labels, int64_t num_classes = -1, std::string name = "TensorDataset");

  int64_t size() const override;
  Example get(int64_t i) const override;
  Shape image_shape() const override;
  int64_t num_classes() const override { return num_classes_; }
  DatasetStorage storage() const override { return {images_, labels_}; }
  std::string description() const override;

  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 protected:
  void init(Tensor images, Tensor labels, int64_t num_classes, std::string name);

 private:
  Tensor images_;  // u8 (N, C, H, W), contiguous, CPU
  Tensor labels_;  // i64 (N), contiguous, CPU
  int64_t num_classes_ = 0;
  std::string name_ = "TensorDataset";
};

/// The examples of `base` at `indices` (in that order; repeats allowed). Used e.g. for
/// --limit-train. storage() gathers the base's storage when it has one.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  /// Copies `base` (built-in datasets share their tensors, so this is cheap).
  template <typename D>
  requires std::is_base_of_v<Dataset, D> Subset(const D& base, std::vector<int64_t> indices)
      : Subset(std::shared_ptr<const Dataset>(std::make_shared<D>(base)), std::move(indices)) {}

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t i) const override;
  Shape image_shape() const override { return base_->image_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  DatasetStorage storage() const override;
  std::string description() const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

/// The first min(n, base.size()) examples of `base`.
template <typename D>
requires std::is_base_of_v<Dataset, D> Subset take(const D& base, int64_t n) {
  int64_t k = n < base.size() ? (n < 0 ? 0 : n) : base.size();
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) idx[static_cast<size_t>(i)] = i;
  return Subset(base, std::move(idx));
}

}  // namespace ember::data
