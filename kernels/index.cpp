// Front of index_select / index_add: shape, dtype and device checks, host-side bounds checks for
// CPU indices, and the (outer, D, inner) views the implementations work on.
#include <ember/kernels/index.h>

#include <algorithm>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<IndexSelectFn> index_select_table("index_select");
DispatchTable<IndexAddFn> index_add_table("index_add");

namespace {

/// The index as a contiguous 1-D i64 tensor, after checking its rank, dtype and device.
Tensor index_i64(const Tensor& index, const Tensor& x, const char* what) {
  EMBER_CHECK(index.defined(), what, ": undefined index");
  EMBER_CHECK(index.dim() <= 1, what, ": index must be 0-D or 1-D, got ", index.shape_str());
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, what, ": index must be i64 or i32, got ",
              dtype_name(index.dtype()));
  EMBER_CHECK(index.device() == x.device(), what, ": index on ", index.device().str(), " but tensor ", x.shape_str(),
              " on ", x.device().str());
  Tensor idx = index.dtype() == DType::i64 ? contiguous_raw(index) : cast(index, DType::i64);
  return raw_view(idx, {idx.numel()});
}

/// Host-side bounds check (CPU indices only; a GPU kernel checks its own).
void check_bounds(const Tensor& idx, int64_t dim, int64_t D, const Tensor& x, const char* what) {
  if (!idx.device().is_cpu()) return;
  const int64_t* p = idx.data<int64_t>();
  for (int64_t k = 0; k < idx.numel(); ++k) {
    EMBER_CHECK(p[k] >= 0 && p[k] < D, what, ": index ", p[k], " at position ", k, " is out of range for dim ", dim,
                " of size ", D, " (valid range [0, ", D, ")) of tensor ", x.shape_str());
  }
}

/// (outer, D, inner) of `shape` around dim (0-d: one element).
Shape split_at(const Shape& shape, int64_t dim) {
  Shape s{1, 1, 1};
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) s[i < dim ? 0 : (i == dim ? 1 : 2)] *= shape[i];
  return s;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* what = "index_select";
  EMBER_CHECK(x.defined(), what, ": undefined input");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), what);
  const int64_t D = x.dim() == 0 ? 1 : x.size(d);
  Tensor idx = index_i64(index, x, what);
  const int64_t K = idx.numel();
  check_bounds(idx, d, D, x, what);
  Shape out_shape = x.sizes();
  if (x.dim() > 0) out_shape[d] = K;
  else if (index.dim() == 1) out_shape = {K};
  Tensor out = empty(out_shape, x.options());
  if (out.numel() == 0) return out;
  Shape s = split_at(x.sizes(), d);
  Tensor src = raw_view(contiguous_raw(x), s);
  s[1] = K;
  index_select_table(x.device(), src, idx, raw_view(out, s));
  return out;
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* what = "index_add";
  EMBER_CHECK(out.defined() && src.defined(), what, ": undefined out or src");
  EMBER_CHECK(out.device() == src.device(), what, ": out ", out.shape_str(), " on ", out.device().str(), " but src ",
              src.shape_str(), " on ", src.device().str());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(out.dim(), 1), what);
  const int64_t D = out.dim() == 0 ? 1 : out.size(d);
  Tensor idx = index_i64(index, out, what);
  const int64_t K = idx.numel();
  Shape expected = out.sizes();
  if (out.dim() > 0) expected[d] = K;
  EMBER_CHECK(src.sizes() == expected || (out.dim() == 0 && src.numel() == K), what, ": src must have shape ",
              shape_str(expected), " (out ", out.shape_str(), " with dim ", d, " of size ", K, " = index length), got ",
              src.shape_str());
  EMBER_CHECK(!has_internal_overlap(out), what, ": out (shape ", out.shape_str(), ", strides ",
              shape_str(out.strides()), ") has several elements in one memory location (an expanded view)");
  check_bounds(idx, d, D, out, what);
  if (K == 0 || out.numel() == 0) return;
  Tensor s = src.dtype() == out.dtype() ? contiguous_raw(src) : cast(src, out.dtype());
  if (s.storage().is_same(out.storage())) {
    // src is (a view of) out itself: read it all before the kernel writes (its src is __restrict__).
    Tensor tmp = empty(s.sizes(), s.options());
    copy(tmp, s);
    s = tmp;
  }
  Shape geo = split_at(out.sizes(), d);
  Shape src_geo = geo;
  src_geo[1] = K;
  // The implementation needs a contiguous destination; a strided out is updated through a copy.
  Tensor dst = contiguous_raw(out);
  index_add_table(out.device(), raw_view(dst, geo), idx, raw_view(s, src_geo));
  if (!dst.is_same(out)) copy(out, dst);
}

}  // namespace ember::kernels
