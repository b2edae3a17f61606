// CUDA reductions (kernels/cuda/reduce.cu) against float64 references computed here and against
// the CPU twin. Inputs are made on the CPU (tests/support/reference.h) and the same values are
// placed on the GPU with the same layout, so transposed and strided views reach the front too.
//
// Tolerances: a sum of K values accumulated in f32 (f16/bf16/f32 inputs) or f64 is allowed an
// error of loose_tol_sum(acc, K) * rms(x) = loose_tol(acc) * ||x||_2 (the error of a blocked or tree sum
// grows like sqrt(K) times the size of one term), plus one rounding of the result in the output
// dtype: loose_tol(out) * |ref|. Max, min and argmax must be exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/kernels/reduce.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::ReduceOp;

namespace {

const Device kGpu = Device::cuda(0);

/// Compares one set of results with the reference under the bounds described at the top; `slack`
/// widens them (2 when comparing two implementations that each meet them).
void check_against(const std::vector<double>& got, const ReduceRef& ref, ReduceOp op, DType in, DType out, double slack,
                   const char* what) {
  REQUIRE(got.size() == ref.out.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double bound = 0.0;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      bound = loose_tol(acc_of(in)) * std::sqrt(ref.sq_sum[i]) + loose_tol(out) * std::fabs(ref.out[i]);
      if (op == ReduceOp::Mean)
        bound =
            loose_tol(acc_of(in)) * std::sqrt(ref.sq_sum[i]) / ref.count[i] + loose_tol(out) * std::fabs(ref.out[i]);
      if (!is_floating(in)) bound = 0.0;  // integer sums are exact
    }
    bound *= slack;
    const bool ok = std::fabs(got[i] - ref.out[i]) <= bound;
    if (!ok && bad++ < 5)
      UNSCOPED_INFO(what << " [" << i << "] got " << got[i] << " expected " << ref.out[i] << " bound " << bound);
  }
  CHECK(bad == 0);
}

/// reduce(op, x, dims) on the GPU vs the reference and vs the CPU twin. xc and xg hold the same
/// values (xc on the CPU, xg on the GPU, same layout).
void check_reduce(ReduceOp op, const Tensor& xc, const Tensor& xg, const std::vector<int64_t>& dims,
                  bool keepdim = false) {
  const int64_t nd = xc.dim();
  const std::vector<bool> red = reduced_dims(nd, dims);
  Shape expect_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (!red[d]) expect_shape.push_back(xc.size(d));
    else if (keepdim) expect_shape.push_back(1);
  }
  INFO(kernels::op_name(op) << " of " << xc.shape_str() << " strides " << shape_str(xg.strides()) << " "
                            << dtype_name(xc.dtype()) << " over " << dims.size() << " dims (first "
                            << (dims.empty() ? -1 : dims[0]) << ")");
  const ReduceRef ref = reduce_ref(op, to_f64(xc), xc.sizes(), red);
  Tensor yg = kernels::reduce(op, xg, dims, keepdim);
  REQUIRE(yg.device() == kGpu);
  CHECK(yg.sizes() == expect_shape);
  const DType out_dt = is_floating(xc.dtype()) ? xc.dtype() : (op == ReduceOp::Sum ? DType::i64 : xc.dtype());
  CHECK(yg.dtype() == out_dt);
  const std::vector<double> got = to_f64(yg);
  check_against(got, ref, op, xc.dtype(), out_dt, 1.0, "cuda vs f64 reference:");
  Tensor yc = kernels::reduce(op, xc, dims, keepdim);
  const std::vector<double> cpu = to_f64(yc);
  REQUIRE(cpu.size() == got.size());
  ReduceRef cpu_ref = ref;
  cpu_ref.out = cpu;
  check_against(got, cpu_ref, op, xc.dtype(), out_dt, 2.0, "cuda vs cpu twin:");
}

/// argmax(x, dim) on the GPU vs the first-maximum reference and the CPU twin (exact).
void check_argmax(const Tensor& xc, const Tensor& xg, int64_t dim) {
  const std::vector<double> v = to_f64(xc);
  const int64_t nd = xc.dim();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
  for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
  const int64_t R = xc.size(dim);
  std::vector<double> expect;
  expect.reserve(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t r = 1; r < R; ++r)
        if (v[(o * R + r) * inner + i] > v[(o * R + best) * inner + i]) best = r;
      expect.push_back(static_cast<double>(best));
    }
  INFO("argmax of " << xc.shape_str() << " " << dtype_name(xc.dtype()) << " over dim " << dim);
  Tensor ag = kernels::argmax(xg, dim);
  CHECK(ag.dtype() == DType::i64);
  const std::vector<double> got = to_f64(ag);
  CHECK(got == expect);
  CHECK(got == to_f64(kernels::argmax(xc, dim)));
}

