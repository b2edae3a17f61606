// Braced lists that mix kinds of literals ({1, -2, 0.5f}): they compile, and are promoted as Python's
// torch.tensor promotes a list (a double among them f64, else a float f32, else i64), in tensor()
// and from_vector(). Values are read back through to_vector, independently of the promotion code.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include <ember/kernels/factory.h>

using namespace ember;

TEST_CASE("mixed literals: integers with a float give f32, with a double f64", "[cpu]") {
  const Tensor a = tensor({1, -2, 0.5f});
  CHECK(a.dtype() == DType::f32);
  CHECK(a.sizes() == Shape{3});
  CHECK(a.to_vector<float>() == std::vector<float>{1.f, -2.f, 0.5f});

  const Tensor b = tensor({1, 2.5});
  CHECK(b.dtype() == DType::f64);
  CHECK(b.to_vector<double>() == std::vector<double>{1.0, 2.5});

  // A float and a double: f64, the float widened exactly (0.1f, not 0.1).
  const Tensor c = tensor({0.1f, 0.25});
  CHECK(c.dtype() == DType::f64);
  CHECK(c.to_vector<double>() == std::vector<double>{double(0.1f), 0.25});

  // f32 is the promoted type: a double-only value such as an int past 2^24 rounds to f32 as a
  // typed float list would round it.
  const Tensor r = tensor({16777217, 0.5f});
  CHECK(r.to_vector<float>() == std::vector<float>{16777216.f, 0.5f});
}

TEST_CASE("mixed literals: integer kinds and bools give i64, exactly", "[cpu]") {
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in a double
  const Tensor i = tensor({1, big, -7L});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, big, -7});
  const Tensor b = tensor({true, 3, false});
  CHECK(b.dtype() == DType::i64);
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 0});
  const Tensor f = tensor({true, 0.5f});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.to_vector<float>() == std::vector<float>{1.f, 0.5f});
}

TEST_CASE("mixed literals: nesting gives the shape, ragged rows are named", "[cpu]") {
  const Tensor m = tensor({{1, 2}, {3, 4.5}});
  CHECK(m.dtype() == DType::f64);
  CHECK(m.sizes() == Shape{2, 2});
  CHECK(m.to_vector<double>() == std::vector<double>{1, 2, 3, 4.5});
  const Tensor d3 = tensor({{{1, 2.f}}, {{3, 4}}});
  CHECK(d3.dtype() == DType::f32);
  CHECK(d3.sizes() == Shape{2, 1, 2});
  const Tensor d4 = tensor({{{{1, 0.5}}}});
  CHECK(d4.sizes() == Shape{1, 1, 1, 2});
  CHECK_THROWS_WITH(tensor({{1, 2.5}, {3}}), Catch::StartsWith("tensor: row 1 has 1 elements, expected 2"));
}

TEST_CASE("mixed literals: from_vector and options.dtype", "[cpu]") {
  const Tensor v = from_vector({1, 2.5}, {2});
  CHECK(v.dtype() == DType::f64);
  CHECK(v.to_vector<double>() == std::vector<double>{1.0, 2.5});
  const Tensor s = from_vector({1, 2, 0.5f, 4}, {2, 2});
  CHECK(s.dtype() == DType::f32);
  CHECK(s.sizes() == Shape{2, 2});
  CHECK_THROWS_WITH(from_vector({1, 2.5}, {3}), Catch::StartsWith("from_vector: 2 values do not fill shape"));
  // The named dtype wins, converted from the promoted values (2.9 truncates toward zero).
  const Tensor t = tensor({1, 2.9}, {.dtype = DType::i32});
  CHECK(t.dtype() == DType::i32);
  CHECK(t.to_vector<int32_t>() == std::vector<int32_t>{1, 2});
  // An empty braced list has no element type to deduce: f32, as torch.tensor([]).
  CHECK(from_vector({}, {0}).dtype() == DType::f32);
  // A list of one kind still takes the typed templates: integers alone stay i64.
  CHECK(tensor({1, 2}).dtype() == DType::i64);
  CHECK(from_vector({1.f, 2.f}, {2}).dtype() == DType::f32);
}
