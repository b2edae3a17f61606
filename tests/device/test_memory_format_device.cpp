// The channels-last memory format on every device (tests/support/device_test.h): layouts, copies
// that keep them, elementwise results that follow their operands, and the same values as the
// row-major computation. Sizes with C and H*W above 1, so that the two layouts differ.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ember/autograd/autocast.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/autograd/ops_norm.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/norm.h>
#include <ember/kernels/reduce.h>
#include <ember/layers/activation.h>
#include <ember/layers/batchnorm.h>
#include <ember/layers/conv.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>
#include <ember/layers/pool.h>
#include <ember/models/blocks.h>
#include <ember/optim/adam.h>
#include <ember/optim/sgd.h>
#include "support/device_test.h"
#include "support/layout_copy_spy.h"
#include "support/reference.h"
#include "support/table_override.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Shape kNCHW = {2, 3, 4, 5};

/// A channels-last tensor with the values of random_tensor(kNCHW, dt, seed).
Tensor channels_last_input(DType dt, uint64_t seed) {
  return random_tensor(kNCHW, dt, seed, -1.0, 1.0, Layout::Contiguous, test_device())
      .contiguous(MemoryFormat::channels_last);
}

/// |t| in float64 on the CPU, row-major: the magnitudes the rounding bounds are made of.
Tensor abs64(const Tensor& t) {
  return kernels::unary(kernels::UnaryOp::Abs, t.to(Device::cpu()).contiguous().to(DType::f64));
}

}  // namespace

DEVICE_TEST_CASE("memory format: channels_last strides, checks and conversions", "[memory_format]") {
  CHECK(strides_for(kNCHW, MemoryFormat::channels_last) == Shape{60, 1, 15, 3});
  CHECK(strides_for(kNCHW, MemoryFormat::contiguous) == Shape{60, 20, 5, 1});
  CHECK_THROWS_WITH(strides_for({2, 3, 4}, MemoryFormat::channels_last), Catch::Contains("[2, 3, 4]"));

  const Tensor x = random_tensor(kNCHW, DType::f32, 1, -1.0, 1.0, Layout::Contiguous, test_device());
  CHECK(x.is_contiguous(MemoryFormat::contiguous));
  CHECK_FALSE(x.is_contiguous(MemoryFormat::channels_last));
  CHECK(x.suggest_memory_format() == MemoryFormat::contiguous);
  CHECK(x.contiguous(MemoryFormat::contiguous).is_same(x));

  const Tensor cl = x.contiguous(MemoryFormat::channels_last);
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(cl.is_contiguous(MemoryFormat::channels_last));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(cl.suggest_memory_format() == MemoryFormat::channels_last);
  CHECK(cl.contiguous(MemoryFormat::channels_last).is_same(cl));
  CHECK(to_f64(cl) == to_f64(x));  // same logical values
  const Tensor back = cl.contiguous();
  CHECK(back.is_contiguous());
  CHECK(to_f64(back) == to_f64(x));

  // A permuted NHWC array is the same layout.
  const Tensor nhwc = random_tensor({2, 4, 5, 3}, DType::f32, 2, -1.0, 1.0, Layout::Contiguous, test_device());
  CHECK(nhwc.permute({0, 3, 1, 2}).is_contiguous(MemoryFormat::channels_last));
  // Both layouts at once (C == 1, or a 1x1 filter): the strides of the size-1 dims decide.
  for (const Shape& both : {Shape{2, 1, 4, 5}, Shape{6, 3, 1, 1}}) {
    INFO(shape_str(both));
    const Tensor made_cl = empty(both, {.device = test_device()}, MemoryFormat::channels_last);
    const Tensor made_rm = empty(both, {.device = test_device()});
    CHECK(made_cl.is_contiguous());
    CHECK(made_rm.is_contiguous(MemoryFormat::channels_last));
    CHECK(made_cl.suggest_memory_format() == MemoryFormat::channels_last);
    CHECK(made_rm.suggest_memory_format() == MemoryFormat::contiguous);
    const Tensor converted = made_rm.contiguous(MemoryFormat::channels_last);
    CHECK_FALSE(converted.is_same(made_rm));
    CHECK(converted.suggest_memory_format() == MemoryFormat::channels_last);
    CHECK(made_cl.contiguous().is_same(made_cl));  // row-major too: no copy
  }
  // Not 4-D: never channels-last.
  CHECK_FALSE(empty({3, 4}, {.device = test_device()}).is_contiguous(MemoryFormat::channels_last));
}

DEVICE_TEST_CASE("memory format: clone, to, empty_like and zeros_like keep channels_last", "[memory_format]") {
  const Tensor cl = channels_last_input(DType::f32, 3);
  const std::vector<double> v = to_f64(cl);
  for (const Tensor& t : {cl.clone(), cl.to(DType::f64), cl.to(Device::cpu()), empty_like(cl), zeros_like(cl),
                          ones_like(cl, {.dtype = DType::bf16})}) {
    CHECK(t.is_contiguous(MemoryFormat::channels_last));
    CHECK_FALSE(t.is_contiguous());
  }
  CHECK(to_f64(cl.clone()) == v);
  CHECK(to_f64(cl.to(DType::f64)) == v);
  CHECK(to_f64(cl.to(Device::cpu())) == v);
  CHECK(to_f64(zeros_like(cl)) == std::vector<double>(v.size(), 0.0));
}

