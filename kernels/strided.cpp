#include <ember/kernels/strided.h>

namespace ember::kernels {

StridedIndexer make_indexer(const Tensor& t) {
  // Walk dims from innermost to outermost, dropping size-1 dims (their stride never matters) and
  // folding a dim into the one inside it when stride[outer] == size[inner] * stride[inner]: then the
  // pair walks memory exactly like one dim of size[outer] * size[inner]. A contiguous tensor ends up
  // with one dim, so the per-element index arithmetic is a single multiply.
  int64_t sizes[64], strides[64];
  int n = 0;  // merged dims collected innermost-first
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  for (int64_t d = static_cast<int64_t>(sz.size()) - 1; d >= 0; --d) {
    if (sz[d] == 1) continue;
    if (n > 0 && st[d] == sizes[n - 1] * strides[n - 1]) {
      sizes[n - 1] *= sz[d];
      continue;
    }
    EMBER_CHECK(n < kMaxDims, "make_indexer: tensor of shape ", t.shape_str(), " strides ", shape_str(st),
                " needs more than ", kMaxDims, " dims after merging (the kernels support at most ", kMaxDims, ")");
    sizes[n] = sz[d];
    strides[n] = st[d];
    ++n;
  }
  StridedIndexer ix;
  ix.ndim = n;
  for (int i = 0; i < n; ++i) {  // back to outermost-first order
    ix.sizes[i] = sizes[n - 1 - i];
    ix.strides[i] = strides[n - 1 - i];
  }
  return ix;
}

}  // namespace ember::kernels
