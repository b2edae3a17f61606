#pragma once
// MNIST-format datasets (IDX files): MNIST, Fashion-MNIST and anything else laid out the same way.
#include <string>

#include <ember/core/tensor.h>
#include <ember/data/dataset.h>

namespace ember::data {

/// Reads an IDX image file (magic 2051: unsigned bytes, 3 dims), plain or gzip-compressed.
/// Returns u8 (N, 1, rows, cols); any rows/cols the header states are accepted. Errors name the
/// file, the byte offset and what was expected vs found: a wrong magic number, a zero dimension,
/// a file shorter than the header promises (truncated) or longer (trailing bytes).
Tensor read_idx_images(const std::string& path);
/// Reads an IDX label file (magic 2049: unsigned bytes, 1 dim) into i64 (N). Same checks.
Tensor read_idx_labels(const std::string& path);

/// MNIST or Fashion-MNIST from `dir`: train-images-idx3-ubyte / train-labels-idx1-ubyte (Train)
/// or t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte (Test), each plain or with a .gz suffix.
/// Images (1, rows, cols); the image and label counts must agree. num_classes() is the largest
/// label + 1 (10 for MNIST and Fashion-MNIST).
class Mnist : public TensorDataset {
 public:
  Mnist(const std::string& dir, Split split);
  Split split() const { return split_; }

 private:
  Split split_;
};

}  // namespace ember::data
