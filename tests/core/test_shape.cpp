// Shape helpers: numel, row-major strides, printing, dim wrapping and broadcasting.
#include <catch2/catch.hpp>

#include <string>

#include <ember/core/error.h>
#include <ember/core/shape.h>

using ember::Shape;

TEST_CASE("numel_of multiplies the sizes", "[cpu]") {
  CHECK(ember::numel_of({}) == 1);
  CHECK(ember::numel_of({7}) == 7);
  CHECK(ember::numel_of({3, 5, 7}) == 105);
  CHECK(ember::numel_of({3, 0, 7}) == 0);
  CHECK(ember::numel_of({1 << 20, 1 << 20, 4}) == (int64_t(1) << 42));  // needs 64 bits
}

TEST_CASE("contiguous_strides are row-major", "[cpu]") {
  CHECK(ember::contiguous_strides({}) == Shape{});
  CHECK(ember::contiguous_strides({5}) == Shape{1});
  CHECK(ember::contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  CHECK(ember::contiguous_strides({3, 1, 5}) == Shape{5, 5, 1});
  // A zero-size dim must not zero out the strides of the dims before it.
  CHECK(ember::contiguous_strides({2, 0, 3}) == Shape{3, 3, 1});
}

TEST_CASE("shape_str prints brackets and commas", "[cpu]") {
  CHECK(ember::shape_str({}) == "[]");
  CHECK(ember::shape_str({4}) == "[4]");
  CHECK(ember::shape_str({2, 3, 5}) == "[2, 3, 5]");
}

TEST_CASE("wrap_dim normalizes negative dims and rejects out-of-range ones", "[cpu]") {
  CHECK(ember::wrap_dim(0, 3) == 0);
  CHECK(ember::wrap_dim(2, 3) == 2);
  CHECK(ember::wrap_dim(-1, 3) == 2);
  CHECK(ember::wrap_dim(-3, 3) == 0);
  // A 0-d tensor accepts dim 0 and -1 (as PyTorch does).
  CHECK(ember::wrap_dim(0, 0) == 0);
  CHECK(ember::wrap_dim(-1, 0) == 0);
  CHECK_THROWS_AS(ember::wrap_dim(3, 3), ember::Error);
  CHECK_THROWS_AS(ember::wrap_dim(-4, 3), ember::Error);
  CHECK_THROWS_AS(ember::wrap_dim(1, 0), ember::Error);
  try {
    ember::wrap_dim(5, 2, "softmax dim");
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("softmax dim 5") != std::string::npos);
    CHECK(msg.find("2-d") != std::string::npos);
    CHECK(msg.find("-2..1") != std::string::npos);
  }
}

TEST_CASE("broadcast_shapes follows NumPy rules", "[cpu]") {
  CHECK(ember::broadcast_shapes({3, 1, 5}, {4, 1}) == Shape{3, 4, 5});
  CHECK(ember::broadcast_shapes({}, {2, 3}) == Shape{2, 3});
  CHECK(ember::broadcast_shapes({2, 3}, {}) == Shape{2, 3});
  CHECK(ember::broadcast_shapes({1}, {0}) == Shape{0});
  CHECK(ember::broadcast_shapes({7, 1, 1}, {1, 6, 1}) == Shape{7, 6, 1});
  CHECK(ember::broadcast_shapes({2, 3}, {2, 3}) == Shape{2, 3});
  try {
    ember::broadcast_shapes({2, 3}, {4, 3});
    FAIL("no exception");
  } catch (const ember::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("[2, 3]") != std::string::npos);
    CHECK(msg.find("[4, 3]") != std::string::npos);
  }
}
