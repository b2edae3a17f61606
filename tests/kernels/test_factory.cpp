// Factories: values checked element by element with the raw reader in support/reference.h; the
// options every factory takes; literals (tensor, from_vector) and user-owned memory (from_blob).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using ember::testing::round_to;
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

namespace {
// Checks that `make(options)` honours dtype and requires_grad, and refuses grad for an integer dtype.
void check_options(const std::string& name, const std::function<Tensor(const TensorOptions&)>& make) {
  INFO(name);
  const Tensor f16 = make({.dtype = DType::f16});
  CHECK(f16.dtype() == DType::f16);
  CHECK(f16.device() == Device::cpu());
  CHECK_FALSE(f16.requires_grad());
  const Tensor g = make({.dtype = DType::f32, .device = Device::cpu(), .requires_grad = true});
  CHECK(g.dtype() == DType::f32);
  CHECK(g.requires_grad());
  CHECK(g.is_leaf());
  CHECK(g.grad_fn() == nullptr);
  CHECK_THROWS_WITH(make({.dtype = DType::i64, .requires_grad = true}), Catch::Contains("floating"));
}
}  // namespace

TEST_CASE("factory: every factory takes TensorOptions", "[cpu]") {
  check_options("empty", [](const TensorOptions& o) { return empty({2, 3}, o); });
  check_options("zeros", [](const TensorOptions& o) { return zeros({2, 3}, o); });
  check_options("ones", [](const TensorOptions& o) { return ones({2, 3}, o); });
  check_options("full", [](const TensorOptions& o) { return full({2, 3}, 1.5, o); });
  check_options("rand", [](const TensorOptions& o) { return rand({2, 3}, o); });
  check_options("randn", [](const TensorOptions& o) { return randn({2, 3}, o); });
  check_options("arange", [](const TensorOptions& o) { return arange(0.0, 3.0, 0.5, o); });
  check_options("arange(end)", [](const TensorOptions& o) { return arange(4, o); });
  check_options("scalar_tensor", [](const TensorOptions& o) { return scalar_tensor(2.0, o); });
  const Tensor like = ones({2, 3}, {.dtype = DType::f64});
  check_options("empty_like", [&](const TensorOptions& o) { return empty_like(like, o); });
  check_options("zeros_like", [&](const TensorOptions& o) { return zeros_like(like, o); });
  check_options("ones_like", [&](const TensorOptions& o) { return ones_like(like, o); });
  std::vector<float> host(6, 0.5f);
  check_options("from_vector", [&](const TensorOptions& o) { return from_vector(host, {2, 3}, o); });
  check_options("from_vector(list)", [](const TensorOptions& o) { return from_vector({1.0, 2.0}, {2}, o); });
  check_options("tensor", [](const TensorOptions& o) { return tensor({{1.0, 2.0}, {3.0, 4.0}}, o); });
  check_options("from_blob", [&](const TensorOptions& o) { return from_blob(host.data(), {3}, o); });
}

TEST_CASE("factory: unset options take each factory's default", "[cpu]") {
  CHECK(empty({2}).dtype() == DType::f32);
  CHECK(zeros({2}).device() == Device::cpu());
  CHECK_FALSE(randn({2}).requires_grad());
  CHECK(arange(0.0, 2.0).dtype() == DType::f32);
  CHECK(arange(4).dtype() == DType::i64);
  CHECK(arange(4, {.dtype = DType::f64}).dtype() == DType::f64);
  CHECK(to_f64(arange(4, {.dtype = DType::f64})) == std::vector<double>{0, 1, 2, 3});
  // *_like: the other tensor's dtype and device unless set; the shape always.
  const Tensor like = full({3, 1}, 2.0, {.dtype = DType::f64});
  const Tensor z = zeros_like(like, {.dtype = DType::i32});
  CHECK(z.dtype() == DType::i32);
  CHECK(z.sizes() == Shape{3, 1});
  CHECK(ones_like(like).dtype() == DType::f64);
  CHECK(like.options().dtype == DType::f64);
  CHECK(like.options().device == Device::cpu());
  CHECK_FALSE(like.options().requires_grad);
  const TensorOptions none{};
  CHECK(none.dtype_or(DType::u8) == DType::u8);
  CHECK(none.device_or(Device::cuda(1)) == Device::cuda(1));
}

