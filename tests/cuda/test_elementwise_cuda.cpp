// CUDA elementwise kernels (kernels/cuda/elementwise.cu) against their CPU twin. Inputs are made
// on the CPU (tests/support/reference.h) and the same values are placed on the GPU with the same
// layout (contiguous, transposed, step-2 strided, expanded, misaligned by one element), so both the
// vectorized and the strided kernel paths run.
//
// Tolerances. Both devices evaluate the same formulas (kernels/elementwise_math.h) in the same
// op-math precision, so ops made of single IEEE-rounded operations (+ - * /, sqrt, neg, abs, relu,
// max/min, comparisons, where, and the backward formulas built from them) must agree exactly.
// Transcendentals (exp, log, tanh, erf) differ between the device math library and the host libm
// by a few ulps, which a final rounding to f16/bf16 can turn into one ulp of the storage dtype:
// allowed |gpu - cpu| <= loose_tol(dt) * |cpu| + loose_tol(dt) * 1, the absolute part covering results that
// come from cancellation of O(1) terms (gelu near -3: 1 + erf(x) ~ 3e-3, tanh' = 1 - y^2 near 0).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "strided";
}

/// gpu (on cuda:0) equals cpu within atol + rtol * |cpu|, elementwise; same shape and dtype.
void expect_match(const Tensor& gpu, const Tensor& cpu, double rtol, double atol) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(cpu.device().is_cpu());
  REQUIRE(gpu.sizes() == cpu.sizes());
  REQUIRE(gpu.dtype() == cpu.dtype());
  check_close(gpu, to_f64(cpu), rtol, atol);
}

/// The same tensor (values and geometry) on the CPU and on the GPU.
struct Pair {
  Tensor cpu, gpu;
};
Pair random_pair(const Shape& shape, DType dt, uint64_t seed, double lo, double hi, Layout layout) {
  if (dt == DType::boolean) {
    // random_tensor stores v != 0, which is almost always true: draw 0/1 explicitly instead.
    std::vector<double> v = random_values(numel_of(shape), seed, 0.0, 2.0);
    for (double& x : v) x = std::floor(x);
    const int64_t nd = static_cast<int64_t>(shape.size());
    if (layout == Layout::Transposed && nd >= 2) {
      Shape swapped = shape;
      std::swap(swapped[nd - 1], swapped[nd - 2]);
      // Row-major values of the transposed view = v, so fill the base in the transposed order.
      std::vector<double> base(v.size());
      const int64_t r = shape[nd - 2], c = shape[nd - 1], outer = numel_of(shape) / (r * c);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < c; ++j) base[(o * c + j) * r + i] = v[(o * r + i) * c + j];
      const Tensor b = from_vector(base, swapped, {.dtype = dt});
      return {b.transpose(-1, -2), b.to(kGpu).transpose(-1, -2)};
    }
    if (layout == Layout::Strided && nd >= 1) {
      Shape wide = shape;
      wide[nd - 1] *= 2;
      std::vector<double> base(static_cast<size_t>(numel_of(wide)), 1.0);
      for (size_t i = 0; i < v.size(); ++i) base[2 * i] = v[i];
      const Tensor b = from_vector(base, wide, {.dtype = dt});
      return {b.slice(nd - 1, 0, wide[nd - 1], 2), b.to(kGpu).slice(nd - 1, 0, wide[nd - 1], 2)};
    }
    const Tensor b = from_vector(v, shape, {.dtype = dt});
    return {b, b.to(kGpu)};
  }
  const Tensor c = random_tensor(shape, dt, seed, lo, hi, layout, Device::cpu());
  if (layout == Layout::Contiguous) return {c, c.to(kGpu)};
  return {c, random_tensor(shape, dt, seed, lo, hi, layout, kGpu)};
}
/// A contiguous view that starts one element into its storage: not 16-byte aligned, so the
/// launcher must take the scalar contiguous loop.
Pair misaligned_pair(int64_t n, DType dt, uint64_t seed, double lo, double hi) {
  Pair p = random_pair({n + 1}, dt, seed, lo, hi, Layout::Contiguous);
  return {p.cpu.narrow(0, 1, n), p.gpu.narrow(0, 1, n)};
}

bool unary_exact(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Sqrt;
}
bool unary_positive_domain(UnaryOp op) { return op == UnaryOp::Log || op == UnaryOp::Sqrt; }
const UnaryOp kUnaryOps[] = {UnaryOp::Neg,  UnaryOp::Abs,     UnaryOp::Exp,  UnaryOp::Log, UnaryOp::Sqrt,
                             UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Gelu};

