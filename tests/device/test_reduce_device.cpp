// Reductions' special values and edge cases on every device (tests/support/device_test.h): NaN
// through max and min, -inf, empty ranges, 0-d inputs and bad dims. The fronts check the dims, so
// their errors read the same on both devices.
#include <cmath>
#include <vector>

#include <ember/kernels/factory.h>
#include <ember/kernels/reduce.h>
#include "support/device_test.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::ReduceOp;

DEVICE_TEST_CASE("reduce: NaN propagates through max and min, max of -inf", "[reduce]") {
  const Device dev = test_device();
  Tensor x = from_vector<double>({1, NAN, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f32, .device = dev});
  std::vector<double> mx = to_f64(kernels::reduce(ReduceOp::Max, x, {1}));
  CHECK(std::isnan(mx[0]));
  CHECK(mx[1] == 6);
  std::vector<double> mn = to_f64(kernels::reduce(ReduceOp::Min, x, {0}));
  CHECK(mn[0] == 1);
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 3);
  const Tensor ninf = from_vector<double>({-INFINITY, -INFINITY}, {2}, {.dtype = DType::f32, .device = dev});
  CHECK(to_f64(kernels::reduce(ReduceOp::Max, ninf)) == std::vector<double>{-INFINITY});
}

DEVICE_TEST_CASE("reduce: empty ranges, 0-d inputs and bad dims", "[reduce]") {
  const Device dev = test_device();
  Tensor e = empty({3, 0}, {.dtype = DType::f32, .device = dev});
  CHECK(to_f64(kernels::reduce(ReduceOp::Sum, e, {1})) == std::vector<double>{0, 0, 0});
  for (double m : to_f64(kernels::reduce(ReduceOp::Mean, e, {1}))) CHECK(std::isnan(m));
  CHECK(kernels::reduce(ReduceOp::Sum, e, {0}).sizes() == Shape{0});
  CHECK_THROWS_WITH(kernels::reduce(ReduceOp::Max, e, {1}), Catch::Contains("empty") && Catch::Contains("[3, 0]"));
  Tensor e3 = empty({2, 0, 5}, {.dtype = DType::f32, .device = dev});
  CHECK(to_f64(kernels::reduce(ReduceOp::Sum, e3, {1})) == std::vector<double>(10, 0.0));

  Tensor s = from_vector({2.5}, {}, {.dtype = DType::f32, .device = dev});
  Tensor r = kernels::reduce(ReduceOp::Sum, s);
  CHECK(r.dim() == 0);
  CHECK(to_f64(r) == std::vector<double>{2.5});
  CHECK(to_f64(kernels::reduce(ReduceOp::Max, s, {0})) == std::vector<double>{2.5});

  Tensor x = random_tensor({2, 3}, DType::f32, 1, -1.0, 1.0, Layout::Contiguous, dev);
  CHECK_THROWS_WITH(kernels::reduce(ReduceOp::Sum, x, {1, -1}), Catch::Contains("more than once"));
  CHECK_THROWS(kernels::reduce(ReduceOp::Sum, x, {2}));
}
