// CUDA index_select / index_add (kernels/cuda/index.cu) against the CPU twin and a float64
// reference computed here.
//
// index_select only moves elements: exact. index_add accumulates duplicates with atomics in
// whatever order they land, each addition rounded in the tensor's dtype (f16/bf16 included), so a
// float result may differ from the in-order CPU sum. Bound for an element that received m
// additions: loose_tol(dt) * m * (|out0| + sum |src terms|) + loose_tol(dt) * |ref|, i.e. one rounding of
// the storage dtype per addition at the scale of the running sum. Integer sums are exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/index.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);
const DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                           DType::i32, DType::i64, DType::u8,  DType::boolean};

struct Geometry {
  int64_t outer = 1, D = 1, inner = 1;
};
Geometry split(const Shape& s, int64_t dim) {
  Geometry g;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < dim ? g.outer : i == dim ? g.D : g.inner) *= s[i];
  return g;
}

/// `n` indices in [0, D), with duplicates (drawn with replacement).
std::vector<int64_t> random_indices(int64_t n, int64_t D, uint64_t seed) {
  std::vector<double> v = random_values(n, seed, 0.0, static_cast<double>(D));
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = std::min<int64_t>(D - 1, static_cast<int64_t>(v[i]));
  return idx;
}

Tensor index_tensor(const std::vector<int64_t>& idx, DType dt, Device dev) {
  std::vector<double> v(idx.begin(), idx.end());
  return from_vector(v, {static_cast<int64_t>(idx.size())}, {.dtype = dt, .device = dev});
}

/// float64 reference of index_select(x, dim, idx) with x's values `xv` (row-major of `shape`).
std::vector<double> ref_select(const std::vector<double>& xv, const Shape& shape, int64_t dim,
                               const std::vector<int64_t>& idx) {
  const Geometry g = split(shape, dim);
  const int64_t K = static_cast<int64_t>(idx.size());
  std::vector<double> out(static_cast<size_t>(g.outer * K * g.inner));
  for (int64_t b = 0; b < g.outer; ++b)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < g.inner; ++j) out[(b * K + k) * g.inner + j] = xv[(b * g.D + idx[k]) * g.inner + j];
  return out;
}

/// Values for dtype dt: bool gets a 0/1 mix, u8 small non-negative numbers (sums stay < 256).
std::vector<double> values_for(DType dt, int64_t n, uint64_t seed) {
  if (dt == DType::boolean || dt == DType::u8) {
    std::vector<double> v = random_values(n, seed, 0.0, dt == DType::boolean ? 2.0 : 8.0);
    for (double& x : v) x = std::floor(x);
    return v;
  }
  return random_values(n, seed, -20.0, 20.0);
}

}  // namespace

TEST_CASE("cuda index_select matches the CPU and a reference on every dim, dtype and index type", "[cuda]") {
  const Shape shape{7, 33, 5};
  for (DType dt : kAllTypes) {
    const std::vector<double> xv = values_for(dt, numel_of(shape), 201);
    const Tensor xc = from_vector(xv, shape, {.dtype = dt});
    const Tensor xg = xc.to(kGpu);
    for (int64_t dim = 0; dim < 3; ++dim) {
      const std::vector<int64_t> idx = random_indices(13, shape[dim], 202 + dim);
      const std::vector<double> ref = ref_select(to_f64(xc), shape, dim, idx);
      for (DType it : {DType::i64, DType::i32}) {
        INFO(dtype_name(dt) << " dim " << dim << " index " << dtype_name(it));
        const Tensor gc = kernels::index_select(xc, dim, index_tensor(idx, it, Device::cpu()));
        const Tensor gg = kernels::index_select(xg, dim, index_tensor(idx, it, kGpu));
        REQUIRE(gg.device() == kGpu);
        check_close(gg, to_f64(gc), 0, 0);
        check_close(gg, ref, 0, 0);
      }
      // A transposed input (the front makes it contiguous first).
      INFO(dtype_name(dt) << " dim " << dim << " transposed input");
      const Tensor xt = xg.transpose(0, 2);  // (5, 33, 7)
      const std::vector<int64_t> idt = random_indices(9, xt.size(dim), 205 + dim);
      check_close(kernels::index_select(xt, dim, index_tensor(idt, DType::i64, kGpu)),
                  to_f64(kernels::index_select(xc.transpose(0, 2), dim, index_tensor(idt, DType::i64, Device::cpu()))),
                  0, 0);
    }
  }
}

