// Elementwise ops against float64 loops over the (dtype-rounded) input values, on odd shapes,
// broadcast and non-contiguous operands, in every dtype the op supports.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

const DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const UnaryOp kUnaryOps[] = {UnaryOp::Neg,  UnaryOp::Abs,     UnaryOp::Exp,  UnaryOp::Log, UnaryOp::Sqrt,
                             UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Gelu};
const BinaryOp kBinaryOps[] = {BinaryOp::Add,     BinaryOp::Sub,     BinaryOp::Mul, BinaryOp::Div,
                               BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Eq,  BinaryOp::Ne,
                               BinaryOp::Lt,      BinaryOp::Le,      BinaryOp::Gt,  BinaryOp::Ge};

double ref_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return std::fabs(x);
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Relu:
      return x > 0 ? x : 0.0;
    case UnaryOp::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  }
  return 0;
}

bool backward_reads_y(UnaryOp op) { return kernels::unary_grad_reads(op) == kernels::UnaryGradReads::Output; }

// dL/dx from g and v = x or y (which one: see kernels/elementwise.h).
double ref_unary_grad(UnaryOp op, double g, double v) {
  const double kPi = 3.14159265358979323846;
  switch (op) {
    case UnaryOp::Neg:
      return -g;
    case UnaryOp::Abs:
      return v > 0 ? g : v < 0 ? -g : 0.0;
    case UnaryOp::Exp:
      return g * v;
    case UnaryOp::Log:
      return g / v;
    case UnaryOp::Sqrt:
      return g * 0.5 / v;
    case UnaryOp::Tanh:
      return g * (1 - v * v);
    case UnaryOp::Sigmoid:
      return g * v * (1 - v);
    case UnaryOp::Relu:
      return v > 0 ? g : 0.0;
    case UnaryOp::Gelu:
      return g * (0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * kPi));
  }
  return 0;
}

// Result of a op b for operands of dtype dt, computed in float64 / int64; integer results wrap
// to dt's width.
double ref_binary(BinaryOp op, double a, double b, DType dt) {
  double r = 0;
  switch (op) {
    case BinaryOp::Add:
      r = a + b;
      break;
    case BinaryOp::Sub:
      r = a - b;
      break;
    case BinaryOp::Mul:
      r = a * b;
      break;
    case BinaryOp::Div:
      r = is_floating(dt) ? a / b : std::trunc(a / b);
      break;
    case BinaryOp::Maximum:
      r = (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
      break;
    case BinaryOp::Minimum:
      r = (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
      break;
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Ge:
      return a >= b;
  }
  if (dt == DType::boolean) return r != 0;
  if (dt == DType::u8) return static_cast<double>(static_cast<int64_t>(r) & 0xff);
  return r;
}

// Writes vals (row-major) into t's elements through its strides.
void set_values(const Tensor& t, const std::vector<double>& vals) {
  auto* base = static_cast<unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      off += (rem % t.sizes()[d]) * t.strides()[d];
      rem /= t.sizes()[d];
    }
    store_f64(t.dtype(), base + off * t.element_size(), vals[static_cast<size_t>(i)]);
  }
}

// A tensor of the given layout holding vals.
Tensor tensor_with(const std::vector<double>& vals, const Shape& shape, DType dt, Layout layout) {
  Tensor t = random_tensor(shape, dt, 0, 0.0, 1.0, layout);
  set_values(t, vals);
  return t;
}

// Operand values for op in dtype dt: fractional floats for arithmetic, small integers (with ties)
// for comparisons, nonzero divisors for integer division.
std::vector<double> operand_values(BinaryOp op, DType dt, int64_t n, uint64_t seed, bool divisor) {
  std::vector<double> v = random_values(n, seed, -4.0, 4.0);
  const bool integral = !is_floating(dt);
  for (double& x : v) {
    if (dt == DType::boolean) x = x > 0 ? 1.0 : 0.0;
    else if (dt == DType::u8) x = std::floor((x + 4.0) * 30.0);  // 0..239: sums and products wrap
    else if (integral || kernels::is_comparison(op)) x = std::floor(x * (integral ? 12.0 : 1.0));
    if (divisor && integral && x == 0) x = 3;
  }
  return v;
}

// A "CUDA" tensor backed by host memory: only for checks that run before any kernel.
Tensor fake_cuda_tensor(const Shape& sizes) {
  static std::vector<float> buf(4096);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(DataPtr(buf.data(), nullptr, nullptr), buf.size() * sizeof(float), Device::cuda(0));
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  return Tensor(impl);
}

