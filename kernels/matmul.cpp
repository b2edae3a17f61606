// Front of the matrix products: NumPy matmul shape rules, batch broadcasting, and layout handling.
// Operands reach the GEMM implementation as contiguous (B, rows, cols) blocks; a view whose last two
// dims are transposed (x.t(), x.transpose(-1, -2)) is passed as the contiguous transpose with a
// trans flag instead of being copied.
#include <ember/kernels/matmul.h>

#include <algorithm>
#include <utility>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<GemmFn> gemm_table("gemm");

namespace {

/// Row-major contiguity of a (sizes, strides) geometry, ignoring size-1 dims (as Tensor does).
bool is_contig(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

/// A matrix operand: `base` is the tensor the geometry points into, with logical shape
/// (batch..., rows, cols) and the given strides.
struct Operand {
  Tensor base;
  Shape sizes, strides;
  int64_t offset = 0;

  int64_t rows() const { return sizes[sizes.size() - 2]; }
  int64_t cols() const { return sizes.back(); }
  Shape batch() const { return Shape(sizes.begin(), sizes.end() - 2); }
};

/// The operand as a contiguous (nb, r, c) block (nb = its batch numel) plus the trans flag:
/// (nb, rows, cols) when row-major contiguous, (nb, cols, rows) with trans = true when its last two
/// dims are a transposed contiguous block, else a contiguous copy.
std::pair<Tensor, bool> as_blocks(const Operand& op) {
  const int64_t nb = numel_of(op.batch()), r = op.rows(), c = op.cols();
  if (is_contig(op.sizes, op.strides)) {
    return {as_strided_raw(op.base, {nb, r, c}, contiguous_strides({nb, r, c}), op.offset), false};
  }
  Shape ts = op.sizes, tt = op.strides;
  std::swap(ts[ts.size() - 1], ts[ts.size() - 2]);
  std::swap(tt[tt.size() - 1], tt[tt.size() - 2]);
  if (is_contig(ts, tt)) {
    return {as_strided_raw(op.base, {nb, c, r}, contiguous_strides({nb, c, r}), op.offset), true};
  }
  Tensor view = as_strided_raw(op.base, op.sizes, op.strides, op.offset);
  Tensor dense = empty(op.sizes, op.base.options());
  copy(dense, view);
  return {as_strided_raw(dense, {nb, r, c}, contiguous_strides({nb, r, c}), 0), false};
}

/// The operand with its batch dims expanded to `batch` (stride 0 on broadcast dims).
Operand expand_batch(const Operand& op, const Shape& batch) {
  Operand e{op.base, batch, Shape(batch.size(), 0), op.offset};
  const Shape ob = op.batch();
  const size_t lead = batch.size() - ob.size();
  for (size_t i = 0; i < ob.size(); ++i) {
    if (ob[i] != 1) e.strides[lead + i] = op.strides[i];
  }
  e.sizes.push_back(op.rows());
  e.sizes.push_back(op.cols());
  e.strides.push_back(op.strides[op.strides.size() - 2]);
  e.strides.push_back(op.strides.back());
  return e;
}

Tensor raw_contiguous_view(const Tensor& t, const Shape& sizes) {
  return as_strided_raw(t, sizes, contiguous_strides(sizes), t.offset());
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "matmul: undefined operand");
  EMBER_CHECK(a.device() == b.device(), "matmul: operands on different devices: a ", a.shape_str(), " on ",
              a.device().str(), ", b ", b.shape_str(), " on ", b.device().str());
  EMBER_CHECK(a.dtype() == b.dtype(), "matmul: operands of different dtypes: a ", a.shape_str(), " is ",
              dtype_name(a.dtype()), ", b ", b.shape_str(), " is ", dtype_name(b.dtype()));
  EMBER_CHECK(is_floating(a.dtype()), "matmul: expected a floating dtype (f32, f64, f16, bf16), got ",
              dtype_name(a.dtype()));
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got a ", a.shape_str(),
              " and b ", b.shape_str());

  // 1-D operands become (1, K) and (K, 1) matrices; that dim is dropped from the result.
  Operand A{a, a.sizes(), a.strides(), a.offset()};
  Operand B{b, b.sizes(), b.strides(), b.offset()};
  if (a.dim() == 1) {
    A.sizes.insert(A.sizes.begin(), 1);
    A.strides.insert(A.strides.begin(), 0);
  }
  if (b.dim() == 1) {
    B.sizes.push_back(1);
    B.strides.push_back(0);
  }
  const int64_t M = A.rows(), K = A.cols(), N = B.cols();
  EMBER_CHECK(B.rows() == K, "matmul: inner dims do not match: a ", a.shape_str(), " has ", K, " columns but b ",
              b.shape_str(), " has ", B.rows(), " rows");

