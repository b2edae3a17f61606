#pragma once
// A generated dataset for benchmarks and tests that must not depend on files.
#include <cstdint>

#include <ember/data/dataset.h>

namespace ember::data {

/// n examples of shape (C, H, W) in `classes` classes, a pure function of `seed`. Each class has
/// a random prototype image; an example is the average of its class prototype and uniform noise,
/// so the labels are learnable (a linear model separates them) while the pixels still look random.
/// Stored as u8 like the real datasets (supports the resident loader).
class Synthetic : public TensorDataset {
 public:
  Synthetic(int64_t n, const Shape& image_shape, int64_t classes, uint64_t seed = 0);
};

}  // namespace ember::data