const std::vector<std::vector<int64_t>> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

}  // namespace

TEST_CASE("cuda reduce: every op and dim set of odd f32 tensors, all layouts", "[cuda][reduce]") {
  for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
    Tensor xc = random_tensor({5, 37, 9}, DType::f32, 101, -2.0, 3.0, layout);
    Tensor xg = random_tensor({5, 37, 9}, DType::f32, 101, -2.0, 3.0, layout, kGpu);
    for (ReduceOp op : kOps)
      for (const auto& dims : kDimSets)
        for (bool keepdim : {false, true}) check_reduce(op, xc, xg, dims, keepdim);
  }
}

TEST_CASE("cuda reduce: row lengths around the warp/block switch, f16/bf16/f64", "[cuda][reduce]") {
  // R = 1, 31, 1024 (warp per row), 1025, 5003 (block per row); inner == 1 and inner == 3.
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (int64_t R : {1, 31, 1024, 1025, 5003}) {
      const Shape s{7, R};
      Tensor xc = random_tensor(s, dt, 200 + R, -1.0, 1.0);
      Tensor xg = random_tensor(s, dt, 200 + R, -1.0, 1.0, Layout::Contiguous, kGpu);
      for (ReduceOp op : kOps) check_reduce(op, xc, xg, {1});
      const Shape s3{4, R, 3};
      Tensor yc = random_tensor(s3, dt, 300 + R, -1.0, 1.0, Layout::Strided);
      Tensor yg = random_tensor(s3, dt, 300 + R, -1.0, 1.0, Layout::Strided, kGpu);
      for (ReduceOp op : kOps) check_reduce(op, yc, yg, {1});
    }
  }
}

TEST_CASE("cuda reduce: unaligned rows take the scalar head of the vector loop", "[cuda][reduce]") {
  for (DType dt : {DType::f32, DType::f16, DType::f64}) {
    // Contiguous views with an offset: rows of 2003 elements starting at row 1, so every row
    // starts at a different position relative to a 16-byte boundary.
    Tensor base_c = random_tensor({9, 2003}, dt, 41, -1.0, 1.0);
    Tensor base_g = base_c.to(kGpu);
    Tensor vc = base_c.narrow(0, 1, 8);
    Tensor vg = base_g.narrow(0, 1, 8);
    for (ReduceOp op : kOps) check_reduce(op, vc, vg, {1});
    // Column slices (not contiguous): the front copies them first.
    Tensor sc = base_c.narrow(1, 3, 1990);
    Tensor sg = base_g.narrow(1, 3, 1990);
    for (ReduceOp op : kOps) check_reduce(op, sc, sg, {1});
    // A full reduction of a 1-D view starting 1, 3 or 7 elements in: the split row path with
    // every chunk misaligned the same way.
    Tensor flat_c = random_tensor({100003}, dt, 42, -1.0, 1.0);
    Tensor flat_g = flat_c.to(kGpu);
    for (int64_t start : {1, 3, 7}) {
      Tensor fc = flat_c.narrow(0, start, 100000 - start);
      Tensor fg = flat_g.narrow(0, start, 100000 - start);
      for (ReduceOp op : kOps) check_reduce(op, fc, fg, {});
    }
  }
}

TEST_CASE("cuda reduce: integer and boolean inputs are exact", "[cuda][reduce]") {
  // i32 sums widen to i64: 2e9 * 8 overflows an i32 accumulator.
  Tensor big = from_vector(std::vector<double>(8, 2.0e9), {2, 4}, {.dtype = DType::i32, .device = kGpu});
  Tensor s = kernels::reduce(ReduceOp::Sum, big);
  CHECK(s.dtype() == DType::i64);
  CHECK(to_f64(s) == std::vector<double>{1.6e10});
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    const double lo = dt == DType::u8 ? 0.0 : -100.0;
    Tensor xc = random_tensor({3, 1500, 4}, dt, 9, lo, 100.0, Layout::Strided);
    Tensor xg = random_tensor({3, 1500, 4}, dt, 9, lo, 100.0, Layout::Strided, kGpu);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (const auto& dims : kDimSets) check_reduce(op, xc, xg, dims);
  }
  Tensor b = from_vector({1, 0, 1, 1, 0, 0}, {2, 3}, {.dtype = DType::boolean, .device = kGpu});
  CHECK(to_f64(kernels::reduce(ReduceOp::Sum, b, {1})) == std::vector<double>{2, 1});
  CHECK(to_f64(kernels::reduce(ReduceOp::Max, b, {1})) == std::vector<double>{1, 1});
  CHECK(to_f64(kernels::reduce(ReduceOp::Min, b, {0})) == std::vector<double>{1, 0, 0});
}