TEST_CASE("factory: requires_grad in the options makes a leaf that gets a gradient", "[cpu]") {
  Tensor w = full({3}, 2.0, {.dtype = DType::f64, .requires_grad = true});
  Tensor x = tensor({1.0, -2.0, 4.0}, {.requires_grad = true});
  Tensor y = w * x;
  y.backward(ones({3}, {.dtype = DType::f64}));
  CHECK(to_f64(w.grad()) == std::vector<double>{1.0, -2.0, 4.0});
  CHECK(to_f64(x.grad()) == std::vector<double>{2.0, 2.0, 2.0});
}

TEST_CASE("factory: tensor() literals take their shape from the nesting", "[cpu]") {
  const Tensor f = tensor({0.1f, 0.2f, 0.3f});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.sizes() == Shape{3});
  CHECK(to_f64(f) == std::vector<double>{0.1f, 0.2f, 0.3f});

  const Tensor i = tensor({{1, 2}, {3, 4}});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.sizes() == Shape{2, 2});
  CHECK(to_f64(i) == std::vector<double>{1, 2, 3, 4});

  const Tensor d = tensor({{{1.5, 2.0}, {3.0, 4.0}, {5.0, 6.0}}, {{7.0, 8.0}, {9.0, 10.0}, {11.0, 12.0}}});
  CHECK(d.dtype() == DType::f64);
  CHECK(d.sizes() == Shape{2, 3, 2});
  CHECK(to_f64(d.slice(0, 1, 2).slice(1, 2, 3)) == std::vector<double>{11.0, 12.0});

  const Tensor n4 = tensor({{{{1}, {2}}}, {{{3}, {4}}}});
  CHECK(n4.sizes() == Shape{2, 1, 2, 1});
  CHECK(to_f64(n4) == std::vector<double>{1, 2, 3, 4});

  const Tensor b = tensor({true, false, true});
  CHECK(b.dtype() == DType::boolean);
  CHECK(to_f64(b) == std::vector<double>{1, 0, 1});
  CHECK(tensor({Half(1.5f), Half(-2.0f)}).dtype() == DType::f16);
  CHECK(tensor({BFloat16(1.5f)}).dtype() == DType::bf16);

  // Integers stay exact beyond double precision (stored as i64, never through double).
  const int64_t big = (int64_t{1} << 60) + 1;
  CHECK(tensor({big, -big}).to_vector<int64_t>() == std::vector<int64_t>{big, -big});
  static_assert(literal_dtype<int>() == DType::i64 && literal_dtype<long long>() == DType::i64);
  static_assert(literal_dtype<uint8_t>() == DType::i64 && literal_dtype<bool>() == DType::boolean);
  static_assert(literal_dtype<float>() == DType::f32 && literal_dtype<double>() == DType::f64);
}

TEST_CASE("factory: tensor() converts to the dtype the options name", "[cpu]") {
  const Tensor f = tensor({{1, 2}, {3, -4}}, {.dtype = DType::f32});
  CHECK(f.dtype() == DType::f32);
  CHECK(to_f64(f) == std::vector<double>{1, 2, 3, -4});
  // Rounded once from the literal's type, as a store into the dtype rounds.
  const Tensor h = tensor({0.1, 1e-3, 70000.0}, {.dtype = DType::f16});
  CHECK(to_f64(h) == std::vector<double>{round_to(DType::f16, 0.1), round_to(DType::f16, 1e-3), INFINITY});
  const Tensor t = tensor({2.9, -2.9, 0.0}, {.dtype = DType::i32});  // truncated toward zero
  CHECK(to_f64(t) == std::vector<double>{2, -2, 0});
  CHECK(to_f64(tensor({0.0, -3.0}, {.dtype = DType::boolean})) == std::vector<double>{0, 1});
}