TEST_CASE("cuda index_select row widths take every chunk size, aligned or not", "[cuda]") {
  // Row bytes: 64 f32 = 256 (16-byte chunks), 4 f16 = 8, 6 f16 = 12 (4), 3 f16 = 6 (2), 7 u8 = 7 (1).
  struct Case {
    DType dt;
    int64_t rows, width;
  };
  for (const Case& c : {Case{DType::f32, 1000, 64}, Case{DType::f16, 50, 4}, Case{DType::f16, 50, 6},
                        Case{DType::f16, 51, 3}, Case{DType::u8, 40, 7}, Case{DType::f64, 30, 3}}) {
    INFO(dtype_name(c.dt) << " rows " << c.rows << " width " << c.width);
    const std::vector<int64_t> idx = random_indices(257, c.rows, 211);
    const Tensor base =
        from_vector(values_for(c.dt, c.rows * c.width + 1, 212), {c.rows * c.width + 1}, {.dtype = c.dt});
    for (int64_t shift : {0, 1}) {  // shift 1: the rows start one element into the buffer
      INFO("shift " << shift);
      const Tensor xc = base.narrow(0, shift, c.rows * c.width).view({c.rows, c.width});
      const Tensor xg = base.to(kGpu).narrow(0, shift, c.rows * c.width).view({c.rows, c.width});
      const Tensor out = kernels::index_select(xg, 0, index_tensor(idx, DType::i64, kGpu));
      check_close(out, ref_select(to_f64(xc), {c.rows, c.width}, 0, idx), 0, 0);
    }
  }
}

TEST_CASE("cuda index_select and index_add report out-of-range indices", "[cuda][index]") {
  // The checks are read without waiting (core/device_check.h): the calls return, and the error
  // naming the index comes at the next synchronization.
  const Tensor x = random_tensor({5, 3}, DType::f32, 221, -1, 1, Layout::Contiguous, kGpu);
  for (int64_t bad : {5, -1, 1000000}) {
    INFO("bad index " << bad);
    const Tensor idx = index_tensor({0, 2, bad, 1}, DType::i64, kGpu);
    const Tensor y = kernels::index_select(x, 0, idx);
    CHECK_THROWS_WITH(synchronize(kGpu), Catch::Contains("index " + std::to_string(bad) + " (entry 2") &&
                                             Catch::Contains("out of range") && Catch::Contains("[0, 5)"));
    Tensor out = random_tensor({5, 3}, DType::f32, 222, -1, 1, Layout::Contiguous, kGpu);
    const std::vector<double> before = to_f64(out);
    const Tensor src = random_tensor({4, 3}, DType::f32, 223, -1, 1, Layout::Contiguous, kGpu);
    kernels::index_add(out, 0, idx, src);
    CHECK_THROWS_WITH(synchronize(kGpu), Catch::Contains("out of range") && Catch::Contains("nothing was added"));
    // As on the CPU (bounds checked before anything is written), the valid rows 0, 2 and 1 were
    // not added either: the add kernel saw the raised check and left `out` untouched.
    check_close(out, before, 0, 0);
  }
  // The flag is per call: a valid call right after succeeds.
  const Tensor ok = kernels::index_select(x, 0, index_tensor({4, 0}, DType::i32, kGpu));
  const std::vector<double> xv = to_f64(x);
  check_close(ok, {xv[12], xv[13], xv[14], xv[0], xv[1], xv[2]}, 0, 0);
}