DEVICE_TEST_CASE("memory format: elementwise ops follow a channels_last operand, values as row-major",
                 "[memory_format]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor a = channels_last_input(dt, 4), b = channels_last_input(dt, 5);
    const Tensor ar = a.contiguous(), br = b.contiguous();
    const Tensor bias = random_tensor({1, 3, 1, 1}, dt, 6, -1.0, 1.0, Layout::Contiguous, test_device());
    struct Pair {
      Tensor got, want;
    };
    const std::vector<Pair> pairs = {
        {kernels::unary(kernels::UnaryOp::Exp, a), kernels::unary(kernels::UnaryOp::Exp, ar)},
        {kernels::binary(kernels::BinaryOp::Mul, a, b), kernels::binary(kernels::BinaryOp::Mul, ar, br)},
        {kernels::binary(kernels::BinaryOp::Add, a, bias), kernels::binary(kernels::BinaryOp::Add, ar, bias)},
        {kernels::binary(kernels::BinaryOp::Sub, a, br), kernels::binary(kernels::BinaryOp::Sub, ar, br)},
        {kernels::binary(kernels::BinaryOp::Mul, a, 2.5, false),
         kernels::binary(kernels::BinaryOp::Mul, ar, 2.5, false)},
        {kernels::where(kernels::binary(kernels::BinaryOp::Gt, a, 0.0, false), a, b),
         kernels::where(kernels::binary(kernels::BinaryOp::Gt, ar, 0.0, false), ar, br)},
    };
    for (size_t i = 0; i < pairs.size(); ++i) {
      INFO("case " << i);
      CHECK(pairs[i].got.is_contiguous(MemoryFormat::channels_last));
      CHECK(to_f64(pairs[i].got) == to_f64(pairs[i].want));  // the same arithmetic per element: exact
    }
    // A row-major first operand of the full shape gives a row-major result.
    CHECK(kernels::binary(kernels::BinaryOp::Add, ar, b).is_contiguous());
    // An expanded first operand (a sum's backward hands down such ones) has no layout: the
    // channels-last one decides, for a binary op and a unary op's gradient alike.
    const Tensor ones_view = full({1, 1, 1, 1}, 1.0, {.dtype = dt, .device = test_device()}).expand(kNCHW);
    CHECK(kernels::binary(kernels::BinaryOp::Mul, ones_view, a).is_contiguous(MemoryFormat::channels_last));
    CHECK(
        kernels::unary_backward(kernels::UnaryOp::Relu, ones_view, Tensor(), kernels::unary(kernels::UnaryOp::Relu, a))
            .is_contiguous(MemoryFormat::channels_last));
  }
}

DEVICE_TEST_CASE("memory format: sums over the dims of a channels_last tensor equal row-major ones, without copies",
                 "[memory_format][reduce]") {
  // {0, 2, 3} is a conv bias's gradient: on channels-last data a column sum of the (N*H*W, C)
  // rows, reduced in place. Each result sums k terms in f32 in some order: within gamma_k * sum |x|
  // of the exact sum, so the two layouts differ by at most twice that.
  const Tensor x = channels_last_input(DType::f32, 20);
  const double u = std::ldexp(1.0, -24);
  for (const std::vector<int64_t>& dims :
       std::vector<std::vector<int64_t>>{{0, 2, 3}, {2, 3}, {1}, {0}, {0, 1, 2, 3}}) {
    INFO("dims " << shape_str(dims));
    int64_t k = 1;
    for (int64_t d : dims) k *= x.size(d);
    const double gamma = static_cast<double>(k) * u / (1 - static_cast<double>(k) * u);
    LayoutCopySpy spy(test_device().type());
    const Tensor got = kernels::reduce(kernels::ReduceOp::Sum, x, dims);
    if (dims != std::vector<int64_t>{0}) CHECK(spy.count() == 0);  // {0} keeps (C, H, W): permuted, copied
    const std::vector<double> a = to_f64(got),
                              b = to_f64(kernels::reduce(kernels::ReduceOp::Sum, x.contiguous(), dims));
    const std::vector<double> mag = to_f64(kernels::reduce(kernels::ReduceOp::Sum, abs64(x), dims));
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) <= 2 * gamma * mag[i]);
  }
  // keepdim and negative dims take the same path; the shapes are the row-major ones.
  const Tensor kept = kernels::reduce(kernels::ReduceOp::Mean, x, {0, -2, -1}, true);
  CHECK(kept.sizes() == Shape{1, 3, 1, 1});
  CHECK(kernels::reduce(kernels::ReduceOp::Sum, x, {-1, -2}).sizes() == Shape{2, 3});
  const std::vector<double> km = to_f64(kept),
                            kr = to_f64(kernels::reduce(kernels::ReduceOp::Mean, x.contiguous(), {0, 2, 3}));
  // Means of 40 values in [-1, 1]: each side within gamma_40 (the sum) + u (the division).
  const double g40 = 40 * u / (1 - 40 * u);
  for (size_t i = 0; i < km.size(); ++i) CHECK(std::fabs(km[i] - kr[i]) <= 2 * (g40 + u));
}

DEVICE_TEST_CASE("memory format: max, min, argmax and scattered-dim sums of channels_last f32/f16/bf16 match row-major",
                 "[memory_format][reduce]") {
  // Max, min and argmax are exact: equal bit for bit over any dims. Sums over dims that are not
  // one block of the NHWC memory ({0, 1}, {1, 2}, {1, 3}) reduce in steps; f16/bf16 sums take the
  // permute-and-copy path. Both within twice gamma_k * sum |x| of the row-major sum (f32
  // accumulation), plus a rounding of each result to the storage type.
  const double u32 = std::ldexp(1.0, -24);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = channels_last_input(dt, 40);
    const Tensor xr = x.contiguous();
    INFO(dtype_name(dt));
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{0, 1}, {1, 2}, {1, 3}, {0, 2, 3}, {2}, {0, 1, 2, 3}}) {
      INFO("dims " << shape_str(dims));
      for (kernels::ReduceOp op : {kernels::ReduceOp::Max, kernels::ReduceOp::Min})
        CHECK(to_f64(kernels::reduce(op, x, dims)) == to_f64(kernels::reduce(op, xr, dims)));
      int64_t k = 1;
      for (int64_t d : dims) k *= x.size(d);
      const double gamma = static_cast<double>(k) * u32 / (1 - static_cast<double>(k) * u32);
      const double round = dt == DType::f32 ? 0.0 : (dt == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8));
      const std::vector<double> a = to_f64(kernels::reduce(kernels::ReduceOp::Sum, x, dims)),
                                b = to_f64(kernels::reduce(kernels::ReduceOp::Sum, xr, dims)),
                                mag = to_f64(kernels::reduce(kernels::ReduceOp::Sum, abs64(x), dims));
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        CHECK(std::fabs(a[i] - b[i]) <= 2 * gamma * mag[i] + round * (std::fabs(a[i]) + std::fabs(b[i])));
    }
    for (int64_t dim = 0; dim < 4; ++dim) {
      INFO("argmax dim " << dim);
      CHECK(to_f64(kernels::argmax(x, dim)) == to_f64(kernels::argmax(xr, dim)));
    }
  }
}

