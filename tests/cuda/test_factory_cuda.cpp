// Factories with a CUDA device in their options (kernels/factory.cpp): literals and host data are
// copied to the GPU with their values intact, the filling factories fill there, requires_grad
// marks a GPU leaf, and from_blob views device memory the caller owns without a copy.
#include <catch2/catch.hpp>

#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/device.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using ember::testing::round_to;
using ember::testing::to_f64;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("cuda factory: literals and host data land on the GPU with their values", "[cuda]") {
  const Tensor t = tensor({{1, 2, 3}, {4, 5, 6}}, {.device = kGpu});
  CHECK(t.device() == kGpu);
  CHECK(t.dtype() == DType::i64);
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(to_f64(t) == std::vector<double>{1, 2, 3, 4, 5, 6});

  // Converted on the way (the CPU's and the GPU's conversions are the same convert<D>).
  const Tensor h = from_vector(std::vector<double>{0.1, -2.7, 1e10}, {3}, {.dtype = DType::f16, .device = kGpu});
  CHECK(h.device() == kGpu);
  CHECK(to_f64(h) == std::vector<double>{round_to(DType::f16, 0.1), round_to(DType::f16, -2.7), INFINITY});
  const Tensor r = arange(5, {.dtype = DType::f32, .device = kGpu});
  CHECK(r.device() == kGpu);
  CHECK(to_f64(r) == std::vector<double>{0, 1, 2, 3, 4});
}

TEST_CASE("cuda factory: options on the filling factories", "[cuda]") {
  CHECK(to_f64(full({2, 2}, 2.5, {.dtype = DType::f64, .device = kGpu})) == std::vector<double>(4, 2.5));
  const Tensor z = zeros_like(ones({3}, {.device = kGpu}), {.dtype = DType::i32});
  CHECK(z.device() == kGpu);  // the device comes from the other tensor
  CHECK(z.dtype() == DType::i32);
  CHECK(to_f64(z) == std::vector<double>(3, 0.0));
  const Tensor n = randn({3, 2}, {.device = kGpu});
  CHECK(n.device() == kGpu);
  CHECK(n.dtype() == DType::f32);
  // The same generator state gives the same numbers on either device (Philox, section 5).
  Generator a(7), b(7);
  CHECK(to_f64(rand({33}, {.device = kGpu}, a)) == to_f64(rand({33}, {}, b)));
}

TEST_CASE("cuda factory: requires_grad makes a GPU leaf that gets its gradient", "[cuda]") {
  Tensor w = tensor({1.0f, -2.0f, 3.0f}, {.device = kGpu, .requires_grad = true});
  REQUIRE(w.requires_grad());
  REQUIRE(w.is_leaf());
  sum(w * w).backward();
  CHECK(w.grad().device() == kGpu);
  CHECK(to_f64(w.grad()) == std::vector<double>{2, -4, 6});
}

TEST_CASE("cuda factory: from_blob views device memory the caller owns", "[cuda]") {
  const Tensor owner = zeros({2, 3}, {.device = kGpu});  // stands in for memory from cudaMalloc
  Tensor view = from_blob(owner.data_ptr(), {3, 2}, {.device = kGpu}, {1, 3});  // its transpose
  CHECK(view.device() == kGpu);
  CHECK(view.data_ptr() == owner.data_ptr());
  view.copy_(tensor({{1.0f, 4.0f}, {2.0f, 5.0f}, {3.0f, 6.0f}}, {.device = kGpu}));
  CHECK(to_f64(owner) == std::vector<double>{1, 2, 3, 4, 5, 6});  // written through, transposed
}