TEST_CASE("cuda index_add matches the CPU and a reference, duplicates included", "[cuda]") {
  const Shape shape{6, 31, 5};
  for (DType dt : kAllTypes) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      INFO(dtype_name(dt) << " dim " << dim);
      const int64_t K = 2 * shape[dim] + 3;  // more indices than slots: duplicates guaranteed
      const std::vector<int64_t> idx = random_indices(K, shape[dim], 231 + dim);
      Shape sshape = shape;
      sshape[dim] = K;
      const Tensor out0 = from_vector(values_for(dt, numel_of(shape), 234), shape, {.dtype = dt});
      // src as a transposed view on both devices (the front makes it contiguous).
      Shape st = sshape;
      std::swap(st[0], st[2]);
      const Tensor src_t = from_vector(values_for(dt, numel_of(sshape), 235), st, {.dtype = dt});
      const Tensor src_c = src_t.transpose(0, 2);
      const Tensor src_g = src_t.to(kGpu).transpose(0, 2);

      const std::vector<double> base = to_f64(out0);  // before either index_add runs
      Tensor oc = out0.clone();
      Tensor og = out0.to(kGpu);
      kernels::index_add(oc, dim, index_tensor(idx, DType::i64, Device::cpu()), src_c);
      kernels::index_add(og, dim, index_tensor(idx, DType::i32, kGpu), src_g);

      // float64 reference and per-element bound (see the top comment).
      const Geometry g = split(shape, dim);
      std::vector<double> ref = base, scale(ref.size()), adds(ref.size(), 0.0);
      for (size_t i = 0; i < ref.size(); ++i) scale[i] = std::fabs(ref[i]);
      const std::vector<double> sv = to_f64(src_c);
      for (int64_t b = 0; b < g.outer; ++b)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t j = 0; j < g.inner; ++j) {
            const size_t o = static_cast<size_t>((b * g.D + idx[k]) * g.inner + j);
            const double v = sv[(b * K + k) * g.inner + j];
            if (dt == DType::boolean) ref[o] = (ref[o] != 0 || v != 0) ? 1.0 : 0.0;
            else ref[o] += v;
            scale[o] += std::fabs(v);
            adds[o] += 1;
          }
      const std::vector<double> got = to_f64(og), cpu = to_f64(oc);
      int bad_ref = 0, bad_cpu = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double bound = loose_tol(dt) * (adds[i] * scale[i] + std::fabs(ref[i]));
        if (std::fabs(got[i] - ref[i]) > bound) ++bad_ref;
        if (std::fabs(got[i] - cpu[i]) > 2 * bound) ++bad_cpu;
      }
      CHECK(bad_ref == 0);
      CHECK(bad_cpu == 0);
    }
  }
}

TEST_CASE("cuda index_select and index_add past one full grid", "[cuda][slow]") {
  // 2^16 rows of 257 f32: a 1028-byte row moves in 4-byte chunks, so both kernels iterate over
  // 2^24 + 2^16 items, past the 2^24 threads of a capped grid (a second grid-stride round).
  const int64_t rows = int64_t(1) << 16, width = 257;
  const Tensor xc = random_tensor({rows, width}, DType::f32, 241, -1, 1);
  const Tensor xg = xc.to(kGpu);
  const std::vector<int64_t> idx = random_indices(rows, rows, 242);
  const Tensor ic = index_tensor(idx, DType::i64, Device::cpu()), ig = ic.to(kGpu);
  const Tensor sel = kernels::index_select(xg, 0, ig);
  check_close(sel, to_f64(kernels::index_select(xc, 0, ic)), 0, 0);
  // Scatter the selected rows back with index_add onto zeros: row r receives every x[idx[k]]
  // with idx[k] == r, i.e. count(r) * x[r]. With about one duplicate per row the f32 sums are of
  // a few terms of magnitude <= 1: bound loose_tol(f32) * adds * scale as above, scale <= adds.
  Tensor og = empty({rows, width}, {.dtype = DType::f32, .device = kGpu});
  og.zero_();
  kernels::index_add(og, 0, ig, sel);
  std::vector<double> count(static_cast<size_t>(rows), 0.0);
  for (int64_t r : idx) count[r] += 1;
  const std::vector<double> got = to_f64(og), xv = to_f64(xc);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      const double expect = count[r] * xv[r * width + j];
      if (std::fabs(got[r * width + j] - expect) > loose_tol(DType::f32) * count[r] * count[r] + 1e-30) ++bad;
    }
  CHECK(bad == 0);
}