DEVICE_TEST_CASE("memory format: gradients flow through contiguous(channels_last)", "[memory_format]") {
  Tensor x = random_tensor(kNCHW, DType::f32, 7, -1.0, 1.0, Layout::Contiguous, test_device());
  x.requires_grad_();
  const Tensor cl = x.contiguous(MemoryFormat::channels_last);
  CHECK(cl.is_contiguous(MemoryFormat::channels_last));
  sum(cl * cl).backward();
  const std::vector<double> g = to_f64(x.grad()), xv = to_f64(x);
  REQUIRE(g.size() == xv.size());
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == 2 * xv[i]);
}

DEVICE_TEST_CASE("memory format: a leaf's .grad is laid out as the leaf", "[memory_format][autograd]") {
  // A channels-last weight gets a channels-last gradient whether the gradient arrives in that
  // layout (kept as it is) or row-major (copied into a channels-last buffer), so the optimizer's
  // fused step needs no staging copies; a row-major leaf keeps a row-major gradient.
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  Tensor w = channels_last_input(DType::f32, 30).requires_grad_();
  const Tensor x = channels_last_input(DType::f32, 31);
  sum(conv2d(x, w, Tensor(), {.padding = 1})).backward();
  CHECK(w.grad().is_contiguous(kCL));
  CHECK_FALSE(w.grad().is_contiguous());

  Tensor v = channels_last_input(DType::f32, 32).requires_grad_();
  sum(v.contiguous() * 3.0).backward();  // the gradient arrives row-major
  CHECK(v.grad().is_contiguous(kCL));
  CHECK(to_f64(v.grad()) == std::vector<double>(v.numel(), 3.0));

  Tensor r = random_tensor(kNCHW, DType::f32, 33, -1.0, 1.0, Layout::Contiguous, test_device()).requires_grad_();
  const Tensor c = channels_last_input(DType::f32, 34);
  sum(c * r).backward();  // r's gradient, ones * c, arrives laid out as c: channels-last
  CHECK(r.grad().is_contiguous());
  CHECK(to_f64(r.grad()) == to_f64(c));

  // A bf16 leaf in a product promoted to f32: its gradient is cast back to bf16 in its layout.
  Tensor h = channels_last_input(DType::bf16, 35).requires_grad_();
  LayoutCopySpy spy(test_device().type());
  sum(h * c).backward();
  CHECK(spy.count() == 0);
  CHECK(h.grad().is_contiguous(kCL));
  CHECK(to_f64(h.grad()) == to_f64(c.to(DType::bf16)));
}

DEVICE_TEST_CASE("memory format: SGD and Adam steps on channels_last parameters equal row-major ones",
                 "[memory_format][optim]") {
  // The fused steps walk flat arrays: a row-major gradient of a channels-last parameter must be
  // staged in the parameter's layout, not paired element by element with the wrong values.
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "sgd" : "adam"));
    Tensor p_cl = channels_last_input(DType::f32, 8).detach();
    Tensor p_rm = p_cl.contiguous().detach();
    p_cl.requires_grad_();
    p_rm.requires_grad_();
    std::unique_ptr<optim::Optimizer> o_cl, o_rm;
    if (which == 0) {
      o_cl = std::make_unique<optim::SGD>(std::vector<Tensor>{p_cl}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      o_rm = std::make_unique<optim::SGD>(std::vector<Tensor>{p_rm}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    } else {
      o_cl = std::make_unique<optim::Adam>(std::vector<Tensor>{p_cl}, optim::AdamOptions{.lr = 0.01});
      o_rm = std::make_unique<optim::Adam>(std::vector<Tensor>{p_rm}, optim::AdamOptions{.lr = 0.01});
    }
    for (int step = 0; step < 3; ++step) {
      const Tensor g = random_tensor(kNCHW, DType::f32, 20 + step, -1.0, 1.0, Layout::Contiguous, test_device());
      p_cl.set_grad(step == 1 ? g.contiguous(MemoryFormat::channels_last) : g);  // both layouts of gradient
      p_rm.set_grad(g);
      o_cl->step();
      o_rm->step();
    }
    CHECK(p_cl.is_contiguous(MemoryFormat::channels_last));
    CHECK(to_f64(p_cl) == to_f64(p_rm));
    for (const auto& [name, t] : o_cl->state(0))
      if (t.dim() == 4) CHECK(t.is_contiguous(MemoryFormat::channels_last));
  }
}

namespace {

/// CHECKs |a - b| <= bound[i] elementwise, and (unless told otherwise) that `a` is laid out
/// channels-last.
void check_close_cl(const Tensor& a, const Tensor& b, const std::vector<double>& bound, bool want_cl = true) {
  if (want_cl) CHECK(a.suggest_memory_format() == MemoryFormat::channels_last);
  const std::vector<double> x = to_f64(a), y = to_f64(b);
  REQUIRE(x.size() == y.size());
  REQUIRE(bound.size() == x.size());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= bound[i]) && ++bad <= 5)
      FAIL_CHECK("element " << i << ": " << x[i] << " vs " << y[i] << " +- " << bound[i]);
  CHECK(bad == 0);
}

