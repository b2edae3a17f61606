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

/// How the elements of a 4-D (N, C, H, W) tensor lie in memory: row-major (`contiguous`, NCHW), or
/// with the channels innermost (`channels_last`, NHWC: strides (H*W*C, 1, W*C, C)), the layout
/// tensor-core convolutions prefer. The logical shape and indexing are the same in both.
enum class MemoryFormat { contiguous, channels_last };
const char* memory_format_name(MemoryFormat f);
/// Strides of `format` for `sizes` (channels_last needs 4 dims; throws naming the shape otherwise).
Shape strides_for(const Shape& sizes, MemoryFormat format);
/// True when `strides` lay out `sizes` as `format` does (size-1 dims may have any stride).
bool has_layout(const Shape& sizes, const Shape& strides, MemoryFormat format);
/// "[2, 3]"
std::string shape_str(const Shape& s);
/// Normalizes a possibly negative dim against `ndim`; throws naming `what` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");
/// NumPy broadcasting of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace ember