TEST_CASE("factory: ragged literals are an error naming the row", "[cpu]") {
  CHECK_THROWS_WITH(tensor({{1, 2}, {3, 4, 5}}), Catch::StartsWith("tensor: row 1 has 3 elements, expected 2"));
  CHECK_THROWS_WITH(tensor({{1.0f}, {2.0f}, {}}), Catch::StartsWith("tensor: row 2 has 0 elements, expected 1"));
  CHECK_THROWS_WITH(tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7}}}),
                    Catch::StartsWith("tensor: row [1][1] has 1 elements, expected 2"));
  CHECK_THROWS_WITH(tensor({{{1}, {2}}, {{3}}}), Catch::StartsWith("tensor: row 1 has 1 elements, expected 2"));
}

TEST_CASE("factory: from_vector keeps the element type of a vector or span", "[cpu]") {
  const Tensor f = from_vector(std::vector<float>{1.5f, -2, 3, 4, 5, 6}, {2, 3});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.sizes() == Shape{2, 3});
  CHECK(to_f64(f) == std::vector<double>{1.5, -2, 3, 4, 5, 6});
  CHECK(from_vector(std::vector<double>{0.1}, {1}).dtype() == DType::f64);
  CHECK(to_f64(from_vector(std::vector<double>{0.1}, {})) == std::vector<double>{0.1});
  const Tensor i = from_vector(std::vector<int64_t>{(int64_t{1} << 60) + 1, -3}, {2});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.data<int64_t>()[0] == (int64_t{1} << 60) + 1);
  CHECK(from_vector(std::vector<int32_t>{7, 8, 9}, {3}).dtype() == DType::i32);
  CHECK(from_vector(std::vector<uint8_t>{0, 255}, {2}).dtype() == DType::u8);
  const Tensor b = from_vector(std::vector<bool>{true, false, false, true}, {2, 2});
  CHECK(b.dtype() == DType::boolean);
  CHECK(to_f64(b) == std::vector<double>{1, 0, 0, 1});
  CHECK(from_vector(std::vector<Half>{Half(0.5f)}, {1}).dtype() == DType::f16);
  CHECK(from_vector(std::vector<BFloat16>{BFloat16(0.5f)}, {1}).dtype() == DType::bf16);

  // Spans, const or not, of any extent; the tensor holds a copy.
  std::array<int32_t, 4> arr{4, 3, 2, 1};
  const Tensor s = from_vector(std::span<int32_t, 4>(arr), {4});
  const Tensor cs = from_vector(std::span<const int32_t>(arr.data(), 2), {2});
  arr[0] = 100;
  CHECK(s.dtype() == DType::i32);
  CHECK(to_f64(s) == std::vector<double>{4, 3, 2, 1});
  CHECK(to_f64(cs) == std::vector<double>{4, 3});

  CHECK_THROWS_WITH(from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                    Catch::Contains("3 values") && Catch::Contains("[2, 2]"));
  CHECK_THROWS_WITH(from_vector({1.0, 2.0}, {3}), Catch::Contains("2 values"));
}

TEST_CASE("factory: from_vector of a braced list follows the literal rule", "[cpu]") {
  const Tensor f = from_vector({0.1f, 0.2f, 0.3f}, {3});
  CHECK(f.dtype() == DType::f32);
  CHECK(to_f64(f) == std::vector<double>{0.1f, 0.2f, 0.3f});
  CHECK(from_vector({1, 2, 3, 4}, {2, 2}).dtype() == DType::i64);
  CHECK(from_vector({0.5, 1.0}, {2}).dtype() == DType::f64);
  CHECK(from_vector({true, false}, {2}).dtype() == DType::boolean);
  const Tensor mixed = from_vector<double>({1, 2.5, -3}, {3});
  CHECK(mixed.dtype() == DType::f64);
  CHECK(to_f64(mixed) == std::vector<double>{1, 2.5, -3});
}

