#pragma once
// The ops the CNN models use, written once as "cases" run in f16 / bf16 and compared with their
// f32 result (tests/kernels/test_low_precision.cpp) or with the CPU twin in the same dtype
// (tests/cuda/test_low_precision_cuda.cpp).
//
// A case builds its inputs through an LpCtx: every input value is a multiple of 1/32 in [-2, 2]
// (or a narrower range), exactly representable in f16 and bf16, so a low-precision run and its
// f32 reference start from the same numbers. Intermediates a backward reads (a forward output,
// softmax probabilities) go through ctx.fix(), which rounds them to the low dtype in the f32 run
// too: both runs then feed the backward the same values, and the only difference left is the
// final rounding of the result.
//
// Tolerance: |low - f32| <= k * u * |f32| + floor, with u the unit roundoff of the low dtype
// (2^-11 for f16, 2^-8 for bf16), k the case's constant and floor = 2^-16 * max|f32| (the
// difference between two f32 evaluations of one formula in different orders: at most n * 2^-24
// times the magnitude of the terms, n <= 256 here) plus 2^-24 for f16 (its subnormal step).
// k = 0: the result must be exact (copies, max, comparisons, index ops on exact values).
// k = 2: the kernel computes in f32 and rounds once, which costs at most u * |f32| (round to
// nearest); the second u covers the f32 noise near a rounding boundary. This holds for
// reductions, softmax, BatchNorm statistics and conv/matmul too, because they accumulate in f32.
//
// One exception, on CUDA only (LpCase::cuda_second_rounding): cuDNN may round a convolution's
// bias-free sum s to the low dtype before the bias b is added (kernels/cuda/conv.cu, top
// comment), so the GPU gives g = ((s + e)(1 + d1) + b)(1 + d2) where the CPU twin gives
// c = (s + b + e')(1 + d0), |d| <= u, e and e' f32 noise. Then
//   |g - c| <= 2u |s + b| + u (1 + u) |s|  and  |s| <= |s + b| + |b|,  |s + b| <= |c| / (1 - u),
// so |g - c| <= (3 + u) / (1 - u) * u |c| + u (1 + u) * max|b| (+ the f32 floor): k = (3 + u) /
// (1 - u) and an absolute term from the bound on the bias the case built (not from its outputs).
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/index.h>
#include <ember/kernels/matmul.h>
#include <ember/kernels/norm.h>
#include <ember/kernels/pool.h>
#include <ember/kernels/reduce.h>
#include <ember/kernels/softmax.h>
#include "support/reference.h"

namespace ember::testing::lp {

// Unit roundoff (half an ulp at 1) of a floating dtype: the one in reference.h, named here so
// that files using both namespaces see one function.
using ember::testing::unit_roundoff;

/// Where and in which dtype a case runs. dt: the compute dtype of the op's floating inputs; rep:
/// the low dtype whose values inputs and intermediates are limited to (dt itself, or f16/bf16
/// when dt is f32 for the reference run).
struct LpCtx {
  DType dt = DType::f32;
  DType rep = DType::f32;
  Device dev = Device::cpu();

