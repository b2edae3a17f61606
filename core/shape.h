#pragma once
// Shapes and strides are plain vectors of int64 (element counts, never bytes).
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

using Shape = std::vector<int64_t>;

/// Product of the sizes (1 for a 0-d shape).
int64_t numel_of(const Shape& sizes);
/// Row-major strides for `sizes`.
Shape contiguous_strides(const Shape& sizes);
/// "[2, 3]"
std::string shape_str(const Shape& s);
/// Normalizes a possibly negative dim against `ndim`; throws naming `what` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");
/// NumPy broadcasting of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace ember