// Broadcast (NumPy) index of output element i into an operand of shape `s`.
int64_t broadcast_index(const Shape& out, const Shape& s, int64_t i) {
  int64_t idx = 0, mul = 1;
  const size_t lead = out.size() - s.size();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t c = i % out[d];
    i /= out[d];
    if (d >= lead) {
      const int64_t sd = s[d - lead];
      idx += (sd == 1 ? 0 : c) * mul;
      mul *= sd;
    }
  }
  return idx;
}

}  // namespace

TEST_CASE("unary: every op, floating dtypes, three layouts", "[cpu]") {
  uint64_t seed = 100;
  for (UnaryOp op : kUnaryOps) {
    const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
    for (DType dt : kFloatDTypes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
        INFO(kernels::op_name(op) << " " << dtype_name(dt) << " layout " << int(layout));
        Tensor x = random_tensor({7, 13}, dt, seed++, positive ? 0.05 : -4.0, 4.0, layout);
        Tensor y = kernels::unary(op, x);
        CHECK(y.dtype() == dt);
        CHECK(y.sizes() == x.sizes());
        std::vector<double> want;
        for (double v : to_f64(x)) want.push_back(ref_unary(op, v));
        // Outputs are O(1)-O(50): one rounding in dt relative, plus the same absolute slack for
        // results near 0 (e.g. gelu(-4) where 1 + erf cancels).
        check_close(y, want, loose_tol(dt), loose_tol(dt));
      }
    }
  }
}

TEST_CASE("unary: integer dtypes for neg, abs, relu, and other ops refuse them", "[cpu]") {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor x = random_tensor({5, 9}, dt, 3, -50, 50, Layout::Transposed);
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
      std::vector<double> want;
      for (double v : to_f64(x)) want.push_back(ref_unary(op, v));
      Tensor y = kernels::unary(op, x);
      CHECK(y.dtype() == dt);
      check_close(y, want, 0.0);
    }
    CHECK_THROWS_WITH(kernels::unary(UnaryOp::Exp, x), Catch::Contains("exp") && Catch::Contains(dtype_name(dt)));
  }
  CHECK_THROWS_WITH(kernels::unary(UnaryOp::Neg, zeros({2}, {.dtype = DType::boolean})), Catch::Contains("bool"));
}

TEST_CASE("unary: special values", "[cpu]") {
  Tensor x = from_vector<double>({NAN, -100.0, 100.0, 0.0, -0.0, -30.0}, {6}, {.dtype = DType::f32});
  const auto relu = to_f64(kernels::unary(UnaryOp::Relu, x));
  CHECK(std::isnan(relu[0]));
  const auto sig = to_f64(kernels::unary(UnaryOp::Sigmoid, x));
  CHECK(sig[1] == 0.0);
  CHECK(sig[2] == 1.0);
  CHECK(sig[3] == 0.5);
  const auto lg = to_f64(kernels::unary(UnaryOp::Log, x));
  CHECK(std::isinf(lg[3]));
  CHECK(lg[3] < 0);
  CHECK(std::isnan(lg[1]));
  const auto ge = to_f64(kernels::unary(UnaryOp::Gelu, x));
  CHECK(ge[5] == 0.0);
  CHECK(ge[2] == 100.0);
  // 0-d and empty tensors.
  CHECK(to_f64(kernels::unary(UnaryOp::Exp, from_vector({0.0}, {}, {.dtype = DType::f32}))) ==
        std::vector<double>{1.0});
  CHECK(kernels::unary(UnaryOp::Tanh, zeros({0, 5})).sizes() == Shape{0, 5});
}

