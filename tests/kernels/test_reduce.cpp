// Reductions (kernels/reduce.h) on the CPU against float64 references computed here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <ember/kernels/reduce.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::ReduceOp;

namespace {

/// Checks reduce(op, x, dims, keepdim) against the reference. Sum/mean errors are bounded by
/// loose_tol_sum(dtype, R) times the sum of |x| of each output (plus one rounding of the result);
/// max/min must be exact.
void check_reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t nd = x.dim();
  const std::vector<bool> red = reduced_dims(nd, dims);
  int64_t R = 1;
  Shape kd;
  for (int64_t d = 0; d < nd; ++d) {
    if (red[d]) R *= x.size(d);
    if (!red[d]) kd.push_back(x.size(d));
    else if (keepdim) kd.push_back(1);
  }
  const ReduceRef ref = reduce_ref(op, to_f64(x), x.sizes(), red);
  Tensor y = kernels::reduce(op, x, dims, keepdim);
  INFO(kernels::op_name(op) << " of " << x.shape_str() << " strides " << shape_str(x.strides()) << " "
                            << dtype_name(x.dtype()) << " keepdim " << keepdim);
  CHECK(y.sizes() == kd);
  CHECK(y.is_contiguous());
  const DType dt = x.dtype();
  const DType expect_dt = is_floating(dt) ? dt : (op == ReduceOp::Sum ? DType::i64 : dt);
  CHECK(y.dtype() == expect_dt);
  const std::vector<double> got = to_f64(y);
  REQUIRE(got.size() == ref.out.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double bound = 0.0;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      const double scale = op == ReduceOp::Mean ? ref.abs_sum[i] / static_cast<double>(ref.count[i]) : ref.abs_sum[i];
      bound = loose_tol_sum(dt, R) * scale + loose_tol(dt) * std::fabs(ref.out[i]);
    }
    const bool ok = std::isnan(ref.out[i]) ? std::isnan(got[i]) : std::fabs(got[i] - ref.out[i]) <= bound;
    if (!ok && bad++ < 5)
      UNSCOPED_INFO("[" << i << "] got " << got[i] << " expected " << ref.out[i] << " bound " << bound);
  }
  CHECK(bad == 0);
}

const std::vector<std::vector<int64_t>> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {2, 0}, {0, 1, 2}};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

}  // namespace

TEST_CASE("reduce: every op over every dim set of an odd 3-D f32 tensor, all layouts", "[cpu][reduce]") {
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  for (Layout layout : layouts) {
    Tensor x = random_tensor({5, 7, 9}, DType::f32, 11, -2.0, 3.0, layout);
    for (ReduceOp op : kOps)
      for (const auto& dims : kDimSets)
        for (bool keepdim : {false, true}) check_reduce(op, x, dims, keepdim);
  }
}

TEST_CASE("reduce: f64, f16, bf16 inputs keep their dtype", "[cpu][reduce]") {
  for (DType dt : {DType::f64, DType::f16, DType::bf16}) {
    Tensor x = random_tensor({4, 33, 6}, dt, 5, -1.0, 1.0);
    for (ReduceOp op : kOps)
      for (const auto& dims : kDimSets) check_reduce(op, x, dims, false);
    check_reduce(ReduceOp::Sum, random_tensor({6, 31}, dt, 6, -1.0, 1.0, Layout::Transposed), {1}, true);
  }
}

