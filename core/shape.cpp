#include <ember/core/shape.h>

#include <sstream>

#include <ember/core/error.h>

namespace ember {

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return strides;
}

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? "channels_last" : "contiguous";
}

Shape strides_for(const Shape& sizes, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return contiguous_strides(sizes);
  EMBER_CHECK(sizes.size() == 4, "channels_last needs a 4-D (N, C, H, W) shape, got ", shape_str(sizes));
  // NHWC row-major, mapped back to the (N, C, H, W) dims.
  const Shape nhwc = contiguous_strides({sizes[0], sizes[2], sizes[3], sizes[1]});
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

bool has_layout(const Shape& sizes, const Shape& strides, MemoryFormat format) {
  if (format == MemoryFormat::channels_last && sizes.size() != 4) return false;
  if (numel_of(sizes) == 0) return true;  // no element to be out of place
  const Shape want = strides_for(sizes, format);
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] != 1 && strides[i] != want[i]) return false;
  return true;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  EMBER_CHECK(dim >= lo && dim <= hi, what, " ", dim, " out of range for a ", ndim, "-d tensor (expected ", lo, "..",
              hi, ")");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, "shapes ", shape_str(a), " and ", shape_str(b),
                " cannot be broadcast (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace ember