  // Broadcast the batch dims (NumPy rules), naming the full shapes on failure.
  const Shape ab = A.batch(), bb = B.batch();
  Shape batch(std::max(ab.size(), bb.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t x = i < batch.size() - ab.size() ? 1 : ab[i - (batch.size() - ab.size())];
    const int64_t y = i < batch.size() - bb.size() ? 1 : bb[i - (batch.size() - bb.size())];
    EMBER_CHECK(x == y || x == 1 || y == 1, "matmul: batch dims do not broadcast: a ", a.shape_str(), ", b ",
                b.shape_str());
    batch[i] = x == 1 ? y : x;
  }
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(M);
  if (b.dim() > 1) out_shape.push_back(N);

  const int64_t nb = numel_of(batch), na = numel_of(ab), nbb = numel_of(bb);
  Tensor out = empty({nb, M, N}, a.options());
  Tensor result = raw_contiguous_view(out, out_shape);
  if (out.numel() == 0) return result;
  if (K == 0) {
    fill(out, 0.0);
    return result;
  }

  if (na == nb && nbb == 1) {
    // b shared by the whole batch. When a is row-major the batch folds into M: one (nb*M, K) GEMM.
    auto [ta, trans_a] = as_blocks(A);
    auto [tb, trans_b] = as_blocks(B);
    if (!trans_a) {
      gemm_table(a.device(), raw_contiguous_view(ta, {1, nb * M, K}), tb, raw_contiguous_view(out, {1, nb * M, N}),
                 false, trans_b, 1.0, 0.0);
    } else {
      gemm_table(a.device(), ta, tb, out, trans_a, trans_b, 1.0, 0.0);
    }
    return result;
  }
  if (na == 1 && nbb == nb) {
    // a shared, b batched: the GEMM shares only its second operand, so compute the transpose,
    // out^T[i] (N, M) = op(b[i])^T @ op(a)^T, then lay it out as (nb, M, N).
    auto [ta, trans_a] = as_blocks(A);
    auto [tb, trans_b] = as_blocks(B);
    if (M == 1) {  // (nb, N, 1) and (nb, 1, N) are the same memory
      gemm_table(a.device(), tb, ta, raw_contiguous_view(out, {nb, N, 1}), !trans_b, !trans_a, 1.0, 0.0);
      return result;
    }
    Tensor tmp = empty({nb, N, M}, a.options());
    gemm_table(a.device(), tb, ta, tmp, !trans_b, !trans_a, 1.0, 0.0);
    copy(out, as_strided_raw(tmp, {nb, M, N}, {N * M, 1, M}, 0));
    return result;
  }
  // General case: each operand is either already per-batch or materialized expanded to the batch.
  auto [ta, trans_a] = as_blocks(na == nb ? A : expand_batch(A, batch));
  auto [tb, trans_b] = nbb == 1 ? as_blocks(B) : as_blocks(nbb == nb ? B : expand_batch(B, batch));
  gemm_table(a.device(), ta, tb, out, trans_a, trans_b, 1.0, 0.0);
  return result;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool trans_a, bool trans_b, double alpha, double beta) {
  EMBER_CHECK(a.defined() && b.defined() && out.defined(), "gemm: undefined operand");
  EMBER_CHECK(a.device() == b.device() && a.device() == out.device(), "gemm: operands on different devices: a on ",
              a.device().str(), ", b on ", b.device().str(), ", out on ", out.device().str());
  EMBER_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "gemm: expected one dtype, got a ",
              dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()), ", out ", dtype_name(out.dtype()));
  EMBER_CHECK(is_floating(a.dtype()), "gemm: expected a floating dtype (f32, f64, f16, bf16), got ",
              dtype_name(a.dtype()));
  // 2-D operands are accepted as a batch of one.
  auto as3 = [](const Tensor& t, const char* name) {
    EMBER_CHECK(t.dim() == 2 || t.dim() == 3, "gemm: ", name, " must be 2-D or 3-D (B, rows, cols), got ",
                t.shape_str());
    EMBER_CHECK(t.is_contiguous(), "gemm: ", name, " must be contiguous, got shape ", t.shape_str(), " strides ",
                shape_str(t.strides()));
    return t.dim() == 3 ? t : raw_contiguous_view(t, {1, t.size(0), t.size(1)});
  };
  const Tensor a3 = as3(a, "a"), b3 = as3(b, "b"), o3 = as3(out, "out");
  const int64_t batch = o3.size(0);
  const int64_t M = trans_a ? a3.size(2) : a3.size(1), K = trans_a ? a3.size(1) : a3.size(2);
  const int64_t Kb = trans_b ? b3.size(2) : b3.size(1), N = trans_b ? b3.size(1) : b3.size(2);
  EMBER_CHECK(
      a3.size(0) == batch && (b3.size(0) == batch || b3.size(0) == 1) && K == Kb && o3.size(1) == M && o3.size(2) == N,
      "gemm: shapes do not match: op(a) of a ", a.shape_str(), (trans_a ? " (transposed)" : ""), ", op(b) of b ",
      b.shape_str(), (trans_b ? " (transposed)" : ""), ", out ", out.shape_str(),
      "; expected a (B, M, K), b (B or 1, K, N), out (B, M, N)");
  EMBER_CHECK(!out.storage().is_same(a.storage()) && !out.storage().is_same(b.storage()),
              "gemm: out must not share storage with a or b");
  if (o3.numel() == 0) return;
  if (K == 0 && beta == 0.0) {
    fill(out, 0.0);
    return;
  }
  gemm_table(a.device(), a3, b3, o3, trans_a, trans_b, alpha, beta);
}

}  // namespace ember::kernels
