// Tensor views and copies (autograd/tensor_methods.cpp): geometry, storage sharing, errors, and
// gradients through every view, checked by float64 finite differences on non-contiguous inputs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/kernels/factory.h>
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::error_of;
using ember::testing::gradcheck;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

std::vector<double> iota(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return v;
}

#define GRADCHECK EMBER_CHECK_GRADIENTS

}  // namespace

TEST_CASE("view and reshape: geometry, sharing, -1, and incompatible strides", "[cpu][autograd]") {
  Tensor x = from_vector(iota(24), {2, 3, 4}, {.dtype = DType::f32});
  Tensor v = x.view({6, -1});
  CHECK(v.sizes() == Shape{6, 4});
  CHECK(v.storage().is_same(x.storage()));
  check_close(v, iota(24), 0.0);
  Tensor t = x.transpose(1, 2);  // (2, 4, 3), not viewable as (2, 12)
  std::string msg = error_of([&] { (void)t.view({2, 12}); });
  CHECK(msg.find("reshape") != std::string::npos);
  CHECK(msg.find("[2, 12]") != std::string::npos);
  // ...but splitting the size-4 dim is: the transposed dims stay intact.
  Tensor t83 = t.view({2, 2, 2, 3});
  CHECK(t83.storage().is_same(x.storage()));
  CHECK(t83.strides() == Shape{12, 2, 1, 4});
  Tensor r = t.reshape({2, 12});  // copies
  CHECK(!r.storage().is_same(x.storage()));
  std::vector<double> expect;
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c)
      for (int b = 0; b < 3; ++b) expect.push_back(a * 12 + b * 4 + c);
  check_close(r, expect, 0.0);
  check_close(t83, expect, 0.0);
  CHECK(error_of([&] { (void)x.view({5, -1}); }).find("24") != std::string::npos);
  CHECK(error_of([&] { (void)x.view({-1, -1}); }).find("-1") != std::string::npos);
  // 0-d and size-1 shapes
  Tensor s = from_vector({7.0}, {}, {.dtype = DType::f32});
  CHECK(s.view({1, 1}).sizes() == Shape{1, 1});
  CHECK(s.reshape({-1}).sizes() == Shape{1});
  CHECK(x.view({1, 24, 1}).strides()[1] == 1);
}

TEST_CASE("permute, transpose, t, squeeze, unsqueeze, flatten geometry", "[cpu][autograd]") {
  Tensor x = from_vector(iota(24), {2, 3, 4}, {.dtype = DType::f32});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(error_of([&] { (void)x.permute({0, 0, 1}); }).find("repeated") != std::string::npos);
  CHECK(x.transpose(0, -1).sizes() == Shape{4, 3, 2});
  Tensor m = from_vector(iota(6), {2, 3}, {.dtype = DType::f32});
  check_close(m.t(), {0, 3, 1, 4, 2, 5}, 0.0);
  Tensor u = x.unsqueeze(1);
  CHECK(u.sizes() == Shape{2, 1, 3, 4});
  CHECK(x.unsqueeze(-1).sizes() == Shape{2, 3, 4, 1});
  CHECK(u.squeeze().sizes() == Shape{2, 3, 4});
  CHECK(u.squeeze(1).sizes() == Shape{2, 3, 4});
  CHECK(u.squeeze(0).sizes() == Shape{2, 1, 3, 4});  // not size 1: unchanged
  CHECK(x.flatten().sizes() == Shape{24});
  CHECK(x.flatten(1).sizes() == Shape{2, 12});
  CHECK(x.flatten(0, 1).sizes() == Shape{6, 4});
  check_close(
      x.permute({2, 0, 1}).flatten(),
      [] {
        std::vector<double> e;
        for (int c = 0; c < 4; ++c)
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 3; ++b) e.push_back(a * 12 + b * 4 + c);
        return e;
      }(),
      0.0);
}