void check_unary(UnaryOp op, const Pair& x) {
  const DType dt = x.cpu.dtype();
  const double t = unary_exact(op) ? 0.0 : loose_tol(dt);
  expect_match(kernels::unary(op, x.gpu), kernels::unary(op, x.cpu), t, t);
}

}  // namespace

TEST_CASE("cuda unary ops match the CPU on every layout and floating dtype", "[cuda]") {
  const Shape shape{29, 37};
  for (UnaryOp op : kUnaryOps) {
    const double lo = unary_positive_domain(op) ? 0.05 : -3.0, hi = unary_positive_domain(op) ? 4.0 : 3.0;
    for (DType dt : kFloatTypes) {
      for (Layout layout : kLayouts) {
        INFO(kernels::op_name(op) << " " << dtype_name(dt) << " " << layout_name(layout));
        check_unary(op, random_pair(shape, dt, 11, lo, hi, layout));
      }
      INFO(kernels::op_name(op) << " " << dtype_name(dt) << " expanded / misaligned");
      Pair row = random_pair({1, 37}, dt, 12, lo, hi, Layout::Contiguous);
      check_unary(op, {row.cpu.expand({29, 37}), row.gpu.expand({29, 37})});
      check_unary(op, misaligned_pair(1001, dt, 13, lo, hi));
    }
  }
}

TEST_CASE("cuda unary neg/abs/relu on integers match the CPU exactly", "[cuda]") {
  for (DType dt : {DType::i32, DType::i64}) {
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
      INFO(kernels::op_name(op) << " " << dtype_name(dt));
      check_unary(op, random_pair({17, 23}, dt, 21, -1000, 1000, Layout::Transposed));
      check_unary(op, random_pair({1003}, dt, 22, -1000, 1000, Layout::Contiguous));
    }
  }
  // A math op on an integer tensor is refused on the GPU as on the CPU.
  const Tensor xi = random_tensor({5}, DType::i32, 23, -5, 5, Layout::Contiguous, kGpu);
  CHECK_THROWS(kernels::unary(UnaryOp::Exp, xi));
}

TEST_CASE("cuda unary ops keep NaN, inf and signed zero like the CPU", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v{nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 1.0, -1.0, 0.5};
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor c = from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = dt});
    const Tensor g = c.to(kGpu);
    for (UnaryOp op : kUnaryOps) {
      INFO(kernels::op_name(op) << " " << dtype_name(dt));
      const double t = unary_exact(op) ? 0.0 : loose_tol(dt);
      expect_match(kernels::unary(op, g), kernels::unary(op, c), t, t);
    }
  }
}

TEST_CASE("cuda unary_backward matches the CPU", "[cuda]") {
  const Shape shape{31, 19};
  for (UnaryOp op : kUnaryOps) {
    const bool reads_x = kernels::unary_grad_reads(op) == kernels::UnaryGradReads::Input;
    // tanh' = g (1 - y^2) and gelu' go through a fusable multiply-add or erf/exp: tolerance; the
    // others are products and quotients of single roundings: exact.
    const bool exact = op != UnaryOp::Tanh && op != UnaryOp::Gelu;
    const double lo = unary_positive_domain(op) ? 0.05 : -3.0, hi = unary_positive_domain(op) ? 4.0 : 3.0;
    for (DType dt : kFloatTypes) {
      for (Layout layout : kLayouts) {
        INFO(kernels::op_name(op) << " backward " << dtype_name(dt) << " " << layout_name(layout));
        const Pair g = random_pair(shape, dt, 31, -2.0, 2.0, layout);
        const Pair x = random_pair(shape, dt, 32, lo, hi, Layout::Contiguous);
        Tensor xc, yc, xg, yg;
        if (op == UnaryOp::Neg) {
          // reads neither
        } else if (reads_x) {
          xc = x.cpu, xg = x.gpu;
        } else {
          yc = kernels::unary(op, x.cpu);  // the same y on both devices
          yg = yc.to(kGpu);
        }
        const double t = exact ? 0.0 : loose_tol(dt);
        expect_match(kernels::unary_backward(op, g.gpu, xg, yg), kernels::unary_backward(op, g.cpu, xc, yc), t, t);
      }
    }
  }
}