  /// A tensor of dtype `as` (default dt) on dev holding multiples of 1/32 in [lo, hi].
  Tensor in_as(DType as, const Shape& sizes, uint64_t seed, double lo = -2.0, double hi = 2.0) const {
    std::vector<double> v = random_values(numel_of(sizes), seed, lo, hi);
    for (double& x : v) x = std::round(x * 32.0) / 32.0;
    return from_vector(v, sizes, {.dtype = as, .device = dev});
  }
  Tensor in(const Shape& sizes, uint64_t seed, double lo = -2.0, double hi = 2.0) const {
    return in_as(dt, sizes, seed, lo, hi);
  }
  /// An intermediate made representable in rep (unchanged in the low run), back in t's dtype.
  Tensor fix(const Tensor& t) const { return kernels::cast(kernels::cast(t, rep), t.dtype()); }
};

/// An output a CUDA kernel may round twice: the bias-free sum, then the sum plus an addend of
/// magnitude at most addend_bound (see the top of this file).
struct SecondRounding {
  size_t output;
  double addend_bound;
};

/// One op (or op family member) and what its outputs are allowed to differ by.
struct LpCase {
  std::string name;
  double k;  // tolerance constant, see the top of this file
  std::function<std::vector<Tensor>(const LpCtx&)> run;
  std::vector<SecondRounding> cuda_second_rounding = {};  // read by the GPU-vs-CPU test only
};

/// CHECKs actual (any dtype/device) against ref with the bound above, for low dtype `dt`, plus an
/// absolute `extra` where the computation's error bound has one (see SecondRounding).
inline void check_lp(const Tensor& actual, const Tensor& ref, DType dt, double k, double extra = 0.0) {
  REQUIRE(actual.sizes() == ref.sizes());
  const std::vector<double> a = to_f64(actual), r = to_f64(ref);
  double m = 0.0;
  for (double x : r)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  const double floor = k == 0.0 ? 0.0 : std::ldexp(m, -16) + (dt == DType::f16 ? std::ldexp(1.0, -24) : 0.0) + extra;
  const double u = unit_roundoff(dt);
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    if (std::isnan(r[i])) ok = std::isnan(a[i]);
    else if (std::isinf(r[i])) ok = a[i] == r[i];
    else ok = std::fabs(a[i] - r[i]) <= k * u * std::fabs(r[i]) + floor;
    if (!ok && bad++ < 5)
      first += "[" + std::to_string(i) + "] got " + std::to_string(a[i]) + " want " + std::to_string(r[i]) + "; ";
  }
  INFO("mismatches: " << bad << " of " << a.size() << ": " << first);
  CHECK(bad == 0);
}