TEST_CASE("slice, narrow and expand geometry", "[cpu][autograd]") {
  Tensor x = from_vector(iota(20), {4, 5}, {.dtype = DType::f32});
  check_close(x.slice(1, 1, 5, 2), {1, 3, 6, 8, 11, 13, 16, 18}, 0.0);
  check_close(x.slice(0, -2, 100), {10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 0.0);
  CHECK(x.slice(1, 3, 2).sizes() == Shape{4, 0});
  check_close(x.narrow(0, 1, 2), {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 0.0);
  CHECK(error_of([&] { (void)x.narrow(1, 3, 4); }).find("out of bounds") != std::string::npos);
  Tensor c = from_vector({1, 2, 3}, {3, 1}, {.dtype = DType::f32});
  Tensor e = c.expand({2, 3, 4});
  CHECK(e.sizes() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(c.expand({-1, 2}).sizes() == Shape{3, 2});
  CHECK(error_of([&] { (void)c.expand({2, 4}); }).find("[3, 1]") != std::string::npos);
}

TEST_CASE("contiguous, clone, to(dtype) and copy_ behave like copies", "[cpu][autograd]") {
  Tensor x = from_vector(iota(6), {2, 3}, {.dtype = DType::f32});
  CHECK(x.contiguous().is_same(x));
  Tensor tc = x.t().contiguous();
  CHECK(tc.is_contiguous());
  check_close(tc, {0, 3, 1, 4, 2, 5}, 0.0);
  Tensor c = x.clone();
  CHECK(!c.storage().is_same(x.storage()));
  CHECK(x.to(DType::f32).is_same(x));
  CHECK(x.to(Device::cpu()).is_same(x));
  Tensor d = x.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  check_close(d, iota(6), 0.0);
  Tensor z = zeros({2, 3}, {.dtype = DType::f64});
  z.slice(1, 0, 3, 2).copy_(from_vector({9, 8}, {2, 1}, {.dtype = DType::f32}));  // broadcast + cast into a view
  check_close(z, {9, 0, 9, 8, 0, 8}, 0.0);
  z.fill_(2.5);
  check_close(z, std::vector<double>(6, 2.5), 0.0);
  z.zero_();
  check_close(z, std::vector<double>(6, 0.0), 0.0);
}

TEST_CASE("gradients flow through views to the base", "[cpu][autograd]") {
  Tensor x = from_vector(iota(12), {3, 4}, {.dtype = DType::f64});
  x.requires_grad_();
  // Slice, permute and expand: y = sum(x[:, 1:3].t().unsqueeze(0).expand(2, 2, 3)) -> 2 at the slice.
  Tensor y = sum(x.slice(1, 1, 3).t().unsqueeze(0).expand({2, 2, 3}));
  y.backward();
  check_close(x.grad(), {0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0}, 0.0);
  // reshape of a non-contiguous view (copy path) keeps the graph.
  Tensor x2 = from_vector(iota(6), {2, 3}, {.dtype = DType::f64});
  x2.requires_grad_();
  Tensor r = x2.t().reshape({6});
  sum(r * from_vector(iota(6), {6}, {.dtype = DType::f64})).backward();
  // r[k] = x2.t() flattened: r = [x00, x10, x01, x11, x02, x12]; grad of x2[i][j] = k where r[k] = x2[i][j].
  check_close(x2.grad(), {0, 2, 4, 1, 3, 5}, 0.0);
  // Casts: f64 leaf -> f32 -> back keeps the graph and gradients come back in the leaf's dtype.
  Tensor x3 = from_vector({1.0, 2.0}, {2}, {.dtype = DType::f64});
  x3.requires_grad_();
  sum(x3.to(DType::f32) * 3.0).backward();
  CHECK(x3.grad().dtype() == DType::f64);
  check_close(x3.grad(), {3.0, 3.0}, 0.0);
}

TEST_CASE("gradcheck: every view and copy op, on non-contiguous inputs", "[cpu][autograd]") {
  using TL = std::vector<Tensor>;
  const Tensor a = random_tensor({3, 4, 5}, DType::f64, 11, -1, 1, Layout::Transposed);
  const Tensor b = random_tensor({4, 6}, DType::f64, 12, -1, 1, Layout::Strided);
  GRADCHECK([](const TL& x) { return x[0].reshape({-1, 4}); }, {a});
  GRADCHECK([](const TL& x) { return x[0].contiguous().view({12, 5}); }, {a});
  GRADCHECK([](const TL& x) { return x[0].permute({2, 0, 1}) * 1.0; }, {a});
  GRADCHECK([](const TL& x) { return x[0].transpose(0, 2); }, {a});
  GRADCHECK([](const TL& x) { return x[0].t(); }, {b});
  GRADCHECK([](const TL& x) { return x[0].slice(1, 1, 6, 2); }, {b});
  GRADCHECK([](const TL& x) { return x[0].slice(2, -3, 5).slice(0, 0, 2); }, {a});
  GRADCHECK([](const TL& x) { return x[0].narrow(0, 1, 2); }, {b});
  GRADCHECK([](const TL& x) { return x[0].unsqueeze(1).squeeze(); }, {b});
  GRADCHECK([](const TL& x) { return x[0].unsqueeze(-1).squeeze(-1); }, {b});
  GRADCHECK([](const TL& x) { return x[0].unsqueeze(0).expand({3, 4, 6}); }, {b});
  GRADCHECK([](const TL& x) { return x[0].slice(1, 0, 1).expand({-1, 5}); }, {b});
  GRADCHECK([](const TL& x) { return x[0].flatten(1); }, {a});
  GRADCHECK([](const TL& x) { return x[0].contiguous(); }, {a});
  GRADCHECK([](const TL& x) { return x[0].clone(); }, {b});
  GRADCHECK([](const TL& x) { return x[0].to(Device::cpu()); }, {b});
  // Overlapping uses of one input through two views: gradients of both views add up.
  GRADCHECK([](const TL& x) { return x[0].slice(0, 0, 3) * x[0].slice(0, 1, 4); }, {b});
}