TEST_CASE("cuda binary arithmetic and comparisons match the CPU exactly", "[cuda]") {
  const BinaryOp ops[] = {BinaryOp::Add,     BinaryOp::Sub,     BinaryOp::Mul, BinaryOp::Div,
                          BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq,  BinaryOp::Ne,
                          BinaryOp::Lt,      BinaryOp::Le,      BinaryOp::Gt,  BinaryOp::Ge};
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32, DType::i64};
  for (DType dt : dtypes) {
    // Integers: divisors 1..49 (no zero); floats: values on a coarse grid would make Eq vacuous,
    // so the comparison cases below also use a quantized pair.
    const bool integral = !is_floating(dt);
    const double alo = integral ? -500 : -3, ahi = integral ? 500 : 3;
    const double blo = integral ? 1 : -3, bhi = integral ? 50 : 3;
    for (BinaryOp op : ops) {
      INFO(kernels::op_name(op) << " " << dtype_name(dt));
      // Same layout on both sides, every layout.
      for (Layout layout : kLayouts) {
        INFO(layout_name(layout));
        const Pair a = random_pair({23, 41}, dt, 41, alo, ahi, layout);
        const Pair b = random_pair({23, 41}, dt, 42, blo, bhi, layout == Layout::Strided ? Layout::Transposed : layout);
        expect_match(kernels::binary(op, a.gpu, b.gpu), kernels::binary(op, a.cpu, b.cpu), 0, 0);
      }
      // Broadcasting: (13, 1, 37) with (21, 37), and with a 0-d scalar tensor.
      const Pair a = random_pair({13, 1, 37}, dt, 43, alo, ahi, Layout::Strided);
      const Pair b = random_pair({21, 37}, dt, 44, blo, bhi, Layout::Transposed);
      expect_match(kernels::binary(op, a.gpu, b.gpu), kernels::binary(op, a.cpu, b.cpu), 0, 0);
      const Pair s = random_pair({}, dt, 45, blo, bhi, Layout::Contiguous);
      expect_match(kernels::binary(op, b.gpu, s.gpu), kernels::binary(op, b.cpu, s.cpu), 0, 0);
      if (!(integral && op == BinaryOp::Div))  // a may hold zeros: only b-like tensors divide
        expect_match(kernels::binary(op, s.gpu, a.gpu), kernels::binary(op, s.cpu, a.cpu), 0, 0);
      // Misaligned contiguous operands (scalar contiguous loop).
      const Pair ma = misaligned_pair(1001, dt, 46, alo, ahi);
      const Pair mb = misaligned_pair(1001, dt, 47, blo, bhi);
      expect_match(kernels::binary(op, ma.gpu, mb.gpu), kernels::binary(op, ma.cpu, mb.cpu), 0, 0);
      // Quantized values so that ties (Eq, Le, Ge, Maximum of equals) actually occur.
      const Pair qa = random_pair({257}, DType::i32, 48, -3, 4, Layout::Contiguous);
      const Pair qb = random_pair({257}, DType::i32, 49, -3, 4, Layout::Contiguous);
      if (op != BinaryOp::Div) {
        expect_match(kernels::binary(op, kernels::cast(qa.gpu, dt), kernels::cast(qb.gpu, dt)),
                     kernels::binary(op, kernels::cast(qa.cpu, dt), kernels::cast(qb.cpu, dt)), 0, 0);
      }
    }
  }
}

TEST_CASE("cuda binary ops on bool and u8 match the CPU", "[cuda]") {
  const Pair a = random_pair({9, 33}, DType::boolean, 51, 0, 2, Layout::Transposed);
  const Pair b = random_pair({9, 33}, DType::boolean, 52, 0, 2, Layout::Contiguous);
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Lt}) {
    INFO(kernels::op_name(op));
    expect_match(kernels::binary(op, a.gpu, b.gpu), kernels::binary(op, a.cpu, b.cpu), 0, 0);
  }
  CHECK_THROWS(kernels::binary(BinaryOp::Sub, a.gpu, b.gpu));
  const Pair c = random_pair({301}, DType::u8, 53, 0, 255, Layout::Contiguous);
  const Pair d = random_pair({301}, DType::u8, 54, 1, 255, Layout::Contiguous);
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Gt}) {
    INFO("u8 " << kernels::op_name(op));
    expect_match(kernels::binary(op, c.gpu, d.gpu), kernels::binary(op, c.cpu, d.cpu), 0, 0);
  }
}

