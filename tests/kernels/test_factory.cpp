// Factories: values checked element by element with the raw reader in support/reference.h.
#include <catch2/catch.hpp>

#include <cmath>

#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using ember::testing::to_f64;

namespace {
const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                            DType::i32, DType::i64, DType::u8,  DType::boolean};
}

TEST_CASE("factory: zeros, ones, full in every dtype", "[cpu]") {
  for (DType dt : kAllDTypes) {
    INFO("dtype " << dtype_name(dt));
    Tensor z = zeros({3, 5}, {.dtype = dt}), o = ones({7}, {.dtype = dt}), f = full({2, 1, 3}, 2.75, {.dtype = dt});
    CHECK(z.dtype() == dt);
    CHECK(z.sizes() == Shape{3, 5});
    CHECK(z.is_contiguous());
    CHECK(z.device() == Device::cpu());
    for (double v : to_f64(z)) CHECK(v == 0.0);
    for (double v : to_f64(o)) CHECK(v == 1.0);
    // 2.75 in each dtype: exact in floats, truncated for integers, true for bool.
    const double want = dt == DType::boolean ? 1.0 : is_floating(dt) ? 2.75 : 2.0;
    for (double v : to_f64(f)) CHECK(v == want);
  }
  Tensor s = scalar_tensor(-4.5, {.dtype = DType::f64});
  CHECK(s.dim() == 0);
  CHECK(to_f64(s) == std::vector<double>{-4.5});
  CHECK(zeros({0, 4}).numel() == 0);
}

TEST_CASE("factory: *_like copy shape, dtype and device", "[cpu]") {
  Tensor base = as_strided_raw(ones({4, 6}, {.dtype = DType::f64}), {6, 4}, {1, 6}, 0);  // non-contiguous
  Tensor z = zeros_like(base), o = ones_like(base);
  CHECK(z.sizes() == Shape{6, 4});
  CHECK(z.dtype() == DType::f64);
  CHECK(z.is_contiguous());
  for (double v : to_f64(z)) CHECK(v == 0.0);
  for (double v : to_f64(o)) CHECK(v == 1.0);
}

TEST_CASE("factory: arange", "[cpu]") {
  CHECK(to_f64(arange(0, 10, 3)) == std::vector<double>{0, 3, 6, 9});
  CHECK(to_f64(arange(5, 0, -2)) == std::vector<double>{5, 3, 1});
  Tensor a = arange(7);
  CHECK(a.dtype() == DType::i64);
  CHECK(to_f64(a) == std::vector<double>{0, 1, 2, 3, 4, 5, 6});
  CHECK(arange(3, 3).numel() == 0);

  // Fractional steps: element i is start + i * step rounded once to the dtype.
  Tensor f = arange(1.0, 2.0, 0.1, {.dtype = DType::f64});
  REQUIRE(f.numel() == 10);
  const auto fv = to_f64(f);
  for (int i = 0; i < 10; ++i) CHECK(fv[i] == 1.0 + i * 0.1);
  Tensor h = arange(-1.0, 1.0, 0.25, {.dtype = DType::f16});
  const auto hv = to_f64(h);
  REQUIRE(hv.size() == 8);
  for (int i = 0; i < 8; ++i) CHECK(hv[i] == -1.0 + 0.25 * i);

  // Integral dtypes are exact beyond float precision.
  const double big = 9007199254740992.0;  // 2^53
  Tensor bi = arange(big, big + 4, 1, {.dtype = DType::i64});
  const int64_t* p = bi.data<int64_t>();
  for (int i = 0; i < 4; ++i) CHECK(p[i] == (int64_t{1} << 53) + i);

  CHECK_THROWS_WITH(arange(0, 5, 0), Catch::Contains("step must be nonzero"));
  CHECK_THROWS_WITH(arange(0, 5, -1), Catch::Contains("wrong sign"));
}

TEST_CASE("factory: from_vector", "[cpu]") {
  Tensor f = from_vector(std::vector<float>{1.5f, -2, 3, 4, 5, 6}, {2, 3});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.sizes() == Shape{2, 3});
  CHECK(to_f64(f) == std::vector<double>{1.5, -2, 3, 4, 5, 6});
  CHECK(from_vector(std::vector<double>{0.1}, {1}).dtype() == DType::f64);
  CHECK(to_f64(from_vector(std::vector<double>{0.1}, {})) == std::vector<double>{0.1});
  Tensor i = from_vector(std::vector<int64_t>{(int64_t{1} << 60) + 1, -3}, {2});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.data<int64_t>()[0] == (int64_t{1} << 60) + 1);
  CHECK(from_vector(std::vector<int32_t>{7, 8, 9}, {3}).dtype() == DType::i32);
  CHECK_THROWS_WITH(from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                    Catch::Contains("3 values") && Catch::Contains("[2, 2]"));
}

TEST_CASE("factory: rand and randn shapes and dtypes", "[cpu]") {
  Generator gen(123);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor r = rand({3, 4}, {.dtype = dt}, gen);
    Tensor n = randn({5}, {.dtype = dt}, gen);
    CHECK(r.dtype() == dt);
    CHECK(r.sizes() == Shape{3, 4});
    CHECK(n.sizes() == Shape{5});
    for (double v : to_f64(r)) CHECK((v >= 0.0 && v < 1.0));
    for (double v : to_f64(n)) CHECK(std::isfinite(v));
  }
  CHECK_THROWS_WITH(rand({2}, {.dtype = DType::i32}), Catch::Contains("floating"));
}