TEST_CASE("unary_backward: every op against the float64 derivative", "[cpu]") {
  uint64_t seed = 500;
  for (UnaryOp op : kUnaryOps) {
    const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
    for (DType dt : kFloatDTypes) {
      INFO(kernels::op_name(op) << " backward " << dtype_name(dt));
      Tensor x = random_tensor({9, 11}, dt, seed++, positive ? 0.05 : -4.0, 4.0, Layout::Strided);
      Tensor y = kernels::unary(op, x);
      Tensor g = random_tensor({9, 11}, dt, seed++, -1.0, 1.0, Layout::Transposed);
      const auto gv = to_f64(g);
      const auto vv = to_f64(backward_reads_y(op) ? y : x);
      std::vector<double> want;
      for (size_t i = 0; i < gv.size(); ++i) want.push_back(ref_unary_grad(op, gv[i], vv[i]));
      // Only the operand the header names is passed; the other stays undefined.
      const Tensor xs = op == UnaryOp::Neg || backward_reads_y(op) ? Tensor() : x;
      const Tensor ys = backward_reads_y(op) ? y : Tensor();
      Tensor dx = kernels::unary_backward(op, g, xs, ys);
      CHECK(dx.dtype() == dt);
      check_close(dx, want, loose_tol(dt), loose_tol(dt));
    }
  }
  Tensor x = from_vector({1, 2}, {2}, {.dtype = DType::f32});
  CHECK_THROWS_WITH(kernels::unary_backward(UnaryOp::Exp, x, x, Tensor()), Catch::Contains("needs y"));
  CHECK_THROWS_WITH(kernels::unary_backward(UnaryOp::Relu, x, x, Tensor()), Catch::Contains("needs y"));
  CHECK_THROWS_WITH(kernels::unary_backward(UnaryOp::Abs, x, Tensor(), x), Catch::Contains("needs x"));
  CHECK_THROWS_WITH(
      kernels::unary_backward(UnaryOp::Abs, x, from_vector({1, 2, 3}, {3}, {.dtype = DType::f32}), Tensor()),
      Catch::Contains("[2]") && Catch::Contains("[3]"));
  // Integer relu backward, from y = relu(x).
  Tensor yi = kernels::unary(UnaryOp::Relu, from_vector({-3, 0, 5}, {3}, {.dtype = DType::i64}));
  check_close(kernels::unary_backward(UnaryOp::Relu, from_vector({7, 7, 7}, {3}, {.dtype = DType::i64}), Tensor(), yi),
              {0, 0, 7}, 0.0);
}

TEST_CASE("binary: every op and dtype, broadcast and non-contiguous operands", "[cpu]") {
  struct Config {
    Shape a, b;
    Layout la, lb;
  };
  const Config configs[] = {
      {{5, 1, 7}, {3, 1}, Layout::Transposed, Layout::Contiguous},  // -> [5, 3, 7]
      {{4, 6}, {4, 6}, Layout::Strided, Layout::Transposed},
      {{2, 3, 5}, {}, Layout::Contiguous, Layout::Contiguous},  // 0-d b
      {{1, 9}, {11, 1}, Layout::Contiguous, Layout::Strided},  // both broadcast
  };
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8,  DType::boolean};
  uint64_t seed = 1000;
  for (BinaryOp op : kBinaryOps) {
    for (DType dt : dtypes) {
      const bool bool_ok = op != BinaryOp::Sub && op != BinaryOp::Div;
      if (dt == DType::boolean && !bool_ok) continue;
      for (const Config& c : configs) {
        INFO(kernels::op_name(op) << " " << dtype_name(dt) << " a " << shape_str(c.a) << " b " << shape_str(c.b));
        Tensor a = tensor_with(operand_values(op, dt, numel_of(c.a), seed++, false), c.a, dt, c.la);
        Tensor b = tensor_with(operand_values(op, dt, numel_of(c.b), seed++, true), c.b, dt, c.lb);
        Tensor out = kernels::binary(op, a, b);
        const Shape shape = broadcast_shapes(c.a, c.b);
        REQUIRE(out.sizes() == shape);
        CHECK(out.dtype() == (kernels::is_comparison(op) ? DType::boolean : dt));
        CHECK(out.is_contiguous());
        const auto av = to_f64(a), bv = to_f64(b);
        std::vector<double> want(static_cast<size_t>(numel_of(shape)));
        for (int64_t i = 0; i < numel_of(shape); ++i)
          want[i] = ref_binary(op, av[broadcast_index(shape, c.a, i)], bv[broadcast_index(shape, c.b, i)], dt);
        check_close(out, want, kernels::is_comparison(op) ? 0.0 : loose_tol(dt));
      }
    }
  }
}