TEST_CASE("reduce: integer and boolean inputs", "[cpu][reduce]") {
  // i32 sum widens to i64 (values chosen so an i32 accumulator would overflow).
  Tensor big = from_vector(std::vector<double>(8, 2.0e9), {2, 4}, {.dtype = DType::i32});
  CHECK(to_f64(kernels::reduce(ReduceOp::Sum, big)) == std::vector<double>{1.6e10});
  CHECK(kernels::reduce(ReduceOp::Sum, big).dtype() == DType::i64);
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor x = random_tensor({3, 5, 4}, dt, 9, -100.0, 100.0, Layout::Strided);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
      for (const auto& dims : kDimSets) check_reduce(op, x, dims, false);
  }
  Tensor b = from_vector({1, 0, 1, 1, 0, 0}, {2, 3}, {.dtype = DType::boolean});
  CHECK(to_f64(kernels::reduce(ReduceOp::Sum, b, {1})) == std::vector<double>{2, 1});
  CHECK(to_f64(kernels::reduce(ReduceOp::Max, b, {1})) == std::vector<double>{1, 1});
  CHECK(to_f64(kernels::reduce(ReduceOp::Min, b, {0})) == std::vector<double>{1, 0, 0});
  CHECK_THROWS_WITH(kernels::reduce(ReduceOp::Mean, random_tensor({3}, DType::i64, 1, 0, 9)),
                    Catch::Contains("mean") && Catch::Contains("i64"));
}

TEST_CASE("reduce: long f32 reductions stay accurate (double accumulation)", "[cpu][reduce]") {
  // 2^20 + 3 values in [0, 1): a serial f32 sum is off by ~1e-4 relative here; the CPU kernel
  // accumulates in double, so only the final rounding to f32 remains.
  const int64_t n = (1 << 20) + 3;
  Tensor x = random_tensor({n}, DType::f32, 21, 0.0, 1.0);
  const std::vector<double> v = to_f64(x);
  double s = 0.0;
  for (double e : v) s += e;
  check_close(kernels::reduce(ReduceOp::Sum, x), {s}, loose_tol(DType::f32));
  check_close(kernels::reduce(ReduceOp::Mean, x), {s / n}, loose_tol(DType::f32));
  // Few outputs with a long reduced dim (the split-over-R path), inner > 1.
  Tensor y = random_tensor({2, 50001, 3}, DType::f32, 22, -1.0, 1.0);
  check_reduce(ReduceOp::Sum, y, {1}, false);
  check_reduce(ReduceOp::Max, y, {1}, true);
  check_reduce(ReduceOp::Min, y, {0, 1}, false);
  check_reduce(ReduceOp::Mean, y, {}, false);
  // Many outputs, each reduced over a contiguous row.
  check_reduce(ReduceOp::Sum, random_tensor({301, 257}, DType::f32, 23), {1}, false);
}

TEST_CASE("argmax: first maximum, NaN wins, any layout", "[cpu][reduce]") {
  Tensor t = from_vector<double>({1, 7, 7, 2, /**/ 9, 0, 9, 9, /**/ 3, NAN, 8, NAN}, {3, 4}, {.dtype = DType::f32});
  Tensor a = kernels::argmax(t, 1);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.sizes() == Shape{3});
  CHECK(to_f64(a) == std::vector<double>{1, 0, 1});
  CHECK(kernels::argmax(t, -1, true).sizes() == Shape{3, 1});

  for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
    for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
      Tensor x = random_tensor({6, 5, 7}, dt, 31, -50.0, 50.0, layout);
      const std::vector<double> v = to_f64(x);
      for (int64_t dim = 0; dim < 3; ++dim) {
        Shape sz = x.sizes();
        std::vector<double> expect;
        // Reference: walk each output position's line along dim, keep the first maximum.
        const int64_t outer = dim == 0 ? 1 : (dim == 1 ? 6 : 30), R = sz[dim],
                      inner = dim == 2 ? 1 : (dim == 1 ? 7 : 35);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t best = 0;
            for (int64_t r = 1; r < R; ++r)
              if (v[(o * R + r) * inner + i] > v[(o * R + best) * inner + i]) best = r;
            expect.push_back(static_cast<double>(best));
          }
        INFO("dtype " << dtype_name(dt) << " dim " << dim);
        CHECK(to_f64(kernels::argmax(x, dim)) == expect);
      }
    }
  }
  CHECK_THROWS_WITH(kernels::argmax(empty({2, 0}), 1), Catch::Contains("empty"));
}
