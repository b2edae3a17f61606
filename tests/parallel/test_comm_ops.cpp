// parallel::broadcast_to, scatter and gather on repeated CPU devices: values, shapes, chunk sizes,
// aliasing, gradients against hand results and float64 finite differences, and the errors.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/comm_ops.h>
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/layout_copy_spy.h"
#include "support/reference.h"

using namespace ember;
using ember::parallel::broadcast_to;
using ember::parallel::chunk_sizes;
using ember::parallel::gather;
using ember::parallel::scatter;
using ember::testing::error_of;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

const Device kCpu = Device::cpu();
const std::vector<Device> kThree{kCpu, kCpu, kCpu};

// Row-major values [begin, end) of v.
std::vector<double> range_of(const std::vector<double>& v, size_t begin, size_t end) {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                             v.begin() + static_cast<std::ptrdiff_t>(end));
}

}  // namespace

TEST_CASE("chunk_sizes: as even as possible, first chunks larger, never empty", "[cpu][parallel][comm_ops]") {
  CHECK(chunk_sizes(10, 3) == std::vector<int64_t>{4, 3, 3});
  CHECK(chunk_sizes(9, 3) == std::vector<int64_t>{3, 3, 3});
  CHECK(chunk_sizes(11, 3) == std::vector<int64_t>{4, 4, 3});
  CHECK(chunk_sizes(2, 3) == std::vector<int64_t>{1, 1});
  CHECK(chunk_sizes(1, 4) == std::vector<int64_t>{1});
  CHECK(chunk_sizes(5, 1) == std::vector<int64_t>{5});
  CHECK_THAT(error_of([] { chunk_sizes(0, 3); }), Catch::Contains("0 rows over 3 parts"));
}

TEST_CASE("scatter: chunk shapes and values along dim 0 and dim 1", "[cpu][parallel][comm_ops]") {
  const Tensor t = random_tensor({10, 2}, DType::f32, 1);
  const std::vector<double> v = to_f64(t);
  const std::vector<Tensor> parts = scatter(t, kThree);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].sizes() == Shape{4, 2});
  CHECK(parts[1].sizes() == Shape{3, 2});
  CHECK(parts[2].sizes() == Shape{3, 2});
  CHECK(to_f64(parts[0]) == range_of(v, 0, 8));
  CHECK(to_f64(parts[1]) == range_of(v, 8, 14));
  CHECK(to_f64(parts[2]) == range_of(v, 14, 20));
  CHECK(static_cast<const float*>(parts[1].data_ptr()) ==
        static_cast<const float*>(t.data_ptr()) + 8);  // same device: a view

  const std::vector<Tensor> two = scatter(random_tensor({2, 5}, DType::f32, 2), kThree);
  REQUIRE(two.size() == 2);  // a batch smaller than the device count uses fewer devices
  CHECK(two[0].sizes() == Shape{1, 5});

  const std::vector<Tensor> cols = scatter(t.t(), {kCpu, kCpu}, 1);  // (2, 10) split along dim 1
  REQUIRE(cols.size() == 2);
  CHECK(cols[0].sizes() == Shape{2, 5});
  CHECK(to_f64(cols[1])[0] == v[10]);
}

TEST_CASE("broadcast_to: one copy per device, an alias on the tensor's own device", "[cpu][parallel][comm_ops]") {
  const Tensor t = random_tensor({3, 4}, DType::f32, 3);
  const std::vector<Tensor> outs = broadcast_to(t, kThree);
  REQUIRE(outs.size() == 3);
  for (const Tensor& o : outs) {
    CHECK(o.sizes() == t.sizes());
    CHECK(to_f64(o) == to_f64(t));
    CHECK(o.data_ptr() == t.data_ptr());
    CHECK_FALSE(o.is_same(t));
  }
}

TEST_CASE("gather: concatenates along dim 0 and dim 1", "[cpu][parallel][comm_ops]") {
  const Tensor a = random_tensor({2, 3}, DType::f32, 4), b = random_tensor({1, 3}, DType::f32, 5);
  const Tensor g = gather({a, b}, kCpu);
  CHECK(g.sizes() == Shape{3, 3});
  std::vector<double> want = to_f64(a);
  for (double x : to_f64(b)) want.push_back(x);
  CHECK(to_f64(g) == want);

  const Tensor c = random_tensor({2, 1}, DType::f32, 6);
  const Tensor h = gather({a, c}, kCpu, 1);
  CHECK(h.sizes() == Shape{2, 4});
  CHECK(to_f64(h)[3] == to_f64(c)[0]);
  CHECK(to_f64(h)[7] == to_f64(c)[1]);
}

TEST_CASE("comm ops: channels-last tensors keep their layout through scatter, its gradient and gather",
          "[cpu][parallel][comm_ops][memory_format]") {
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  Tensor x = random_tensor({4, 3, 5, 6}, DType::f32, 30).contiguous(kCL).requires_grad_();
  const Tensor c = random_tensor({2, 3, 5, 6}, DType::f32, 31).contiguous(kCL);
  ember::testing::LayoutCopySpy spy(DeviceType::CPU);
  const std::vector<Tensor> parts = scatter(x, {kCpu, kCpu});
  REQUIRE(parts.size() == 2);
  sum(parts[0] * c + parts[1] * c).backward();
  const Tensor g = gather(parts, kCpu);
  CHECK(spy.count() == 0);
  CHECK(x.grad().is_contiguous(kCL));
  CHECK(g.is_contiguous(kCL));
  CHECK(to_f64(g) == to_f64(x));
  const std::vector<double> cv = to_f64(c), gv = to_f64(x.grad());  // each half's gradient is c
  for (size_t i = 0; i < gv.size(); ++i) CHECK(gv[i] == cv[i % cv.size()]);
}