TEST_CASE("binary: large operands cross the parallel grain on both paths", "[cpu]") {
  Tensor a = random_tensor({513, 1025}, DType::f32, 1);
  Tensor b = random_tensor({513, 1025}, DType::f32, 2, -1, 1, Layout::Transposed);
  const auto av = to_f64(a), bv = to_f64(b);
  std::vector<double> want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = av[i] * bv[i];
  check_close(kernels::binary(BinaryOp::Mul, a, b), want, loose_tol(DType::f32));
  for (size_t i = 0; i < av.size(); ++i) want[i] = av[i] - av[i % 1025];
  check_close(kernels::binary(BinaryOp::Sub, a, as_strided_raw(a, {1025}, {1}, 0)), want, loose_tol(DType::f32),
              loose_tol(DType::f32));
}

TEST_CASE("binary: dtype promotion", "[cpu]") {
  struct P {
    DType a, b, want;
  };
  for (P p : {P{DType::i32, DType::f32, DType::f32}, P{DType::f16, DType::bf16, DType::f32},
              P{DType::i64, DType::f16, DType::f16}, P{DType::boolean, DType::i32, DType::i32},
              P{DType::u8, DType::i32, DType::i32}, P{DType::f32, DType::f64, DType::f64},
              P{DType::i32, DType::i64, DType::i64}}) {
    INFO(dtype_name(p.a) << " + " << dtype_name(p.b));
    Tensor a = from_vector({1, 2, 3}, {3}, {.dtype = p.a});
    Tensor b = from_vector({0.5, 1.0, 0.0}, {3}, {.dtype = p.b});
    Tensor out = kernels::binary(BinaryOp::Add, a, b);
    CHECK(out.dtype() == p.want);
    const auto av = to_f64(a), bv = to_f64(b);
    check_close(out, {av[0] + bv[0], av[1] + bv[1], av[2] + bv[2]}, loose_tol(p.want));
    CHECK(kernels::binary(BinaryOp::Lt, a, b).dtype() == DType::boolean);
  }
}

TEST_CASE("binary: NaN propagation and integer edge cases", "[cpu]") {
  Tensor a = from_vector<double>({NAN, 1.0, 2.0}, {3}, {.dtype = DType::f32});
  Tensor b = from_vector<double>({1.0, NAN, 3.0}, {3}, {.dtype = DType::f32});
  for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum}) {
    const auto r = to_f64(kernels::binary(op, a, b));
    CHECK(std::isnan(r[0]));
    CHECK(std::isnan(r[1]));
    CHECK(r[2] == (op == BinaryOp::Maximum ? 3.0 : 2.0));
  }
  CHECK(to_f64(kernels::binary(BinaryOp::Ne, a, a)) == std::vector<double>{1, 0, 0});
  // Integer division truncates toward zero; INT_MIN / -1 wraps instead of trapping.
  Tensor n = from_vector<double>({7, -7, 7, -7, -2147483648.0}, {5}, {.dtype = DType::i32});
  Tensor d = from_vector({2, 2, -2, -2, -1}, {5}, {.dtype = DType::i32});
  CHECK(to_f64(kernels::binary(BinaryOp::Div, n, d)) == std::vector<double>{3, -3, -3, 3, -2147483648.0});
  CHECK_THROWS_WITH(kernels::binary(BinaryOp::Div, n, from_vector({1, 1, 0, 1, 1}, {5}, {.dtype = DType::i32})),
                    Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(kernels::binary(BinaryOp::Div, n, 0.0), Catch::Contains("division by zero"));
  CHECK(to_f64(kernels::binary(BinaryOp::Add, from_vector({2147483647.0}, {1}, {.dtype = DType::i32}),
                               from_vector({1}, {1}, {.dtype = DType::i32}))) == std::vector<double>{-2147483648.0});
}

TEST_CASE("binary: scalar on either side, scalar takes the tensor's dtype", "[cpu]") {
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
  const BinaryOp ops[] = {BinaryOp::Add,     BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                          BinaryOp::Minimum, BinaryOp::Lt,  BinaryOp::Ge,  BinaryOp::Eq};
  uint64_t seed = 77;
  for (DType dt : dtypes) {
    const bool integral = !is_floating(dt);
    const double s = 2.7;
    const double sv = integral ? 2.0 : s;  // integers truncate the scalar
    for (BinaryOp op : ops) {
      for (bool first : {false, true}) {
        INFO(kernels::op_name(op) << " " << dtype_name(dt) << (first ? " scalar first" : " scalar second"));
        std::vector<double> vals = random_values(35, seed++, -5.0, 5.0);
        for (double& v : vals) {
          if (integral) v = std::trunc(v * 10);
          if (integral && v == 0) v = 1;  // nonzero divisors when the tensor divides
        }
        Tensor a = tensor_with(vals, {5, 7}, dt, Layout::Transposed);
        Tensor out = kernels::binary(op, a, s, first);
        CHECK(out.dtype() == (kernels::is_comparison(op) ? DType::boolean : dt));
        std::vector<double> want;
        for (double v : to_f64(a)) want.push_back(first ? ref_binary(op, sv, v, dt) : ref_binary(op, v, sv, dt));
        check_close(out, want, kernels::is_comparison(op) ? 0.0 : loose_tol(dt));
      }
    }
  }
}