/// How far a convolution result in dtype dt may be from the exact sum of its k products (the bias
/// one more) of the stored inputs, whose magnitudes add up to `mag`:
///   |result - exact| <= per_mag * mag + per_val * |exact| + floor.
///  * CPU (kernels/cpu/conv.cpp, conv_nhwc.cpp): im2col + GEMM accumulating in f32 (f64 for f64),
///    so gamma_k of that type times mag; f16 / bf16 then round once to dt (u(dt) * |exact|, and
///    half an f16 subnormal step near zero).
///  * CUDA: cuDNN picks the engine by timing, and for strict f32 (and f64) Winograd and FFT
///    engines stay candidates: conv_graph.cpp's numerics_allowed leaves out only tensor-core,
///    down-converting and reduced-precision engines, and the legacy search may pick them too.
///    Their transforms round each term a few more times, which gamma_k does not cover, so these
///    are tests/cuda/test_conv_cuda.cpp's bounds, which hold for every engine: loose_tol_sum(dt, k)
///    * mag for f32 / f64 (loose_tol(f32) is about 168 f32 roundings), loose_tol(dt) * mag for
///    f16 / bf16 (an engine may keep transformed operands or partial sums in the storage type:
///    one rounding per term), loose_tol(dt) * |exact| for the store (and the bias's second
///    rounding), half an f16 subnormal step.
/// Why these bounds rather than leaving Winograd and FFT out for strict f32: they are candidates
/// on purpose (for strict f32 the fastest engine of a 3x3 layer is often a non-fused Winograd,
/// which is why conv_graph.cpp also times the FALLBACK heuristics' list), strict f32 promises f32
/// operands and products (no TF32), not the rounding of one summation order, and the row-major
/// results are held to these bounds already (test_conv_cuda): the layouts get the same standard.
struct ConvTol {
  double per_mag, per_val, floor;
};
ConvTol conv_tol(DType dt, int64_t k) {
  const bool reduced = dt == DType::f16 || dt == DType::bf16;
  const double floor = dt == DType::f16 ? std::ldexp(1.0, -24) : 0.0;
  if (test_device().is_cuda()) return {reduced ? loose_tol(dt) : loose_tol_sum(dt, k), loose_tol(dt), floor};
  return {gamma_n(k, unit_roundoff(acc_of(dt))), reduced ? unit_roundoff(dt) : 0.0, floor};
}

/// CHECKs that a and b, two results of one convolution in a's dtype (a laid out channels-last
/// unless told otherwise) whose elements sum at most k products of float64 magnitudes `mag`, are
/// each within conv_tol of the exact value: |r - exact| <= (per_mag * mag + per_val * |r| +
/// floor) / (1 - per_val) for r = a and r = b, so |a - b| is at most the sum of the two.
void check_conv_pair(const Tensor& a, const Tensor& b, const Tensor& mag, int64_t k, bool want_cl = true) {
  const ConvTol t = conv_tol(a.dtype(), k);
  const std::vector<double> av = to_f64(a), bv = to_f64(b);
  std::vector<double> bound = to_f64(mag);
  REQUIRE(bound.size() == av.size());
  REQUIRE(bound.size() == bv.size());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] =
        (2 * t.per_mag * bound[i] + t.per_val * (std::fabs(av[i]) + std::fabs(bv[i])) + 2 * t.floor) / (1 - t.per_val);
  check_close_cl(a, b, bound, want_cl);
}

/// t on the CPU, row-major, in float64 (exact: every dtype widens to f64 without rounding).
Tensor f64_rm(const Tensor& t) { return t.to(Device::cpu()).contiguous().to(DType::f64); }

/// CHECKs that `got` (laid out channels-last) is within conv_tol of `exact`, a float64 convolution
/// of the same stored inputs on the CPU whose elements sum at most k products of magnitudes
/// `mag`; the reference's own f64 error, gamma_k(f64) * mag, is added to the bound.
void check_conv_exact(const Tensor& got, const Tensor& exact, const Tensor& mag, int64_t k) {
  const ConvTol t = conv_tol(got.dtype(), k);
  const double ref_err = gamma_n(k, unit_roundoff(DType::f64));
  const std::vector<double> ev = to_f64(exact);
  std::vector<double> bound = to_f64(mag);
  REQUIRE(bound.size() == ev.size());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = (t.per_mag + (1 + t.per_val) * ref_err) * bound[i] + t.per_val * std::fabs(ev[i]) + t.floor;
  check_close_cl(got, exact, bound);
}

}  // namespace