TEST_CASE("comm ops: gradients against hand results", "[cpu][parallel][comm_ops]") {
  SECTION("broadcast: the outputs' gradients are summed") {
    Tensor t = random_tensor({2, 3}, DType::f32, 7).requires_grad_();
    const std::vector<Tensor> o = broadcast_to(t, kThree);
    (sum(o[0]) + sum(o[1] * 2.0) + sum(o[2] * 3.0)).backward();
    CHECK(to_f64(t.grad()) == std::vector<double>(6, 6.0));
  }
  SECTION("broadcast: an output that gets no gradient adds nothing") {
    Tensor t = random_tensor({4}, DType::f32, 8).requires_grad_();
    const std::vector<Tensor> o = broadcast_to(t, kThree);
    sum(o[2] * 5.0).backward();
    CHECK(to_f64(t.grad()) == std::vector<double>(4, 5.0));
  }
  SECTION("scatter: the chunks' gradients are concatenated, unused chunks give zeros") {
    Tensor t = random_tensor({5, 2}, DType::f32, 9).requires_grad_();
    const std::vector<Tensor> p = scatter(t, kThree);  // rows {0, 1}, {2, 3}, {4}
    (sum(p[0]) + sum(p[2] * 3.0)).backward();
    CHECK(to_f64(t.grad()) == std::vector<double>{1, 1, 1, 1, 0, 0, 0, 0, 3, 3});
  }
  SECTION("gather: the gradient is split back to the parts") {
    Tensor a = random_tensor({1, 2}, DType::f32, 10).requires_grad_();
    Tensor b = random_tensor({2, 2}, DType::f32, 11).requires_grad_();
    const Tensor g = gather({a, b}, kCpu);
    const Tensor w = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
    sum(g * w).backward();
    CHECK(to_f64(a.grad()) == std::vector<double>{1, 2});
    CHECK(to_f64(b.grad()) == std::vector<double>{3, 4, 5, 6});
  }
  SECTION("gather: parts that do not require grad get none") {
    Tensor a = random_tensor({1, 2}, DType::f32, 12).requires_grad_();
    const Tensor b = random_tensor({2, 2}, DType::f32, 13);
    sum(gather({a, b}, kCpu)).backward();
    CHECK(to_f64(a.grad()) == std::vector<double>{1, 1});
    CHECK_FALSE(b.grad().defined());
  }
}

TEST_CASE("comm ops: float64 finite-difference gradient checks", "[cpu][parallel][comm_ops]") {
  using ember::testing::gradcheck;
  SECTION("scatter then gather, one chunk dropped and one scaled") {
    auto r = gradcheck(
        [](const std::vector<Tensor>& x) {
          const std::vector<Tensor> p = scatter(x[0], kThree);
          return gather({p[0] * p[0], p[2] * -2.0}, kCpu);
        },
        {random_tensor({7, 3}, DType::f64, 14)});
    INFO(r.message);
    CHECK(r.ok);
  }
  SECTION("broadcast, outputs combined") {
    auto r = gradcheck(
        [](const std::vector<Tensor>& x) {
          const std::vector<Tensor> b = broadcast_to(x[0], {kCpu, kCpu});
          return b[0] * b[1] + b[0];
        },
        {random_tensor({2, 3}, DType::f64, 15)});
    INFO(r.message);
    CHECK(r.ok);
  }
  SECTION("gather along dim 1 of a non-contiguous part") {
    auto r = gradcheck(
        [](const std::vector<Tensor>& x) {
          return gather({x[0], x[1]}, kCpu, 1) * 1.5;
        },
        {random_tensor({3, 2}, DType::f64, 16, -1, 1, ember::testing::Layout::Transposed),
         random_tensor({3, 4}, DType::f64, 17)});
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("comm ops: errors name shapes and devices", "[cpu][parallel][comm_ops]") {
  CHECK_THAT(error_of([] { scatter(Tensor(), kThree); }),
             Catch::Contains("undefined") && Catch::Contains("{cpu, cpu, cpu}"));
  CHECK_THAT(error_of([] { scatter(ones({}), kThree); }), Catch::Contains("0-d") && Catch::Contains("[]"));
  CHECK_THAT(error_of([] { scatter(ones({0, 3}), kThree); }), Catch::Contains("[0, 3]"));
  CHECK_THAT(error_of([] { broadcast_to(Tensor(), kThree); }), Catch::Contains("undefined"));
  CHECK_THAT(error_of([] {
               gather({ones({2, 3}), ones({2, 4})}, Device::cpu());
             }),
             Catch::Contains("[2, 4]") && Catch::Contains("[2, 3]"));
  CHECK_THAT(error_of([] { gather({ones({2}), ones({})}, Device::cpu()); }), Catch::Contains("part 1 is 0-d"));
  CHECK_THAT(error_of([] { gather({}, Device::cpu()); }), Catch::Contains("at least one"));
}