TEST_CASE("cuda maximum/minimum propagate NaN like the CPU", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> av{nan, 1.0, nan, -0.0, 2.0, -3.0};
  const std::vector<double> bv{1.0, nan, nan, 0.0, 2.0, 5.0};
  for (DType dt : kFloatTypes) {
    const Tensor a = from_vector(av, {6}, {.dtype = dt}), b = from_vector(bv, {6}, {.dtype = dt});
    for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq, BinaryOp::Ne}) {
      INFO(kernels::op_name(op) << " " << dtype_name(dt));
      const Tensor g = kernels::binary(op, a.to(kGpu), b.to(kGpu));
      expect_match(g, kernels::binary(op, a, b), 0, 0);
      if (op == BinaryOp::Maximum) check_close(g, {nan, nan, nan, 0.0, 2.0, 5.0}, 0, 0);
    }
  }
}

TEST_CASE("cuda binary with a scalar matches the CPU in both orders", "[cuda]") {
  const BinaryOp ops[] = {BinaryOp::Add,     BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                          BinaryOp::Minimum, BinaryOp::Lt,  BinaryOp::Ge,  BinaryOp::Eq};
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32, DType::i64}) {
    const bool integral = !is_floating(dt);
    // Integer tensors in 1..99 so that s / a never divides by zero.
    const Pair a = random_pair({27, 35}, dt, 61, integral ? 1 : -3, integral ? 100 : 3, Layout::Transposed);
    for (BinaryOp op : ops) {
      for (double s : {0.1, -2.5, 3.0}) {
        for (bool first : {false, true}) {
          INFO(kernels::op_name(op) << " " << dtype_name(dt) << " s=" << s << " scalar_first=" << first);
          if (integral && op == BinaryOp::Div && !first && std::trunc(s) == 0) {
            // The scalar takes a's dtype: 0.1 truncates to 0, a division by zero on both devices.
            CHECK_THROWS_WITH(kernels::binary(op, a.gpu, s, first), Catch::Contains("division by zero"));
            continue;
          }
          expect_match(kernels::binary(op, a.gpu, s, first), kernels::binary(op, a.cpu, s, first), 0, 0);
        }
      }
    }
  }
}

TEST_CASE("cuda integer division by zero is an error, as on the CPU", "[cuda]") {
  for (DType dt : {DType::i32, DType::i64}) {
    INFO(dtype_name(dt));
    const Tensor a = from_vector({7, 8, 9, 10, 11}, {5}, {.dtype = dt, .device = kGpu});
    const Tensor b = from_vector({1, 2, 0, 3, 4}, {5}, {.dtype = dt, .device = kGpu});
    CHECK_THROWS_WITH(kernels::binary(BinaryOp::Div, a, b), Catch::Contains("division by zero"));
    CHECK_THROWS_WITH(kernels::binary(BinaryOp::Div, a, 0.0), Catch::Contains("division by zero"));
    CHECK_THROWS_WITH(kernels::binary(BinaryOp::Div, b, 6.0, true), Catch::Contains("division by zero"));
    // The flag is per call: a clean division right after still works.
    check_close(kernels::binary(BinaryOp::Div, a, 2.0), {3, 4, 4, 5, 5}, 0, 0);
    check_close(kernels::binary(BinaryOp::Div, from_vector({-7, 7}, {2}, {.dtype = dt, .device = kGpu}),
                                from_vector({2, -2}, {2}, {.dtype = dt, .device = kGpu})),
                {-3, -3}, 0, 0);
  }
}

TEST_CASE("cuda where matches the CPU for every dtype and broadcast", "[cuda]") {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                          DType::i32, DType::i64, DType::u8,   DType::boolean};
  const Pair cond = random_pair({15, 1, 29}, DType::boolean, 71, 0, 2, Layout::Strided);
  for (DType dt : dtypes) {
    INFO(dtype_name(dt));
    const Pair a = random_pair({15, 11, 29}, dt, 72, 0, 100, Layout::Transposed);
    const Pair b = random_pair({11, 29}, dt, 73, 0, 100, Layout::Contiguous);
    expect_match(kernels::where(cond.gpu, a.gpu, b.gpu), kernels::where(cond.cpu, a.cpu, b.cpu), 0, 0);
    const Pair ca = random_pair({1001}, DType::boolean, 74, 0, 2, Layout::Contiguous);
    const Pair x = random_pair({1001}, dt, 75, 0, 100, Layout::Contiguous);
    const Pair y = misaligned_pair(1001, dt, 76, 0, 100);
    expect_match(kernels::where(ca.gpu, x.gpu, y.gpu), kernels::where(ca.cpu, x.cpu, y.cpu), 0, 0);
  }
  // A u8 condition: any nonzero byte selects a.
  const Tensor cu8 = from_vector({0, 1, 2, 255, 0}, {5}, {.dtype = DType::u8, .device = kGpu});
  const Tensor a = from_vector({1, 2, 3, 4, 5}, {5}, {.dtype = DType::f32, .device = kGpu});
  const Tensor b = from_vector({-1, -2, -3, -4, -5}, {5}, {.dtype = DType::f32, .device = kGpu});
  check_close(kernels::where(cu8, a, b), {-1, 2, 3, 4, -5}, 0, 0);
}