DEVICE_TEST_CASE("memory format: conv2d in channels_last equals row-major within the f32 convolution bound",
                 "[memory_format][conv]") {
  // Both results sum K = C/g * kh * kw products of the same f32 inputs: each is within conv_tol
  // (above) of the exact value, so they differ by at most the sum of the two (the |x| * |w| sums
  // are a float64 convolution of the magnitudes on the CPU).
  const Device dev = test_device();
  kernels::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const Tensor x = channels_last_input(DType::f32, 11);
  const Tensor w = random_tensor({6, 3, 3, 3}, DType::f32, 12, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor wc = w.contiguous(MemoryFormat::channels_last);
  const Tensor y = kernels::conv2d(x, wc, Tensor(), p);
  check_conv_pair(y, kernels::conv2d(x.contiguous(), w, Tensor(), p), kernels::conv2d(abs64(x), abs64(w), Tensor(), p),
                  27);

  const Tensor gy = random_tensor(y.sizes(), DType::f32, 13, -1.0, 1.0, Layout::Contiguous, dev)
                        .contiguous(MemoryFormat::channels_last);
  // Each input gradient sums O * kh * kw = 54 products.
  check_conv_pair(kernels::conv2d_backward_input(gy, wc, x.sizes(), MemoryFormat::channels_last, p),
                  kernels::conv2d_backward_input(gy.contiguous(), w, x.sizes(), MemoryFormat::contiguous, p),
                  kernels::conv2d_backward_input(abs64(gy), abs64(w), x.sizes(), MemoryFormat::contiguous, p), 54);
  // Each weight gradient sums N * Ho * Wo = 40 products.
  check_conv_pair(kernels::conv2d_backward_weight(gy, x, w.sizes(), p),
                  kernels::conv2d_backward_weight(gy.contiguous(), x.contiguous(), w.sizes(), p),
                  kernels::conv2d_backward_weight(abs64(gy), abs64(x), w.sizes(), p), 40);
}

DEVICE_TEST_CASE("memory format: a channels_last weight makes conv2d channels_last on a row-major input",
                 "[memory_format][conv]") {
  // PyTorch's rule: a model converted to channels-last runs channels-last whatever its input's
  // layout; the first convolution converts the input (for free when C == 1, as MNIST's).
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  const Device dev = test_device();
  const Tensor x = random_tensor({2, 3, 6, 7}, DType::f32, 60, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor w = random_tensor({5, 3, 3, 3}, DType::f32, 61, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor y = kernels::conv2d(x, w.contiguous(kCL), Tensor(), {});
  CHECK(y.suggest_memory_format() == kCL);
  check_conv_pair(y, kernels::conv2d(x, w, Tensor(), {}), kernels::conv2d(abs64(x), abs64(w), Tensor(), {}), 27);
  CHECK(kernels::conv2d_backward_weight(y, x, w.sizes(), {}).suggest_memory_format() == kCL);

  // Two convolutions on a (2, 1, 8, 8) row-major input, forward and backward: no layout changes.
  Tensor w1 = random_tensor({4, 1, 3, 3}, DType::f32, 62, -1.0, 1.0, Layout::Contiguous, dev).contiguous(kCL);
  Tensor w2 = random_tensor({6, 4, 3, 3}, DType::f32, 63, -1.0, 1.0, Layout::Contiguous, dev).contiguous(kCL);
  w1.requires_grad_();
  w2.requires_grad_();
  const Tensor image = random_tensor({2, 1, 8, 8}, DType::f32, 64, -1.0, 1.0, Layout::Contiguous, dev);
  LayoutCopySpy spy(dev.type());
  const Tensor out = conv2d(relu(conv2d(image, w1, Tensor(), {.padding = 1})), w2, Tensor(), {});
  sum(out * out).backward();
  CHECK(spy.count() == 0);
  CHECK(out.suggest_memory_format() == kCL);
  CHECK(w1.grad().is_contiguous(kCL));
  CHECK(w2.grad().is_contiguous(kCL));
}

DEVICE_TEST_CASE("memory format: conv2d in channels_last across strides, padding, dilation, 1x1, groups and bias",
                 "[memory_format][conv]") {
  // Bounds as above: each result sums k products (k = C/g * kh * kw forward, O/g * kh * kw for an
  // input gradient, N * Ho * Wo for a weight gradient; the bias is one more term), so the two
  // layouts differ by at most twice conv_tol(f32, k) (check_conv_pair).
  const Device dev = test_device();
  struct Case {
    Shape w;
    kernels::Conv2dParams p;
  };
  auto params = [](int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g) {
    kernels::Conv2dParams p;
    p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh, p.dilation_w = dw, p.groups = g;
    return p;
  };
  const std::vector<Case> cases = {
      {{6, 4, 3, 3}, params(2, 2, 1, 1, 1, 1, 1)},  // ResNet's downsampling 3x3
      {{6, 4, 1, 1}, params(1, 1, 0, 0, 1, 1, 1)},  // 1x1: the input is the column buffer
      {{6, 4, 1, 1}, params(2, 2, 0, 0, 1, 1, 1)},  // ResNet's 1x1 shortcut
      {{5, 4, 2, 3}, params(2, 1, 1, 0, 1, 2, 1)},  // uneven kernel, stride, padding, dilation
      {{6, 2, 3, 3}, params(1, 1, 1, 1, 1, 1, 2)},  // two groups
      {{4, 1, 3, 3}, params(2, 2, 1, 1, 1, 1, 4)},  // depthwise, strided
      {{6, 2, 1, 1}, params(1, 1, 0, 0, 1, 1, 2)},  // grouped 1x1 (x is not a column buffer of a group)
  };
  uint64_t seed = 40;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    INFO("case " << i << ": weight " << shape_str(k.w) << ", groups " << k.p.groups);
    const Tensor x = random_tensor({2, 4, 6, 7}, DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, dev)
                         .contiguous(MemoryFormat::channels_last);
    const Tensor w = random_tensor(k.w, DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, dev);
    const Tensor wc = w.contiguous(MemoryFormat::channels_last);
    const Tensor b = random_tensor({k.w[0]}, DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, dev);
    const Tensor y = kernels::conv2d(x, wc, b, k.p);
    const int64_t taps = k.w[2] * k.w[3];
    check_conv_pair(y, kernels::conv2d(x.contiguous(), w, b, k.p), kernels::conv2d(abs64(x), abs64(w), abs64(b), k.p),
                    k.w[1] * taps + 1);
    const Tensor gy = random_tensor(y.sizes(), DType::f32, ++seed, -1.0, 1.0, Layout::Contiguous, dev)
                          .contiguous(MemoryFormat::channels_last);
    check_conv_pair(kernels::conv2d_backward_input(gy, wc, x.sizes(), MemoryFormat::channels_last, k.p),
                    kernels::conv2d_backward_input(gy.contiguous(), w, x.sizes(), MemoryFormat::contiguous, k.p),
                    kernels::conv2d_backward_input(abs64(gy), abs64(w), x.sizes(), MemoryFormat::contiguous, k.p),
                    k.w[0] / k.p.groups * taps);
    check_conv_pair(kernels::conv2d_backward_weight(gy, x, w.sizes(), k.p),
                    kernels::conv2d_backward_weight(gy.contiguous(), x.contiguous(), w.sizes(), k.p),
                    kernels::conv2d_backward_weight(abs64(gy), abs64(x), w.sizes(), k.p), gy.numel() / k.w[0]);
  }
}

DEVICE_TEST_CASE("memory format: a channels_last input convolved to one channel of 1x1 (a result in both layouts)",
                 "[memory_format][conv]") {
  // The (2, 1, 1, 1) result is laid out the same in both formats; the kernels must still read the
  // input and weight as channels-last (the front names the layout; the result's strides cannot).
  const Device dev = test_device();
  const Tensor x = random_tensor({2, 4, 6, 7}, DType::f32, 70, -1.0, 1.0, Layout::Contiguous, dev)
                       .contiguous(MemoryFormat::channels_last);
  const Tensor w = random_tensor({1, 4, 6, 7}, DType::f32, 71, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor wc = w.contiguous(MemoryFormat::channels_last);
  const Tensor y = kernels::conv2d(x, wc, Tensor(), {});
  REQUIRE(y.numel() == 2);
  // 4 * 6 * 7 = 168 products each.
  check_conv_pair(y, kernels::conv2d(x.contiguous(), w, Tensor(), {}),
                  kernels::conv2d(abs64(x), abs64(w), Tensor(), {}), 168, false);
  // The input gradient from a gradient of that shape (its strides cannot tell the layout; the
  // caller names it), with the channels-last weight. One product each: exact on the CPU (both
  // layouts round the same product once, and the bound is gamma_1); cuDNN may still take a
  // transform engine, hence conv_tol(f32, 1).
  const Tensor gy = random_tensor({2, 1, 1, 1}, DType::f32, 72, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor gx = kernels::conv2d_backward_input(gy.contiguous(MemoryFormat::channels_last), wc, x.sizes(),
                                                   MemoryFormat::channels_last, {});
  check_conv_pair(gx, kernels::conv2d_backward_input(gy, w, x.sizes(), MemoryFormat::contiguous, {}),
                  kernels::conv2d_backward_input(abs64(gy), abs64(w), x.sizes(), MemoryFormat::contiguous, {}), 1);
}

DEVICE_TEST_CASE("memory format: conv2d in f64 channels_last equals row-major and keeps the layout",
                 "[memory_format][conv]") {
  // cuDNN has no NHWC engines for f64: CUDA computes row-major and converts (the CPU runs NHWC).
  // Each result sums k products in f64: within conv_tol(f64, k) of the exact value.
  const Device dev = test_device();
  kernels::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  p.stride_h = 2;
  const Tensor x = random_tensor({2, 4, 6, 7}, DType::f64, 80, -1.0, 1.0, Layout::Contiguous, dev)
                       .contiguous(MemoryFormat::channels_last);
  const Tensor w = random_tensor({6, 4, 3, 3}, DType::f64, 81, -1.0, 1.0, Layout::Contiguous, dev);
  const Tensor wc = w.contiguous(MemoryFormat::channels_last);
  const Tensor y = kernels::conv2d(x, wc, Tensor(), p);
  check_conv_pair(y, kernels::conv2d(x.contiguous(), w, Tensor(), p), kernels::conv2d(abs64(x), abs64(w), Tensor(), p),
                  36);
  const Tensor gy = random_tensor(y.sizes(), DType::f64, 82, -1.0, 1.0, Layout::Contiguous, dev)
                        .contiguous(MemoryFormat::channels_last);
  check_conv_pair(kernels::conv2d_backward_input(gy, wc, x.sizes(), MemoryFormat::channels_last, p),
                  kernels::conv2d_backward_input(gy.contiguous(), w, x.sizes(), MemoryFormat::contiguous, p),
                  kernels::conv2d_backward_input(abs64(gy), abs64(w), x.sizes(), MemoryFormat::contiguous, p), 54);
  check_conv_pair(kernels::conv2d_backward_weight(gy, x, w.sizes(), p),
                  kernels::conv2d_backward_weight(gy.contiguous(), x.contiguous(), w.sizes(), p),
                  kernels::conv2d_backward_weight(abs64(gy), abs64(x), w.sizes(), p), gy.numel() / 6);
}

DEVICE_TEST_CASE("memory format: conv2d in bf16 and f16 channels_last, forward and both gradients, match float64",
                 "[memory_format][conv]") {
  // Each result against a float64 convolution of the same stored (already rounded) inputs, row-
  // major on the CPU, within conv_tol(dt, k): the CPU accumulates in f32 and rounds once; cuDNN
  // gets test_conv_cuda's per-term bound. The forward has a bias (on CUDA the output is filled
  // with it and the convolution blends onto it, beta = 1).
  const Device dev = test_device();
  kernels::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  uint64_t seed = 50;
  for (const DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const Tensor x = random_tensor({2, 4, 6, 7}, dt, ++seed, -1.0, 1.0, Layout::Contiguous, dev).contiguous(kCL);
    const Tensor w = random_tensor({6, 4, 3, 3}, dt, ++seed, -1.0, 1.0, Layout::Contiguous, dev).contiguous(kCL);
    const Tensor b = random_tensor({6}, dt, ++seed, -1.0, 1.0, Layout::Contiguous, dev);
    const Tensor y = kernels::conv2d(x, w, b, p);
    CHECK(y.dtype() == dt);
    // 4 * 3 * 3 = 36 products and the bias.
    check_conv_exact(y, kernels::conv2d(f64_rm(x), f64_rm(w), f64_rm(b), p),
                     kernels::conv2d(abs64(x), abs64(w), abs64(b), p), 37);
    const Tensor gy = random_tensor(y.sizes(), dt, ++seed, -1.0, 1.0, Layout::Contiguous, dev).contiguous(kCL);
    // O * kh * kw = 54 products per input gradient.
    const Tensor gx = kernels::conv2d_backward_input(gy, w, x.sizes(), kCL, p);
    CHECK(gx.dtype() == dt);
    check_conv_exact(gx, kernels::conv2d_backward_input(f64_rm(gy), f64_rm(w), x.sizes(), MemoryFormat::contiguous, p),
                     kernels::conv2d_backward_input(abs64(gy), abs64(w), x.sizes(), MemoryFormat::contiguous, p), 54);
    // N * Ho * Wo = 84 products per weight gradient.
    const Tensor gw = kernels::conv2d_backward_weight(gy, x, w.sizes(), p);
    CHECK(gw.dtype() == dt);
    check_conv_exact(gw, kernels::conv2d_backward_weight(f64_rm(gy), f64_rm(x), w.sizes(), p),
                     kernels::conv2d_backward_weight(abs64(gy), abs64(x), w.sizes(), p), 84);
  }
}

DEVICE_TEST_CASE("memory format: batch norm keeps channels_last, values as row-major", "[memory_format][norm]") {
  const Device dev = test_device();
  // f64: the statistics of 40 values per channel are summed in another order in each layout; the
  // normalized outputs (|out| < 8) then differ by a few units of f64 rounding, far below 1e-12.
  const Tensor x = channels_last_input(DType::f64, 14);
  const Tensor xr = x.contiguous();
  const Tensor w = random_tensor({3}, DType::f64, 15, 0.5, 1.5, Layout::Contiguous, dev);
  const Tensor b = random_tensor({3}, DType::f64, 16, -0.5, 0.5, Layout::Contiguous, dev);
  const kernels::BatchNormResult r = kernels::batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
  const kernels::BatchNormResult rr = kernels::batch_norm(xr, w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
  check_close_cl(r.out, rr.out, std::vector<double>(static_cast<size_t>(x.numel()), 1e-12));
  const Tensor go = channels_last_input(DType::f64, 17);
  const kernels::BatchNormGrads g = kernels::batch_norm_backward(go, x, w, r.save_mean, r.save_invstd, true, 1e-5);
  const kernels::BatchNormGrads gr =
      kernels::batch_norm_backward(go.contiguous(), xr, w, rr.save_mean, rr.save_invstd, true, 1e-5);
  check_close_cl(g.grad_x, gr.grad_x, std::vector<double>(static_cast<size_t>(x.numel()), 1e-12));
  const std::vector<double> gw = to_f64(g.grad_weight), gwr = to_f64(gr.grad_weight);
  for (size_t i = 0; i < gw.size(); ++i) CHECK(std::fabs(gw[i] - gwr[i]) <= 1e-12);
}

DEVICE_TEST_CASE("memory format: dropout masks channels_last in place, in NHWC order, and its backward uses that mask",
                 "[memory_format][dropout]") {
  const MemoryFormat cl = MemoryFormat::channels_last;
  const Tensor x = channels_last_input(DType::f32, 20);
  const Tensor y = kernels::dropout(x, 0.4, 7, 3);
  CHECK(y.is_contiguous(cl));
  CHECK_FALSE(y.is_contiguous());
  // The mask follows memory order: that of the row-major (N, H, W, C) array in the same memory.
  const Tensor nhwc = x.permute({0, 2, 3, 1});
  REQUIRE(nhwc.is_contiguous());
  CHECK(to_f64(y.permute({0, 2, 3, 1})) == to_f64(kernels::dropout(nhwc, 0.4, 7, 3)));
  const std::vector<double> yv = to_f64(y);
  CHECK(yv != to_f64(kernels::dropout(x.contiguous(), 0.4, 7, 3)));  // a row-major x draws another mask

  // The backward regenerates the forward's mask, whatever layout the gradient arrives in.
  const Tensor g = kernels::dropout_backward(x.contiguous(), 0.4, 7, 3, cl);
  CHECK(g.is_contiguous(cl));
  CHECK(to_f64(g) == yv);
  Tensor xa = x.clone();
  xa.requires_grad_();
  sum(dropout(xa, 0.4, 7, 3) * x).backward();  // d/dxa = x * keep / (1 - p) = y
  CHECK(to_f64(xa.grad()) == yv);
}

namespace {
// A spy in the dispatch table: records whether the convolution kernel received channels-last operands.
kernels::Conv2dForwardFn* g_real_conv = nullptr;
bool g_conv_saw_channels_last = false;
void spy_conv(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::Conv2dParams& p, const Tensor& out,
              MemoryFormat f) {
  const MemoryFormat cl = MemoryFormat::channels_last;
  g_conv_saw_channels_last = f == cl && x.is_contiguous(cl) && !x.is_contiguous() && w.is_contiguous(cl) &&
                             !w.is_contiguous() && out.is_contiguous(cl) && !out.is_contiguous();
  g_real_conv(x, w, bias, p, out, f);
}
}  // namespace

DEVICE_TEST_CASE("memory format: the conv2d kernel gets channels_last operands and writes the result in place",
                 "[memory_format][conv]") {
  const TableOverride spy(kernels::conv2d_forward_table, test_device().type(), &spy_conv);
  g_real_conv = spy.original();
  g_conv_saw_channels_last = false;
  const Tensor x = channels_last_input(DType::f32, 60);
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 61, -1.0, 1.0, Layout::Contiguous, test_device())
                       .contiguous(MemoryFormat::channels_last);
  const Tensor y = kernels::conv2d(x, w, Tensor(), {});
  CHECK(g_conv_saw_channels_last);
  CHECK(y.suggest_memory_format() == MemoryFormat::channels_last);
}

DEVICE_TEST_CASE("memory format: grouped and depthwise conv2d in channels_last make no layout-changing copies",
                 "[memory_format][conv]") {
  // The forward and both gradients of a channels-last convolution with groups stay channels-last
  // on both devices: the CPU kernels gather and scatter each group's channels between the rows and
  // their GEMMs (copies within the layout), cuDNN takes NHWC groups as they are.
  for (const int64_t groups : {2, 4}) {
    INFO("groups " << groups);
    const Tensor x = random_tensor({3, 4, 6, 5}, DType::f32, 70 + static_cast<uint64_t>(groups), -1.0, 1.0,
                                   Layout::Contiguous, test_device())
                         .contiguous(MemoryFormat::channels_last);
    const Tensor w = random_tensor({8, 4 / groups, 3, 3}, DType::f32, 80 + static_cast<uint64_t>(groups), -1.0, 1.0,
                                   Layout::Contiguous, test_device())
                         .contiguous(MemoryFormat::channels_last);
    kernels::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    p.groups = groups;
    LayoutCopySpy spy(test_device().type());
    const Tensor y = kernels::conv2d(x, w, Tensor(), p);
    const Tensor gx = kernels::conv2d_backward_input(y, w, x.sizes(), MemoryFormat::channels_last, p);
    const Tensor gw = kernels::conv2d_backward_weight(y, x, w.sizes(), p);
    CHECK(spy.count() == 0);
    CHECK(y.is_contiguous(MemoryFormat::channels_last));
    CHECK(gx.is_contiguous(MemoryFormat::channels_last));
    CHECK(gw.is_contiguous(MemoryFormat::channels_last));
  }
}

DEVICE_TEST_CASE(
    "memory format: a ResNet training step makes no layout-changing copies, in f32 and under bf16 autocast",
    "[memory_format]") {
  // Forward, loss, backward and an SGD step with momentum on a channels-last model and input: no
  // op may convert an activation, a gradient or optimizer state to row-major and back. The model
  // has ResNet-18's parts (conv, batch norm, ReLU, a downsampling BasicBlock with its 1x1 shortcut,
  // global average pooling, flatten, linear) but few convolution shapes, as each new one costs a
  // cuDNN plan search on a GPU.
  //
  // Values: the bf16 run's first step against the f32 run's, from the same weights and input.
  // Under autocast each convolution and the linear layer round their input and weight to bf16
  // (u = 2^-8) and their output is stored in bf16, as are batch norm's outputs, the residual sum
  // and the pooled features; the rest computes in f32. On the longest forward path (x, conv1's
  // weight and output, bn1, block.conv1's weight and output, block.bn1, block.conv2's weight and
  // output, block.bn2, the sum, the pool, fc's weight, bias and output) that is R_f = 15 roundings,
  // each a relative perturbation of at most u of its tensor; the backward to conv1's weight adds
  // one bf16 rounding per gradient it passes (the logits' gradient, fc, the pool, bn2, conv2,
  // bn1, conv1, the outer bn1, conv1's weight gradient, the shortcut's sum: 10), R = 25. To first
  // order a result's normwise relative error is at most the sum over those roundings of u times
  // the gain of the layers after each (worst case: all aligned). With a gain of at most 2 per
  // rounding (ReLU, pooling and the sums have gain 1; batch norm renormalizes, its gain
  // |x - mean| / std and |mean| / std stay near 1 at this initialization; the convolutions near
  // sqrt(2) at Kaiming initialization):
  //   ||logits_bf16 - logits_f32|| <= 2 R_f u ||logits_f32||,  ||g_bf16 - g_f32|| <= 2 R u ||g_f32||
  // for the convolution and linear weights' gradients, and the loss, a mean of cross entropies
  // whose gradient in the logits has 1-norm at most 2, within 2 max |logits_bf16 - logits_f32| of
  // the f32 loss (plus its own f32 roundings, far below). Measured on the CPU (not a GPU yet):
  // logits 0.004 against 2 R_f u = 0.117; fc's gradient 0.005, the convolutions' 0.056-0.072
  // against 2 R u = 0.195 (their weight gradients sum 2048 or 512 products of both signs, and
  // batch norm's backward subtracts most of a pooled gradient: the errors add up closer to the
  // worst case there). A batch of 8 rather than 2: with 2 images batch norm's backward leaves a
  // smaller remainder of the pooled gradient (0.095 measured). A layout or indexing fault gives
  // relative errors of order 1.
  constexpr double kU = 1.0 / 256;  // bf16's unit roundoff
  constexpr int kRoundingsForward = 15, kRoundingsGrad = 25;
  const std::vector<std::string> watched = {"conv1.weight", "block.conv1.weight", "block.conv2.weight", "fc.weight"};
  std::vector<double> logits_f32;
  double loss_f32 = 0.0;
  std::vector<std::vector<double>> grads_f32;
  auto norm2 = [](const std::vector<double>& v) {
    double s = 0.0;
    for (double e : v) s += e * e;
    return std::sqrt(s);
  };
  auto dist2 = [](const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
    return std::sqrt(s);
  };
  for (const bool low : {false, true}) {
    INFO((low ? "bf16 autocast" : "f32"));
    manual_seed(3);
    Generator gen(3);
    auto model = std::make_shared<models::NamedSequential>("SmallResNet");
    model->add("conv1",
               std::make_shared<layers::Conv2d>(3, 8, 3, layers::Conv2dOptions{.padding = 1, .bias = false}, gen));
    model->add("bn1", std::make_shared<layers::BatchNorm2d>(8));
    model->add("relu", std::make_shared<layers::ReLU>());
    model->add("block", std::make_shared<models::BasicBlock>(8, 16, 2, gen));
    model->add("avgpool", std::make_shared<layers::AdaptiveAvgPool2d>(1));
    model->add("flatten", std::make_shared<layers::Flatten>());
    model->add("fc", std::make_shared<layers::Linear>(16, 10, true, gen));
    model->to(test_device());
    model->to(MemoryFormat::channels_last);
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
    const Tensor x = random_tensor({8, 3, 16, 16}, DType::f32, 4, -1.0, 1.0, Layout::Contiguous, test_device())
                         .contiguous(MemoryFormat::channels_last);
    const Tensor y = from_vector(std::vector<int64_t>{3, 7, 1, 0, 9, 4, 2, 5}, {8}, {.device = test_device()});
    LayoutCopySpy spy(test_device().type());
    for (int step = 0; step < 2; ++step) {  // the second step finds the momentum buffers
      spy.reset();
      Tensor logits, loss;
      {
        std::optional<amp::Autocast> guard;
        if (low) guard.emplace(test_device().type(), DType::bf16);
        logits = model->forward(x);
        loss = layers::cross_entropy(logits, y);
      }
      opt.zero_grad();
      loss.backward();
      int copies = spy.count();  // the reads below copy to the host: not counted
      if (step == 0) {  // before the step (SGD's weight decay must not reach the gradients read)
        const std::vector<double> z = to_f64(logits);
        const double l = loss.item<double>();
        std::vector<std::vector<double>> grads;
        for (const auto& [name, param] : model->named_parameters())
          for (const std::string& want : watched)
            if (name == want) grads.push_back(to_f64(param.grad()));
        REQUIRE(grads.size() == watched.size());
        if (!low) {
          logits_f32 = z, loss_f32 = l, grads_f32 = grads;
        } else {
          const double dz = dist2(z, logits_f32);
          INFO("logits: normwise relative difference " << dz / norm2(logits_f32));
          CHECK(dz <= 2 * kRoundingsForward * kU * norm2(logits_f32));
          double dz_max = 0.0;
          for (size_t i = 0; i < z.size(); ++i) dz_max = std::max(dz_max, std::fabs(z[i] - logits_f32[i]));
          CHECK(std::fabs(l - loss_f32) <= 2 * dz_max + 1e-5 * std::fabs(loss_f32));
          for (size_t i = 0; i < grads.size(); ++i) {
            const double dg = dist2(grads[i], grads_f32[i]);
            INFO(watched[i] << ".grad: normwise relative difference " << dg / norm2(grads_f32[i]));
            CHECK(dg <= 2 * kRoundingsGrad * kU * norm2(grads_f32[i]));
          }
        }
      }
      spy.reset();
      opt.step();
      copies += spy.count();
      CHECK(copies == 0);
    }
  }
}