TEST_CASE("cuda index_select and index_add past 2^31 elements take the 64-bit path", "[cuda][slow]") {
  // A 1-D u8 tensor of 2^31 + 8 elements (2 GiB): one-byte chunks, so the gathered tensor has more
  // than 2^31 chunks and the kernels must index in 64 bits.
  const int64_t big = (int64_t(1) << 31) + 8, far = (int64_t(1) << 31) + 5;
  Tensor x = empty({big}, {.dtype = DType::u8, .device = kGpu});
  kernels::fill(x, 3.0);
  kernels::fill(x.narrow(0, far, 1), 9.0);
  kernels::fill(x.narrow(0, 7, 1), 5.0);
  const Tensor idx = index_tensor({0, far, 7, far}, DType::i64, kGpu);
  check_close(kernels::index_select(x, 0, idx), {3, 9, 5, 9}, 0, 0);
  kernels::index_add(x, 0, idx, from_vector({1, 2, 4, 8}, {4}, {.dtype = DType::u8, .device = kGpu}));
  check_close(x.narrow(0, far - 1, 3), {3, 19, 3}, 0, 0);  // 9 + 2 + 8
  check_close(x.narrow(0, 0, 8), {4, 3, 3, 3, 3, 3, 3, 9}, 0, 0);
  const Tensor bad = index_tensor({big}, DType::i64, kGpu);
  const Tensor y = kernels::index_select(x, 0, bad);
  CHECK_THROWS_WITH(synchronize(kGpu), Catch::Contains("out of range"));
}

TEST_CASE("cuda index_select and index_add accept zero-element operands", "[cuda]") {
  // Through the tables, past the front's early returns: no index is read (even a bad one) when
  // there is nothing to gather or add, and no launch happens.
  const Tensor bad = index_tensor({7}, DType::i64, kGpu);
  const Tensor none = empty({0}, {.dtype = DType::i64, .device = kGpu});
  // inner == 0: rows of zero bytes.
  CHECK_NOTHROW(kernels::index_select_table(kGpu, empty({2, 3, 0}, {.dtype = DType::f32, .device = kGpu}), bad,
                                            empty({2, 1, 0}, {.dtype = DType::f32, .device = kGpu})));
  CHECK_NOTHROW(kernels::index_add_table(kGpu, empty({2, 3, 0}, {.dtype = DType::f32, .device = kGpu}), bad,
                                         empty({2, 1, 0}, {.dtype = DType::f32, .device = kGpu})));
  // K == 0 and outer == 0.
  CHECK_NOTHROW(kernels::index_select_table(kGpu, empty({2, 3, 4}, {.dtype = DType::f32, .device = kGpu}), none,
                                            empty({2, 0, 4}, {.dtype = DType::f32, .device = kGpu})));
  CHECK_NOTHROW(kernels::index_add_table(kGpu, empty({0, 3, 4}, {.dtype = DType::f32, .device = kGpu}), bad,
                                         empty({0, 1, 4}, {.dtype = DType::f32, .device = kGpu})));
  CHECK(kernels::index_select(empty({5, 0}, {.dtype = DType::f32, .device = kGpu}), 0,
                              index_tensor({1, 4}, DType::i64, kGpu))
            .sizes() == Shape{2, 0});
  CHECK_NOTHROW(synchronize(kGpu));
}