inline std::vector<LpCase> lp_cases() {
  using namespace kernels;
  std::vector<LpCase> cases;
  const double kRound = 2.0;  // computed in f32, rounded once (see the top of this file)

  // ---- elementwise: every row of EMBER_UNARY_OPS and EMBER_BINARY_OPS ----
  for (size_t i = 0; i < sizeof(kUnaryOpRows) / sizeof(kUnaryOpRows[0]); ++i) {
    const auto op = static_cast<UnaryOp>(i);
    const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
    const double lo = positive ? 0.25 : -2.0;
    cases.push_back({std::string("unary ") + op_name(op), kRound, [op, lo](const LpCtx& c) {
                       const Tensor x = c.in({5, 13}, 11, lo, 2.0);
                       const Tensor y = unary(op, x);
                       const Tensor g = c.in({5, 13}, 12);
                       return std::vector<Tensor>{y, unary_backward(op, g, x, c.fix(y))};
                     }});
  }
  for (size_t i = 0; i < sizeof(kBinaryOpRows) / sizeof(kBinaryOpRows[0]); ++i) {
    const auto op = static_cast<BinaryOp>(i);
    const double k = is_comparison(op) || op == BinaryOp::Maximum || op == BinaryOp::Minimum ? 0.0 : kRound;
    const double lo = op == BinaryOp::Div ? 0.5 : -2.0;
    cases.push_back({std::string("binary ") + op_name(op), k, [op, lo](const LpCtx& c) {
                       const Tensor a = c.in({4, 9}, 21);
                       const Tensor b = c.in({9}, 22, lo, 2.0);  // broadcast over rows
                       return std::vector<Tensor>{binary(op, a, b), binary(op, a, 0.75),
                                                  binary(op, a, op == BinaryOp::Div ? 1.25 : -0.5, true)};
                     }});
  }

  // ---- reductions (accumulate in f32) ----
  for (size_t i = 0; i < sizeof(kReduceOpRows) / sizeof(kReduceOpRows[0]); ++i) {
    const auto op = static_cast<ReduceOp>(i);
    const double k = op == ReduceOp::Max || op == ReduceOp::Min ? 0.0 : kRound;
    cases.push_back({std::string("reduce ") + op_name(op), k, [op](const LpCtx& c) {
                       const Tensor x = c.in({6, 50, 3}, 31);
                       return std::vector<Tensor>{reduce(op, x, {1}), reduce(op, x), reduce(op, x, {0, 2}, true)};
                     }});
  }

  // ---- softmax, log_softmax, cross_entropy ----
  for (bool log : {false, true}) {
    cases.push_back({log ? "log_softmax" : "softmax", kRound, [log](const LpCtx& c) {
                       const Tensor x = c.in({4, 37}, 41, -4.0, 4.0);
                       const Tensor x3 = c.in({3, 5, 4}, 42, -4.0, 4.0);
                       const Tensor y = softmax(x, 1, log);
                       const Tensor g = c.in({4, 37}, 43);
                       return std::vector<Tensor>{y, softmax(x3, 1, log), softmax_backward(g, c.fix(y), 1, log)};
                     }});
  }
  for (double ls : {0.0, 0.1}) {
    cases.push_back(
        {"cross_entropy ls=" + std::to_string(ls), kRound, [ls](const LpCtx& c) {
           const Tensor logits = c.in({8, 10}, 51, -4.0, 4.0);
           const Tensor target = from_vector<int64_t>({0, 9, 3, 3, 7, 1, 5, 2}, {8}, {.device = c.dev});
           const CrossEntropyRows rows = cross_entropy_rows(logits, target, ls);
           const Tensor g = c.in_as(DType::f32, {8}, 52, 0.0, 1.0);
           return std::vector<Tensor>{rows.loss, rows.lse, cross_entropy_backward(g, logits, target, rows.lse, ls)};
         }});
  }

  // ---- pooling ----
  cases.push_back({"max_pool2d", 0.0, [](const LpCtx& c) {
                     const Pool2dParams p{
                         .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
                     const Tensor x = c.in({2, 3, 9, 9}, 61);
                     const MaxPoolResult r = max_pool2d(x, p);
                     // Overlapping windows add at most 4 gradients of [-2, 2]: multiples of 1/32
                     // below 8 in size, exact in f16 and bf16, so the backward is exact too.
                     const Tensor g = c.in(r.out.sizes(), 62);
                     return std::vector<Tensor>{r.out, r.indices,
                                                max_pool2d_backward(g, r.indices, x.sizes(), MemoryFormat::contiguous)};
                   }});
  cases.push_back({"avg_pool2d", kRound, [](const LpCtx& c) {
                     const Pool2dParams p{
                         .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
                     const Tensor x = c.in({2, 3, 9, 9}, 63);
                     const Tensor y = avg_pool2d(x, p);
                     const Tensor g = c.in(y.sizes(), 64);
                     return std::vector<Tensor>{y, avg_pool2d_backward(g, x.sizes(), MemoryFormat::contiguous, p)};
                   }});
  cases.push_back(
      {"adaptive_avg_pool2d", kRound, [](const LpCtx& c) {
         const Tensor x = c.in({2, 3, 7, 5}, 65);
         const Tensor y = adaptive_avg_pool2d(x, 3, 2);
         const Tensor g = c.in(y.sizes(), 66);
         return std::vector<Tensor>{y, adaptive_avg_pool2d_backward(g, x.sizes(), MemoryFormat::contiguous)};
       }});

  // ---- BatchNorm (statistics in f32; parameters and running statistics stay f32) ----
  for (bool training : {true, false}) {
    cases.push_back({training ? "batch_norm train" : "batch_norm eval", kRound, [training](const LpCtx& c) {
                       const double eps = 1e-5;
                       const Tensor x = c.in({4, 3, 5, 5}, 71);
                       const Tensor w = c.in_as(DType::f32, {3}, 72, 0.5, 2.0);
                       const Tensor b = c.in_as(DType::f32, {3}, 73);
                       const Tensor rm = c.in_as(DType::f32, {3}, 74, -0.5, 0.5);
                       const Tensor rv = c.in_as(DType::f32, {3}, 75, 0.5, 2.0);
                       const BatchNormResult r = batch_norm(x, w, b, rm, rv, training, 0.1, eps);
                       const Tensor g = c.in(x.sizes(), 76);
                       std::vector<Tensor> outs{r.out};
                       Tensor mean = rm, invstd;
                       if (training) {
                         outs.push_back(r.save_mean);
                         outs.push_back(r.save_invstd);
                         outs.push_back(rm);  // updated in place
                         outs.push_back(rv);
                         mean = r.save_mean, invstd = r.save_invstd;
                       } else {
                         std::vector<double> inv;
                         for (double v : to_f64(rv)) inv.push_back(1.0 / std::sqrt(v + eps));
                         invstd = from_vector(inv, {3}, {.dtype = DType::f32, .device = c.dev});
                       }
                       const BatchNormGrads gr = batch_norm_backward(g, x, w, mean, invstd, training, eps);
                       outs.push_back(gr.grad_x);
                       outs.push_back(gr.grad_weight);
                       outs.push_back(gr.grad_bias);
                       return outs;
                     }});
  }

  // ---- dropout: the mask depends on (seed, offset, index) only, so it is the f32 one ----
  cases.push_back({"dropout", kRound, [](const LpCtx& c) {
                     const Tensor x = c.in({7, 33}, 81, 0.5, 2.0);  // no zeros: a zero output is a drop
                     const Tensor g = c.in({7, 33}, 82, 0.5, 2.0);
                     return std::vector<Tensor>{dropout(x, 0.3, 1234, 8), dropout_backward(g, 0.3, 1234, 8)};
                   }});

  // ---- conv2d and matmul (f32 accumulation) ----
  // The bias of conv2d is in [-2, 2], and cuDNN may add it after rounding (output 0, see the top).
  cases.push_back({"conv2d",
                   kRound,
                   [](const LpCtx& c) {
                     const Conv2dParams p{.stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1};
                     const Tensor x = c.in({2, 3, 7, 8}, 91);
                     const Tensor w = c.in({4, 3, 3, 3}, 92);
                     const Tensor b = c.in({4}, 93, -2.0, 2.0);
                     const Tensor y = conv2d(x, w, b, p);
                     const Tensor g = c.in(y.sizes(), 94);
                     return std::vector<Tensor>{y, conv2d_backward_input(g, w, x.sizes(), MemoryFormat::contiguous, p),
                                                conv2d_backward_weight(g, x, w.sizes(), p)};
                   },
                   {{.output = 0, .addend_bound = 2.0}}});
  cases.push_back({"matmul", kRound, [](const LpCtx& c) {
                     const Tensor a = c.in({5, 17}, 101), b = c.in({17, 6}, 102);
                     const Tensor a3 = c.in({2, 5, 17}, 103);
                     const Tensor g = c.in({5, 6}, 104);
                     const Tensor da = zeros({5, 17}, {.dtype = c.dt, .device = c.dev});
                     const Tensor db = zeros({17, 6}, {.dtype = c.dt, .device = c.dev});
                     gemm(g, b, da, false, true);  // dA = g @ B^T
                     gemm(a, g, db, true, false);  // dB = A^T @ g
                     return std::vector<Tensor>{matmul(a, b), matmul(a3, b), matmul(a, c.in({6, 17}, 105).t()), da, db};
                   }});

  // ---- copies and index ops on exact values ----
  cases.push_back(
      {"copy and index ops", 0.0, [](const LpCtx& c) {
         const Tensor x = c.in({4, 6, 3}, 111);
         const Tensor idx = from_vector<int64_t>({5, 0, 5, 2}, {4}, {.device = c.dev});
         // out in [-2, 2] plus two duplicates of [-2, 2]: multiples of 1/32 below 6 in
         // size, exact in both low dtypes.
         const Tensor out = c.in({4, 6, 3}, 112);
         index_add(out, 1, idx, c.in({4, 4, 3}, 113));
         const Tensor strided = zeros({3, 4}, {.dtype = c.dt, .device = c.dev});
         copy(strided.t(), x.slice(1, 2, 3).squeeze(1));  // (4, 3) into a transposed view
         return std::vector<Tensor>{index_select(x, 1, idx), out, contiguous_raw(x.transpose(0, 2)), strided};
       }});
  return cases;
}

}  // namespace ember::testing::lp
