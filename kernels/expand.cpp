#include <ember/kernels/expand.h>

namespace ember::kernels {

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[lead + i] && from[i] != 1) return false;
  return true;
}

Tensor expand_to(const Tensor& t, const Shape& sizes) {
  if (t.sizes() == sizes) return t;
  EMBER_CHECK(broadcasts_to(t.sizes(), sizes), "expand: shape ", t.shape_str(), " cannot be broadcast to ",
              shape_str(sizes));
  const size_t lead = sizes.size() - t.sizes().size();
  Shape strides(sizes.size(), 0);
  for (size_t i = 0; i < t.sizes().size(); ++i)
    strides[lead + i] = t.sizes()[i] == sizes[lead + i] ? t.strides()[i] : 0;
  return as_strided_raw(t, sizes, strides, t.offset());
}

}  // namespace ember::kernels
