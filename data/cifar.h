#pragma once
// CIFAR-10 and CIFAR-100, binary versions (https://www.cs.toronto.edu/~kriz/cifar.html).
#include <string>

#include <ember/data/dataset.h>

namespace ember::data {

/// CIFAR-10 from `dir` (or `dir/cifar-10-batches-bin`, as the archive unpacks):
/// data_batch_1.bin .. data_batch_5.bin (Train) or test_batch.bin (Test), each a sequence of
/// 3073-byte records (label byte 0..9, then 1024 red, 1024 green, 1024 blue pixels, row-major
/// 32x32). Images (3, 32, 32), 10 classes. A file that is not a whole number of records, or a
/// label out of range, is an error naming the file, the byte offset and expected vs found.
class Cifar10 : public TensorDataset {
 public:
  Cifar10(const std::string& dir, Split split);
};

/// CIFAR-100 from `dir` (or `dir/cifar-100-binary`): train.bin / test.bin, 3074-byte records
/// (coarse label 0..19, fine label 0..99, then 3072 pixels as in CIFAR-10).
class Cifar100 : public TensorDataset {
 public:
  enum class Label { Fine, Coarse };
  Cifar100(const std::string& dir, Split split, Label label = Label::Fine);
  Label label_kind() const { return label_; }

 private:
  Label label_;
};

}  // namespace ember::data