TEST_CASE("where: broadcasting, promotion, u8 conditions", "[cpu]") {
  Tensor cond = from_vector({1, 0, 1, 0}, {4, 1}, {.dtype = DType::boolean});
  Tensor a = random_tensor({1, 5}, DType::f32, 1);
  Tensor b = random_tensor({4, 5}, DType::f64, 2, -1, 1, Layout::Transposed);
  Tensor out = kernels::where(cond, a, b);
  CHECK(out.dtype() == DType::f64);
  REQUIRE(out.sizes() == Shape{4, 5});
  const auto av = to_f64(a), bv = to_f64(b), cv = to_f64(cond);
  std::vector<double> want;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) want.push_back(cv[r] != 0 ? av[c] : bv[r * 5 + c]);
  check_close(out, want, 0.0);

  // u8 condition: any nonzero byte selects a.
  Tensor cu8 = from_vector({0, 2, 255, 0}, {4}, {.dtype = DType::u8});
  Tensor ai = from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::i64});
  check_close(kernels::where(cu8, ai, from_vector({-1}, {}, {.dtype = DType::i64})), {-1, 2, 3, -1}, 0.0);

  CHECK_THROWS_WITH(kernels::where(from_vector({1, 0}, {2}, {.dtype = DType::f32}), ai, ai), Catch::Contains("cond"));
  CHECK_THROWS_WITH(kernels::where(cu8, ai, from_vector({1, 2, 3}, {3}, {.dtype = DType::f32})),
                    Catch::Contains("where") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(kernels::where(from_vector({1}, {1}, {.dtype = DType::boolean}), fake_cuda_tensor({1}),
                                   from_vector({1}, {1}, {.dtype = DType::f32})),
                    Catch::Contains("where: operands on different devices: cond on cpu, a on cuda:0"));
}

TEST_CASE("elementwise: errors name the op, the shapes and the devices", "[cpu]") {
  CHECK_THROWS_WITH(kernels::binary(BinaryOp::Add, zeros({2, 3}), zeros({4, 3})),
                    Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 3]"));
  CHECK_THROWS_WITH(kernels::binary(BinaryOp::Add, zeros({4}), fake_cuda_tensor({4})),
                    Catch::Contains("add: operands on different devices: a on cpu, b on cuda:0"));
  CHECK_THROWS_WITH(
      kernels::binary(BinaryOp::Sub, zeros({2}, {.dtype = DType::boolean}), zeros({2}, {.dtype = DType::boolean})),
      Catch::Contains("sub") && Catch::Contains("bool"));
  CHECK_THROWS_WITH(kernels::binary(BinaryOp::Mul, Tensor(), zeros({2})), Catch::Contains("undefined"));
  // Empty broadcast results and 0-d operands.
  CHECK(kernels::binary(BinaryOp::Add, zeros({0, 3}), zeros({3})).sizes() == Shape{0, 3});
  CHECK(to_f64(kernels::binary(BinaryOp::Mul, from_vector({3}, {}, {.dtype = DType::f32}),
                               from_vector({-2}, {}, {.dtype = DType::f32}))) == std::vector<double>{-6});
}

TEST_CASE("integer division: unsigned u8 by 255 is plain division, signed by -1 negates", "[cpu]") {
  Tensor a = from_vector(std::vector<int32_t>{254, 255, 7}, {3}).to(DType::u8);
  Tensor b = from_vector(std::vector<int32_t>{255, 255, 255}, {3}).to(DType::u8);
  CHECK(kernels::binary(kernels::BinaryOp::Div, a, b).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 0});
  Tensor c = from_vector(std::vector<int32_t>{7, -8, std::numeric_limits<int32_t>::min()}, {3});
  CHECK(kernels::binary(kernels::BinaryOp::Div, c, -1.0).to_vector<int32_t>() ==
        std::vector<int32_t>{-7, 8, std::numeric_limits<int32_t>::min()});
}
