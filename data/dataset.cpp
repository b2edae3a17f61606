#include <ember/data/dataset.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <ember/core/error.h>
#include <ember/kernels/index.h>

namespace ember::data {

const char* split_name(Split s) { return s == Split::Train ? "train" : "test"; }

std::string Dataset::description() const {
  std::ostringstream os;
  os << "Dataset(" << size() << " examples)";
  return os.str();
}

// ---- TensorDataset ----

TensorDataset::TensorDataset(Tensor images, Tensor labels, int64_t num_classes, std::string name) {
  init(std::move(images), std::move(labels), num_classes, std::move(name));
}

void TensorDataset::init(Tensor images, Tensor labels, int64_t num_classes, std::string name) {
  EMBER_CHECK(images.defined() && labels.defined(), name, ": images and labels must be defined tensors");
  EMBER_CHECK(images.dim() == 4, name, ": expected images of shape (N, C, H, W), got ", images.shape_str());
  EMBER_CHECK(images.dtype() == DType::u8, name, ": expected u8 images, got ", dtype_name(images.dtype()));
  EMBER_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), name, ": expected labels of shape [",
              images.size(0), "] to match images ", images.shape_str(), ", got ", labels.shape_str());
  EMBER_CHECK(labels.dtype() == DType::i64, name, ": expected i64 labels, got ", dtype_name(labels.dtype()));
  EMBER_CHECK(images.device().is_cpu() && labels.device().is_cpu(), name,
              ": dataset tensors must be on the CPU, got images on ", images.device().str(), " and labels on ",
              labels.device().str());
  images_ = images.is_contiguous() ? images : images.contiguous();
  labels_ = labels.is_contiguous() ? labels : labels.contiguous();
  name_ = std::move(name);
  const int64_t* l = labels_.data<int64_t>();
  int64_t n = labels_.numel();
  int64_t max_label = -1;
  for (int64_t i = 0; i < n; ++i) {
    EMBER_CHECK(l[i] >= 0, name_, ": label of example ", i, " is ", l[i], ", expected a class index >= 0");
    max_label = std::max(max_label, l[i]);
  }
  if (num_classes < 0) {
    num_classes_ = max_label + 1;
  } else {
    EMBER_CHECK(max_label < num_classes, name_, ": a label is ", max_label, ", expected labels in [0, ", num_classes,
                ")");
    num_classes_ = num_classes;
  }
}

int64_t TensorDataset::size() const { return images_.defined() ? images_.size(0) : 0; }

Shape TensorDataset::image_shape() const {
  EMBER_CHECK(images_.defined(), name_, ": empty dataset has no image shape");
  return Shape(images_.sizes().begin() + 1, images_.sizes().end());
}

Example TensorDataset::get(int64_t i) const {
  int64_t n = size();
  EMBER_CHECK(i >= 0 && i < n, name_, ": example index ", i, " out of range [0, ", n, ")");
  Shape s = image_shape();
  int64_t per = numel_of(s);
  Tensor img = empty(s, {.dtype = DType::f32});
  const uint8_t* src = images_.data<uint8_t>() + i * per;
  float* dst = img.data<float>();
  // Division (not multiplication by 1/255) so the device-resident path, which divides a cast
  // batch by 255 with the elementwise kernel, produces bit-identical values.
  for (int64_t k = 0; k < per; ++k) dst[k] = static_cast<float>(src[k]) / 255.0f;
  return {img, labels_.data<int64_t>()[i]};
}

std::string TensorDataset::description() const {
  std::ostringstream os;
  os << name_ << "(" << size() << " examples";
  if (images_.defined()) os << ", images " << shape_str(image_shape());
  os << ", " << num_classes_ << " classes)";
  return os.str();
}

// ---- Subset ----

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  EMBER_CHECK(base_ != nullptr, "Subset: base dataset is null");
  int64_t n = base_->size();
  for (size_t k = 0; k < indices_.size(); ++k) {
    EMBER_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: index ", indices_[k], " at position ", k,
                " is out of range [0, ", n, ") of ", base_->description());
  }
}

Example Subset::get(int64_t i) const {
  EMBER_CHECK(i >= 0 && i < size(), "Subset: example index ", i, " out of range [0, ", size(), ")");
  return base_->get(indices_[static_cast<size_t>(i)]);
}

DatasetStorage Subset::storage() const {
  DatasetStorage s = base_->storage();
  if (!s.defined()) return {};
  Tensor idx = empty({size()}, {.dtype = DType::i64});
  if (!indices_.empty()) std::memcpy(idx.data<int64_t>(), indices_.data(), indices_.size() * sizeof(int64_t));
  return {kernels::index_select(s.images, 0, idx), kernels::index_select(s.labels, 0, idx)};
}

std::string Subset::description() const {
  std::ostringstream os;
  os << "Subset(" << size() << " of " << base_->description() << ")";
  return os.str();
}

}  // namespace ember::data