TEST_CASE("cuda elementwise past one full grid matches the CPU", "[cuda][slow]") {
  // grid_for caps a launch at 65536 blocks x 256 threads = 2^24 threads; the f32 contiguous
  // kernel moves 4 floats per thread, so 2^26 + 2^20 + 3 elements make every thread go round the
  // grid-stride loop a second time (a skipped or repeated stride shows as a mismatch), plus a
  // 3-element scalar tail.
  const int64_t n = (int64_t(1) << 26) + (int64_t(1) << 20) + 3;
  const Pair a = random_pair({n}, DType::f32, 81, -3, 3, Layout::Contiguous);
  const Pair b = random_pair({n}, DType::f32, 82, -3, 3, Layout::Contiguous);
  expect_match(kernels::binary(BinaryOp::Add, a.gpu, b.gpu), kernels::binary(BinaryOp::Add, a.cpu, b.cpu), 0, 0);
  expect_match(kernels::unary(UnaryOp::Tanh, a.gpu), kernels::unary(UnaryOp::Tanh, a.cpu), loose_tol(DType::f32),
               loose_tol(DType::f32));
  const Tensor ah = kernels::cast(a.cpu, DType::f16), bh = kernels::cast(b.cpu, DType::bf16);
  expect_match(kernels::binary(BinaryOp::Mul, ah.to(kGpu), ah.to(kGpu)), kernels::binary(BinaryOp::Mul, ah, ah), 0, 0);
  expect_match(kernels::binary(BinaryOp::Gt, bh.to(kGpu), 0.25), kernels::binary(BinaryOp::Gt, bh, 0.25), 0, 0);
  // Strided path at scale: a (4097, 4099) transposed view plus a broadcast row.
  const Pair t = random_pair({4097, 4099}, DType::f32, 83, -3, 3, Layout::Transposed);
  const Pair r = random_pair({4099}, DType::f32, 84, -3, 3, Layout::Contiguous);
  expect_match(kernels::binary(BinaryOp::Sub, t.gpu, r.gpu), kernels::binary(BinaryOp::Sub, t.cpu, r.cpu), 0, 0);
}

TEST_CASE("cuda elementwise launchers accept zero-element tensors", "[cuda]") {
  // Called through the tables, past the fronts' own numel == 0 returns, so each launcher's guard
  // is what runs: no launch, no flag read-back, nothing written, and no error left behind.
  for (const Shape& shape : {Shape{0}, Shape{3, 0, 5}}) {
    INFO("shape " << shape_str(shape));
    const Tensor x = empty(shape, {.dtype = DType::f32, .device = kGpu}),
                 y = empty(shape, {.dtype = DType::f32, .device = kGpu});
    const Tensor out = empty(shape, {.dtype = DType::f32, .device = kGpu}),
                 mask = empty(shape, {.dtype = DType::boolean, .device = kGpu});
    const Tensor xi = empty(shape, {.dtype = DType::i32, .device = kGpu}),
                 outi = empty(shape, {.dtype = DType::i32, .device = kGpu});
    CHECK_NOTHROW(kernels::unary_table(kGpu, UnaryOp::Exp, x, out));
    CHECK_NOTHROW(kernels::unary_backward_table(kGpu, UnaryOp::Exp, x, Tensor(), y, out));
    CHECK_NOTHROW(kernels::binary_table(kGpu, BinaryOp::Add, x, y, out));
    CHECK_NOTHROW(kernels::binary_table(kGpu, BinaryOp::Lt, x, y, mask));
    CHECK_NOTHROW(kernels::binary_table(kGpu, BinaryOp::Div, xi, xi, outi));  // the error-flag path
    CHECK_NOTHROW(kernels::binary_scalar_table(kGpu, BinaryOp::Div, xi, 3.0, true, outi));
    CHECK_NOTHROW(kernels::where_table(kGpu, mask, x, y, out));
    CHECK(kernels::binary(BinaryOp::Mul, x, y).sizes() == shape);
  }
  CHECK_NOTHROW(synchronize(kGpu));
}