TEST_CASE("factory: from_vector converts to the dtype the options name", "[cpu]") {
  const std::vector<double> v{0.1, 1e10, -2.7, 65520.0, 0.0};
  const struct {
    DType dt;
    std::vector<double> want;
  } cases[] = {
      {DType::f32, {double(0.1f), 1e10, double(-2.7f), 65520.0, 0.0}},
      {DType::f16, {round_to(DType::f16, 0.1), INFINITY, round_to(DType::f16, -2.7), INFINITY, 0.0}},
      {DType::bf16,
       {round_to(DType::bf16, 0.1), round_to(DType::bf16, 1e10), round_to(DType::bf16, -2.7),
        round_to(DType::bf16, 65520.0), 0.0}},
      {DType::i64, {0, 1e10, -2, 65520, 0}},
      {DType::boolean, {1, 1, 1, 1, 0}},
  };
  for (const auto& c : cases) {
    INFO("to " << dtype_name(c.dt));
    const Tensor t = from_vector(v, {5}, {.dtype = c.dt});
    CHECK(t.dtype() == c.dt);
    CHECK(to_f64(t) == c.want);
  }
  // Integer sources keep their exact values in i64 and convert like Tensor::to into floats.
  const Tensor i = from_vector(std::vector<int32_t>{-7, 1 << 30}, {2}, {.dtype = DType::i64});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{-7, 1 << 30});
  const Tensor u = from_vector({300, -1}, {2}, {.dtype = DType::u8});  // i64 -> u8 wraps
  CHECK(to_f64(u) == std::vector<double>{44, 255});
}

TEST_CASE("factory: from_blob wraps the caller's memory without copying", "[cpu]") {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(buf.data(), {2, 3});
  CHECK(t.dtype() == DType::f32);
  CHECK(t.data_ptr() == buf.data());
  CHECK(t.storage().nbytes() == 6 * sizeof(float));
  buf[4] = 50;  // the caller's writes show in the tensor
  CHECK(to_f64(t) == std::vector<double>{1, 2, 3, 4, 50, 6});
  t.slice(1, 0, 1).fill_(-1.0);  // the tensor's (and its views') writes reach the caller's buffer
  CHECK(buf == std::vector<float>{-1, 2, 3, -1, 50, 6});
  kernels::copy(t, zeros({2, 3}));
  CHECK(buf == std::vector<float>(6, 0.0f));

  // Strides in elements: the transpose of a row-major 2x3 buffer.
  std::vector<int64_t> ib{1, 2, 3, 4, 5, 6};
  const Tensor tt = from_blob(ib.data(), {3, 2}, {.dtype = DType::i64}, {1, 3});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(to_f64(tt) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(tt.storage().nbytes() == 6 * sizeof(int64_t));

  // The tensor never frees the memory: the buffer outlives it and stays usable.
  { const Tensor scratch = from_blob(buf.data(), {6}); }
  buf[0] = 7;
  CHECK(buf[0] == 7);

  // An empty shape needs no memory; a 0-d tensor reads one element.
  CHECK(from_blob(nullptr, {0, 3}).numel() == 0);
  double one = 3.25;
  CHECK(to_f64(from_blob(&one, {}, {.dtype = DType::f64})) == std::vector<double>{3.25});
}

TEST_CASE("factory: from_blob checks what it can", "[cpu]") {
  alignas(8) unsigned char bytes[32] = {};
  CHECK_THROWS_WITH(from_blob(bytes + 1, {2}), Catch::Contains("aligned") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(from_blob(nullptr, {2}), Catch::Contains("null"));
  CHECK_THROWS_WITH(from_blob(bytes, {2, 2}, {}, {1}), Catch::Contains("1 strides") && Catch::Contains("[2, 2]"));
  CHECK_THROWS_WITH(from_blob(bytes, {2, -1}), Catch::Contains("negative"));
  CHECK_NOTHROW(from_blob(bytes + 1, {4}, {.dtype = DType::u8}));
}