TEST_CASE("cuda reduce: 2^24-element reductions use the split paths", "[cuda][reduce][slow]") {
  // Full sum of 4099 x 4097 (> 2^24): outer = 1, the two-pass row reduction.
  Tensor xc = random_tensor({4099, 4097}, DType::f32, 77, -1.0, 1.0);
  Tensor xg = xc.to(kGpu);
  for (ReduceOp op : kOps) check_reduce(op, xc, xg, {});
  // Over dim 0: 4097 columns (129 tiles), the two-pass column reduction.
  check_reduce(ReduceOp::Sum, xc, xg, {0});
  check_reduce(ReduceOp::Max, xc, xg, {0});
  // Over dim 1: 4099 long rows, one block each.
  check_reduce(ReduceOp::Mean, xc, xg, {1});
  // A middle dim with inner = 4: narrow columns, R split over gridDim.y.
  Tensor mc = random_tensor({2, (1 << 21) + 3, 4}, DType::f32, 78, -1.0, 1.0);
  Tensor mg = mc.to(kGpu);
  check_reduce(ReduceOp::Sum, mc, mg, {1});
  check_reduce(ReduceOp::Min, mc, mg, {1});
  // f16 input, f32 accumulation: the f16 sum of 2^24 terms would be useless, this one is not.
  Tensor hc = random_tensor({(1 << 24) + 5}, DType::f16, 79, -1.0, 1.0);
  Tensor hg = hc.to(kGpu);
  check_reduce(ReduceOp::Sum, hc, hg, {});
  check_reduce(ReduceOp::Mean, hc, hg, {});
  // Grid-stride loops: more short rows than 65536 blocks x 8 warps, more column tiles than 65536.
  Tensor rc = random_tensor({600001, 3}, DType::f32, 81, -1.0, 1.0);
  check_reduce(ReduceOp::Sum, rc, rc.to(kGpu), {1});
  Tensor cc = random_tensor({40000, 3, 64}, DType::f32, 82, -1.0, 1.0);
  check_reduce(ReduceOp::Max, cc, cc.to(kGpu), {1});
  check_reduce(ReduceOp::Mean, cc, cc.to(kGpu), {1});
  // Positive values: partial sums grow, so a badly split sum would show.
  Tensor pc = random_tensor({(1 << 24) + 1}, DType::f32, 80, 0.0, 1.0);
  check_reduce(ReduceOp::Sum, pc, pc.to(kGpu), {});
}

TEST_CASE("cuda argmax: first maximum on odd shapes, layouts and dtypes", "[cuda][reduce]") {
  Tensor t = from_vector<double>({1, 7, 7, 2, /**/ 9, 0, 9, 9, /**/ 3, NAN, 8, NAN}, {3, 4},
                                 {.dtype = DType::f32, .device = kGpu});
  CHECK(to_f64(kernels::argmax(t, 1)) == std::vector<double>{1, 0, 1});
  CHECK(kernels::argmax(t, -1, true).sizes() == Shape{3, 1});
  for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32}) {
      Tensor xc = random_tensor({6, 1031, 7}, dt, 31, -50.0, 50.0, layout);
      Tensor xg = random_tensor({6, 1031, 7}, dt, 31, -50.0, 50.0, layout, kGpu);
      for (int64_t dim = 0; dim < 3; ++dim) check_argmax(xc, xg, dim);
    }
  }
  // Many ties (integers in [0, 4)): the first index must win whatever the reduction order.
  Tensor tc = random_tensor({5, 3000}, DType::i64, 32, 0.0, 4.0);
  check_argmax(tc, tc.to(kGpu), 1);
  check_argmax(tc, tc.to(kGpu), 0);
}

TEST_CASE("cuda argmax: 2^24 elements along one dim (split path)", "[cuda][reduce][slow]") {
  Tensor xc = random_tensor({(1 << 24) + 7}, DType::f32, 90, -1.0, 1.0);
  check_argmax(xc, xc.to(kGpu), 0);
  Tensor yc = random_tensor({4099, 4097}, DType::bf16, 91, -1.0, 1.0);  // bf16: many ties at the max
  Tensor yg = yc.to(kGpu);
  check_argmax(yc, yg, 0);
  check_argmax(yc, yg, 1);
}
