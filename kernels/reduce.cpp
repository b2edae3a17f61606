// Front of the reductions: normalizes dims, picks the result dtype, presents the input to the
// device implementation as a contiguous (outer, R, inner) tensor and shapes the result.
#include <ember/kernels/reduce.h>

#include <algorithm>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<ReduceFn> reduce_table("reduce");
DispatchTable<ArgmaxFn> argmax_table("argmax");

namespace {

/// The result dtype of `op` on an input of dtype `in` (integer rule from the op list).
DType result_dtype(ReduceOp op, DType in) {
  if (is_floating(in)) return in;
  return op_info(op).integers == ReduceIntegers::I64 ? DType::i64 : in;
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  const char* name = op_name(op);
  EMBER_CHECK(x.defined(), name, ": undefined input tensor");
  const int64_t nd = x.dim();
  EMBER_CHECK(op_info(op).integers != ReduceIntegers::Refused || is_floating(x.dtype()), name,
              ": expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(x.dtype()),
              " for a tensor of shape ", x.shape_str());

  // Normalize dims: wrap negatives, reject duplicates, sort. Empty means all dims.
  std::vector<bool> reduced(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) {
    // A 0-d tensor accepts dim 0 / -1 like PyTorch; it has nothing to reduce.
    const int64_t w = wrap_dim(d, std::max<int64_t>(nd, 1), name);
    if (nd == 0) continue;
    EMBER_CHECK(!reduced[w], name, ": dim ", d, " given more than once in the dims of a reduction over shape ",
                x.shape_str());
    reduced[w] = true;
  }

  // Output shape, and the (outer, R, inner) factorization.
  Shape out_shape;
  int64_t R = 1;
  int first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      R *= x.size(d);
      if (first < 0) first = static_cast<int>(d);
      last = static_cast<int>(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.size(d));
    }
  }
  if (!op_info(op).on_empty && R == 0) {
    EMBER_FAIL(name, ": cannot reduce over an empty range (shape ", x.shape_str(), ", reduced extent 0); ", name,
               " of nothing is undefined");
  }
  if (first >= 0 && nd == 4 && !x.is_contiguous() && x.suggest_memory_format() == MemoryFormat::channels_last) {
    // Channels-last: reduce the (N, H, W, C) view, which is contiguous, when the kept dims keep
    // their order there (so the result is laid out as out_shape): e.g. {0, 2, 3} (a conv bias's
    // gradient, a column sum of the (N*H*W, C) rows), {2, 3} or {1}. Not {0} alone.
    const int64_t perm[4] = {0, 2, 3, 1};
    std::vector<int64_t> kept, dims_nhwc;
    for (int64_t i = 0; i < 4; ++i) {
      if (reduced[perm[i]]) dims_nhwc.push_back(i);
      else kept.push_back(perm[i]);
    }
    if (std::is_sorted(kept.begin(), kept.end())) {
      const Tensor nhwc = as_strided_raw(x, {x.size(0), x.size(2), x.size(3), x.size(1)},
                                         {x.stride(0), x.stride(2), x.stride(3), x.stride(1)}, x.offset());
      return raw_view(reduce(op, nhwc, dims_nhwc, false), out_shape);
    }
  }
  bool block = true;  // reduced dims form one run [first, last]
  for (int d = first; d >= 0 && d <= last; ++d) block = block && reduced[d];

  if (!block && x.is_contiguous() && x.dtype() != DType::f16 && x.dtype() != DType::bf16) {
    // Several runs of reduced dims (e.g. {0, 2, 3} of NCHW): reduce the last run in place, then
    // the remaining dims of that smaller result, instead of copying x into a permuted layout.
    // The other runs keep their indices, as they all come before the last one. (Not for f16/bf16,
    // whose partial results would be rounded to half precision in between.)
    int run = last;
    while (reduced[run - 1]) --run;  // a run before this one exists, so run stays > 0
    std::vector<int64_t> tail, rest;
    for (int64_t d = 0; d < nd; ++d)
      if (reduced[d]) (d >= run ? tail : rest).push_back(d);
    return raw_view(reduce(op, reduce(op, x, tail, false), rest, false), out_shape);
  }

  Tensor src;
  int64_t outer = 1, inner = 1;
  if (first < 0) {
    // Nothing reduced (0-d input, or every requested dim was of a 0-d tensor): R = 1.
    src = contiguous_raw(x);
    outer = x.numel();
    src = raw_view(src, {outer, 1, 1});
  } else if (block && x.is_contiguous()) {
    for (int d = 0; d < first; ++d) outer *= x.size(d);
    for (int64_t d = last + 1; d < nd; ++d) inner *= x.size(d);
    src = raw_view(x, {outer, R, inner});
  } else {
    // Permute kept dims to the front, reduced dims to the back, then copy: (outer, R, 1).
    Shape sizes, strides;
    for (int64_t pass = 0; pass < 2; ++pass) {
      for (int64_t d = 0; d < nd; ++d) {
        if (reduced[d] == (pass == 1)) {
          sizes.push_back(x.size(d));
          strides.push_back(x.stride(d));
          if (pass == 0) outer *= x.size(d);
        }
      }
    }
    Tensor permuted = as_strided_raw(x, sizes, strides, x.offset());
    src = raw_view(contiguous_raw(permuted), {outer, R, 1});
  }

  Tensor out = empty({outer, inner}, {.dtype = result_dtype(op, x.dtype()), .device = x.device()});
  if (out.numel() > 0) reduce_table(x.device(), op, src, out);
  return raw_view(out, out_shape);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  EMBER_CHECK(x.defined(), "argmax: undefined input tensor");
  const int64_t nd = x.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(nd, 1), "argmax dim");
  const int64_t R = nd == 0 ? 1 : x.size(d);
  EMBER_CHECK(R > 0, "argmax: dim ", dim, " of shape ", x.shape_str(), " is empty; argmax of nothing is undefined");
  int64_t outer = 1, inner = 1;
  Shape out_shape;
  for (int64_t i = 0; i < nd; ++i) {
    if (i < d) outer *= x.size(i);
    if (i > d) inner *= x.size(i);
    if (i != d) out_shape.push_back(x.size(i));
    else if (keepdim) out_shape.push_back(1);
  }
  Tensor src = raw_view(contiguous_raw(x), {outer, R, inner});
  Tensor out = empty({outer, inner}, {.dtype = DType::i64, .device = x.device()});
  if (out.numel() > 0) argmax_table(x.device(), src, out);
  return raw_view(out, out_shape);
}

}  // namespace ember::kernels
