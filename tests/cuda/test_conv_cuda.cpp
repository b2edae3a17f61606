// CUDA conv2d (kernels/cuda/conv.cu, cuDNN) forward, backward-input and backward-weight against
// float64 references computed here and against the CPU twin (im2col + GEMM), on odd shapes with
// groups, stride, padding and dilation, in f32, f64, f16 and bf16.
//
// Error bounds, per output element with K products whose magnitudes sum to A (bias included):
//  * f32 / f64: loose_tol_sum(dt, K) * A for the accumulation, plus loose_tol(dt) * |ref| for the store. cuDNN
//    may pick Winograd or FFT algorithms, whose transforms add a few roundings per term; loose_tol(f32) is
//    already ~80 f32 ulps, which covers them.
//  * f16 / bf16: cuDNN accumulates in f32, but its algorithms may keep transformed operands or
//    partial results in the storage type, so each term may carry one rounding of the storage
//    type: loose_tol(dt) * A, plus loose_tol(dt) * |ref| for the store and half a subnormal step for f16.
// The reference uses the inputs as stored (already rounded to dt), so input rounding is not error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ember/core/caching_allocator.h>
#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/factory.h>
#include "cuda/expect.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using kernels::Conv2dParams;

namespace {

const Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct Case {
  int64_t n, c, h, w, o, kh, kw;
  Conv2dParams p;
  bool bias;
};

std::string case_str(const Case& k) {
  std::ostringstream os;
  os << "x (" << k.n << ", " << k.c << ", " << k.h << ", " << k.w << "), w (" << k.o << ", " << k.c / k.p.groups << ", "
     << k.kh << ", " << k.kw << "), stride (" << k.p.stride_h << ", " << k.p.stride_w << "), pad (" << k.p.pad_h << ", "
     << k.p.pad_w << "), dilation (" << k.p.dilation_h << ", " << k.p.dilation_w << "), groups " << k.p.groups
     << (k.bias ? ", bias" : "");
  return os.str();
}

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g) {
  Conv2dParams p;
  p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh, p.dilation_w = dw, p.groups = g;
  return p;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {2, 3, 7, 9, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true},
      {3, 6, 11, 8, 9, 3, 2, params(2, 1, 1, 0, 1, 2, 3), true},  // groups, asymmetric everything
      {1, 4, 5, 5, 4, 3, 3, params(1, 1, 2, 2, 2, 2, 4), false},  // depthwise, dilation 2
      {5, 8, 6, 7, 3, 1, 1, params(2, 2, 0, 0, 1, 1, 1), false},  // 1x1, stride 2
      {2, 5, 9, 13, 7, 5, 3, params(3, 2, 2, 1, 1, 1, 1), true},  // odd stride, output rows dropped
      {4, 1, 28, 28, 32, 3, 3, params(1, 1, 0, 0, 1, 1, 1), true},  // mnist_cnn conv1
      {2, 32, 26, 26, 64, 3, 3, params(1, 1, 0, 0, 1, 1, 1), true}  // mnist_cnn conv2 (K = 288)
  };
  return cs;
}

int64_t out_h(const Case& k) { return kernels::conv_out_size(k.h, k.kh, k.p.stride_h, k.p.pad_h, k.p.dilation_h); }
int64_t out_w(const Case& k) { return kernels::conv_out_size(k.w, k.kw, k.p.stride_w, k.p.pad_w, k.p.dilation_w); }

/// Turns per-element (sum, sum of |terms|, term count) into an Expect for dtype dt.
Expect finish(const std::vector<double>& sum, const std::vector<double>& abs, const std::vector<int64_t>& count,
              DType dt) {
  Expect e{sum, std::vector<double>(sum.size())};
  const bool reduced = dt == DType::f16 || dt == DType::bf16;
  for (size_t i = 0; i < sum.size(); ++i) {
    const double acc = reduced ? loose_tol(dt) * abs[i] : loose_tol_sum(dt, count[i]) * abs[i];
    e.bound[i] = acc + loose_tol(dt) * std::fabs(sum[i]) + store_floor(dt);
  }
  return e;
}

/// Calls fn(n, o, oh, ow, ci, ki, kj, ih, iw) for every product of the convolution (ci is the
/// input channel, ih/iw inside the input).
template <typename F> void for_each_term(const Case& k, F fn) {
  const int64_t ho = out_h(k), wo = out_w(k), g = k.p.groups, cg = k.c / g, og = k.o / g;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ki = 0; ki < k.kh; ++ki)
              for (int64_t kj = 0; kj < k.kw; ++kj) {
                const int64_t ih = oh * k.p.stride_h - k.p.pad_h + ki * k.p.dilation_h;
                const int64_t iw = ow * k.p.stride_w - k.p.pad_w + kj * k.p.dilation_w;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                fn(n, o, oh, ow, (o / og) * cg + c, c, ki, kj, ih, iw);
              }
}

Expect ref_forward(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& b, DType dt) {
  const int64_t ho = out_h(k), wo = out_w(k), cg = k.c / k.p.groups;
  const size_t total = static_cast<size_t>(k.n * k.o * ho * wo);
  std::vector<double> sum(total, 0.0), abs(total, 0.0);
  std::vector<int64_t> count(total, 0);
  for_each_term(k, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ci, int64_t c, int64_t ki, int64_t kj,
                       int64_t ih, int64_t iw) {
    const size_t yi = static_cast<size_t>(((n * k.o + o) * ho + oh) * wo + ow);
    const double t = x[static_cast<size_t>(((n * k.c + ci) * k.h + ih) * k.w + iw)] *
                     w[static_cast<size_t>(((o * cg + c) * k.kh + ki) * k.kw + kj)];
    sum[yi] += t, abs[yi] += std::fabs(t), ++count[yi];
  });
  if (k.bias)
    for (size_t i = 0; i < total; ++i) {
      const double bv = b[(i / static_cast<size_t>(ho * wo)) % static_cast<size_t>(k.o)];
      sum[i] += bv, abs[i] += std::fabs(bv), ++count[i];
    }
  return finish(sum, abs, count, dt);
}

Expect ref_backward_input(const Case& k, const std::vector<double>& gy, const std::vector<double>& w, DType dt) {
  const int64_t ho = out_h(k), wo = out_w(k), cg = k.c / k.p.groups;
  const size_t total = static_cast<size_t>(k.n * k.c * k.h * k.w);
  std::vector<double> sum(total, 0.0), abs(total, 0.0);
  std::vector<int64_t> count(total, 0);
  for_each_term(k, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ci, int64_t c, int64_t ki, int64_t kj,
                       int64_t ih, int64_t iw) {
    const size_t xi = static_cast<size_t>(((n * k.c + ci) * k.h + ih) * k.w + iw);
    const double t = gy[static_cast<size_t>(((n * k.o + o) * ho + oh) * wo + ow)] *
                     w[static_cast<size_t>(((o * cg + c) * k.kh + ki) * k.kw + kj)];
    sum[xi] += t, abs[xi] += std::fabs(t), ++count[xi];
  });
  return finish(sum, abs, count, dt);
}

Expect ref_backward_weight(const Case& k, const std::vector<double>& gy, const std::vector<double>& x, DType dt) {
  const int64_t ho = out_h(k), wo = out_w(k), cg = k.c / k.p.groups;
  const size_t total = static_cast<size_t>(k.o * cg * k.kh * k.kw);
  std::vector<double> sum(total, 0.0), abs(total, 0.0);
  std::vector<int64_t> count(total, 0);
  for_each_term(k, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ci, int64_t c, int64_t ki, int64_t kj,
                       int64_t ih, int64_t iw) {
    const size_t wi = static_cast<size_t>(((o * cg + c) * k.kh + ki) * k.kw + kj);
    const double t = gy[static_cast<size_t>(((n * k.o + o) * ho + oh) * wo + ow)] *
                     x[static_cast<size_t>(((n * k.c + ci) * k.h + ih) * k.w + iw)];
    sum[wi] += t, abs[wi] += std::fabs(t), ++count[wi];
  });
  return finish(sum, abs, count, dt);
}

/// t's values in a contiguous view that starts one element into its buffer, so its address is
/// only element-aligned (2 bytes for f16 / bf16).
Tensor offset_copy(const Tensor& t) {
  const Tensor buf = zeros({t.numel() + 1}, t.options());
  Tensor v = buf.narrow(0, 1, t.numel()).view(t.sizes());
  v.copy_(t);
  return v;
}

}  // namespace

TEST_CASE("cuda conv2d forward matches float64 and the CPU (groups, stride, padding, dilation, bias)", "[cuda][slow]") {
  uint64_t seed = 100;
  for (const Case& k : cases()) {
    for (DType dt : kFloatTypes) {
      INFO(case_str(k) << ", " << dtype_name(dt));
      const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c / k.p.groups, k.kh, k.kw};
      // x comes in transposed (H and W swapped in memory): the front makes it contiguous.
      const Tensor x = random_tensor(xs, dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
      const Tensor w = random_tensor(ws, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor b = k.bias ? random_tensor({k.o}, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu) : Tensor();
      const Tensor y = kernels::conv2d(x, w, b, k.p);
      REQUIRE(y.device() == kGpu);
      REQUIRE(y.sizes() == Shape{k.n, k.o, out_h(k), out_w(k)});
      const Expect e = ref_forward(k, to_f64(x), to_f64(w), k.bias ? to_f64(b) : std::vector<double>(), dt);
      check_expect(y, e);
      const Tensor yc =
          kernels::conv2d(x.to(Device::cpu()), w.to(Device::cpu()), k.bias ? b.to(Device::cpu()) : Tensor(), k.p);
      check_expect(y, doubled(e, yc));
    }
  }
}

TEST_CASE("cuda conv2d backward-input and backward-weight match float64 and the CPU", "[cuda][slow]") {
  uint64_t seed = 500;
  for (const Case& k : cases()) {
    for (DType dt : kFloatTypes) {
      INFO(case_str(k) << ", " << dtype_name(dt));
      const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c / k.p.groups, k.kh, k.kw};
      const Shape ys{k.n, k.o, out_h(k), out_w(k)};
      const Tensor x = random_tensor(xs, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor w = random_tensor(ws, dt, ++seed, -1.0, 1.0, Layout::Strided, kGpu);
      const Tensor gy = random_tensor(ys, dt, ++seed, -1.0, 1.0, Layout::Transposed, kGpu);
      const std::vector<double> xv = to_f64(x), wv = to_f64(w), gv = to_f64(gy);

      const Tensor gx = kernels::conv2d_backward_input(gy, w, xs, MemoryFormat::contiguous, k.p);
      REQUIRE(gx.sizes() == xs);
      const Expect ex = ref_backward_input(k, gv, wv, dt);
      check_expect(gx, ex);
      check_expect(gx, doubled(ex, kernels::conv2d_backward_input(gy.to(Device::cpu()), w.to(Device::cpu()), xs,
                                                                  MemoryFormat::contiguous, k.p)));

      const Tensor gw = kernels::conv2d_backward_weight(gy, x, ws, k.p);
      REQUIRE(gw.sizes() == ws);
      const Expect ew = ref_backward_weight(k, gv, xv, dt);
      check_expect(gw, ew);
      check_expect(gw,
                   doubled(ew, kernels::conv2d_backward_weight(gy.to(Device::cpu()), x.to(Device::cpu()), ws, k.p)));
    }
  }
}

TEST_CASE("cuda conv2d gives identical results when the cached algorithm is reused", "[cuda]") {
  // Forward algorithms are deterministic, so a second call (cache hit, same algorithm and math
  // type) must reproduce the first bit for bit; a wrong cached entry (another shape's algorithm,
  // or a math type that allows TF32) would not.
  Case k = cases()[1];
  k.bias = false;
  for (DType dt : kFloatTypes) {
    INFO(dtype_name(dt));
    const Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dt, 7, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor w = random_tensor({k.o, k.c / k.p.groups, k.kh, k.kw}, dt, 8, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor y1 = kernels::conv2d(x, w, Tensor(), k.p);
    const Tensor y2 = kernels::conv2d(x, w, Tensor(), k.p);
    check_same_bits(y1, y2);
    // A different batch size is a different cache entry and still correct.
    const Tensor x1 = x.narrow(0, 1, 2);
    const Tensor y3 = kernels::conv2d(x1, w, Tensor(), k.p);
    Case k2 = k;
    k2.n = 2;
    check_expect(y3, ref_forward(k2, to_f64(x1), to_f64(w), {}, dt));
  }
}

TEST_CASE("cuda conv2d plans each problem once, on cuDNN's graph API for f32, f16 and bf16", "[cuda]") {
  // The legacy calls rebuild an execution plan inside every call (60-190 us of host time each on
  // an H200); a plan made once on the graph API is what makes a step cheap on the host. A shape no
  // other test uses, so that its three problems are new here.
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = random_tensor({3, 5, 11, 9}, dt, 41, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor w = random_tensor({7, 5, 3, 3}, dt, 42, -1.0, 1.0, Layout::Contiguous, kGpu);
    auto three_calls = [&] {
      const Tensor y = kernels::conv2d(x, w, Tensor(), p);
      (void)kernels::conv2d_backward_input(y, w, x.sizes(), MemoryFormat::contiguous, p);
      (void)kernels::conv2d_backward_weight(y, x, w.sizes(), p);
    };
    const kernels::cuda::ConvPlanCounts before = kernels::cuda::conv_plan_counts();
    three_calls();
    const kernels::cuda::ConvPlanCounts first = kernels::cuda::conv_plan_counts();
    CHECK(first.graph - before.graph == 3);
    CHECK(first.legacy == before.legacy);
    three_calls();
    const kernels::cuda::ConvPlanCounts again = kernels::cuda::conv_plan_counts();
    CHECK(again.graph == first.graph);
    CHECK(again.legacy == first.legacy);
  }
}

TEST_CASE("cuda conv2d without a graph-API plan falls back to the legacy calls, row-major and channels-last, once",
          "[cuda]") {
  // The fallback for a problem whose graph search finds no usable engine (strict f32 without the
  // tensor-core engines, no workspace for any candidate, every candidate failing): the legacy
  // calls on NCHW descriptors, a channels-last problem on row-major copies of its operands
  // (conv.cu). The hook makes the search find nothing on any GPU. Values against float64 and the
  // CPU (the bounds of the cases above), the bias-filled forward (beta = 1: the output is copied
  // in, blended onto and copied back), and each key planned once: the second round of calls
  // makes no search. A shape no other test uses, so that its keys are new here.
  struct Disabled {
    Disabled() { kernels::cuda::detail::set_conv_graph_search_disabled_for_testing(true); }
    ~Disabled() { kernels::cuda::detail::set_conv_graph_search_disabled_for_testing(false); }
  } disabled;
  const Case k{3, 6, 10, 9, 5, 3, 3, params(1, 1, 1, 1, 1, 1, 1), true};
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c, k.kh, k.kw}, ys{k.n, k.o, out_h(k), out_w(k)};
  uint64_t seed = 1300;
  for (const MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      const bool cl = f == MemoryFormat::channels_last;
      INFO(case_str(k) << ", " << dtype_name(dt) << (cl ? ", channels-last" : ", row-major"));
      const Tensor x = random_tensor(xs, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu).contiguous(f);
      const Tensor w = random_tensor(ws, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu).contiguous(f);
      const Tensor b = random_tensor({k.o}, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
      const Tensor gy = random_tensor(ys, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu).contiguous(f);
      const std::vector<double> xv = to_f64(x), wv = to_f64(w), gv = to_f64(gy);
      const Expect ey = ref_forward(k, xv, wv, to_f64(b), dt), ex = ref_backward_input(k, gv, wv, dt),
                   ew = ref_backward_weight(k, gv, xv, dt);
      const Tensor xc = x.to(Device::cpu()), wc = w.to(Device::cpu()), gc = gy.to(Device::cpu());
      const Tensor yc = kernels::conv2d(xc, wc, b.to(Device::cpu()), k.p),
                   gxc = kernels::conv2d_backward_input(gc, wc, xs, f, k.p),
                   gwc = kernels::conv2d_backward_weight(gc, xc, ws, k.p);
      for (int round = 0; round < 2; ++round) {
        INFO("round " << round);
        const kernels::cuda::ConvPlanCounts before = kernels::cuda::conv_plan_counts();
        const Tensor y = kernels::conv2d(x, w, b, k.p);
        const Tensor gx = kernels::conv2d_backward_input(gy, w, xs, f, k.p);
        const Tensor gw = kernels::conv2d_backward_weight(gy, x, ws, k.p);
        const kernels::cuda::ConvPlanCounts after = kernels::cuda::conv_plan_counts();
        CHECK(after.searches - before.searches == (round == 0 ? 3 : 0));
        CHECK(after.legacy - before.legacy == (round == 0 ? 3 : 0));
        CHECK(after.legacy_channels_last - before.legacy_channels_last == (round == 0 && cl ? 3 : 0));
        CHECK(after.graph == before.graph);
        for (const Tensor* t : {&y, &gx, &gw}) CHECK(t->suggest_memory_format() == f);
        check_expect(y, ey);
        check_expect(y, doubled(ey, yc));
        check_expect(gx, ex);
        check_expect(gx, doubled(ex, gxc));
        check_expect(gw, ew);
        check_expect(gw, doubled(ew, gwc));
      }
    }
  }
}

TEST_CASE("cuda conv2d plans per stream: each stream's handle makes and runs its own, also from two threads at once",
          "[cuda]") {
  // A plan is finalized with one stream's cuDNN handle and runs only with it, under that handle's
  // lease (conv.cu's top comment): the same problem on a second stream is planned again there, and
  // two threads, each on its own stream, run one shape at once on their own plans. Values against
  // float64 after every round. A shape no other test uses, so that its keys are new here.
  const Case k{2, 3, 7, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1), false};
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c, k.kh, k.kw}, ys{k.n, k.o, out_h(k), out_w(k)};
  const DType dt = DType::f32;
  const Tensor x = random_tensor(xs, dt, 1401, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor w = random_tensor(ws, dt, 1402, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor gy = random_tensor(ys, dt, 1403, -1.0, 1.0, Layout::Contiguous, kGpu);
  const std::vector<double> xv = to_f64(x), wv = to_f64(w), gv = to_f64(gy);
  const Expect ey = ref_forward(k, xv, wv, {}, dt), ex = ref_backward_input(k, gv, wv, dt),
               ew = ref_backward_weight(k, gv, xv, dt);
  // The three directions on the current stream, copied to the host on it.
  auto three_calls = [&] {
    std::array<Tensor, 3> out{kernels::conv2d(x, w, Tensor(), k.p),
                              kernels::conv2d_backward_input(gy, w, xs, MemoryFormat::contiguous, k.p),
                              kernels::conv2d_backward_weight(gy, x, ws, k.p)};
    for (Tensor& t : out) t = t.to(Device::cpu());
    return out;
  };
  auto check_three = [&](const std::array<Tensor, 3>& r) {
    check_expect(r[0], ey);
    check_expect(r[1], ex);
    check_expect(r[2], ew);
  };
  const kernels::cuda::ConvPlanCounts before = kernels::cuda::conv_plan_counts();
  check_three(three_calls());
  const kernels::cuda::ConvPlanCounts first = kernels::cuda::conv_plan_counts();
  CHECK(first.searches - before.searches == 3);
  // Two pool streams, neither the current one; the inputs, made on the current stream, are ready first.
  const Stream main = current_stream(kGpu);
  std::array<Stream, 2> side{new_stream(kGpu), new_stream(kGpu)};
  while (side[0] == main) side[0] = new_stream(kGpu);
  while (side[1] == main || side[1] == side[0]) side[1] = new_stream(kGpu);
  synchronize(kGpu);
  {
    StreamGuard on(side[0]);
    check_three(three_calls());
    CHECK(kernels::cuda::conv_plan_counts().searches - first.searches == 3);  // its own plans
    check_three(three_calls());
    CHECK(kernels::cuda::conv_plan_counts().searches - first.searches == 3);  // and reused
  }
  // Two threads at once: side[0]'s plans exist, side[1]'s are made while side[0]'s run.
  std::array<std::vector<std::array<Tensor, 3>>, 2> results;
  std::array<std::string, 2> errors;
  std::array<std::thread, 2> threads;
  for (size_t t = 0; t < 2; ++t)
    threads[t] = std::thread([&, t] {
      try {
        StreamGuard on(side[t]);
        for (int round = 0; round < 8; ++round) results[t].push_back(three_calls());
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < 2; ++t) {
    INFO("thread " << t);
    CHECK(errors[t].empty());
    REQUIRE(results[t].size() == 8);
    for (const auto& r : results[t]) check_three(r);
  }
  CHECK(kernels::cuda::conv_plan_counts().searches - first.searches == 6);
}

TEST_CASE("cuda conv2d: the algorithm search's workspace does not stay in the caching allocator", "[cuda]") {
  // The first call on a shape searches cuDNN's algorithms with the most workspace any of them
  // asks for (the FFT ones want hundreds of MiB on this shape). That memory comes from the driver
  // and goes back: taken from the caching allocator, it stayed reserved for the rest of the run
  // (ResNet-18 reserved 4036 MiB for 1057 MiB of live blocks). Yardstick: the same three calls once
  // the algorithms are cached. The first may add only the search's scratch outputs (one operand's
  // size each, alive one at a time) and block rounding.
  CachingAllocator& alloc = cuda_caching_allocator(kGpu.index());
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const Tensor x = random_tensor({32, 128, 64, 64}, DType::f32, 31, -1.0, 1.0, Layout::Contiguous, kGpu);
  const Tensor w = random_tensor({128, 128, 3, 3}, DType::f32, 32, -1.0, 1.0, Layout::Contiguous, kGpu);
  auto peak_added = [&] {
    synchronize(kGpu);
    const size_t base = alloc.stats().allocated;
    alloc.reset_peak();
    {
      const Tensor y = kernels::conv2d(x, w, Tensor(), p);
      const Tensor gx = kernels::conv2d_backward_input(y, w, x.sizes(), MemoryFormat::contiguous, p);
      const Tensor gw = kernels::conv2d_backward_weight(y, x, w.sizes(), p);
      synchronize(kGpu);
    }
    return alloc.stats().peak_allocated - base;
  };
  const size_t searched = peak_added();
  const size_t cached = peak_added();
  const size_t scratch = static_cast<size_t>(x.numel()) * 4 + (size_t(2) << 20);
  INFO("peak bytes added by the calls: searching " << searched << ", algorithms cached " << cached);
  CHECK(searched <= cached + scratch);
}

TEST_CASE("cuda conv2d on operands one element into their buffers after the aligned shapes were cached", "[cuda]") {
  // The first calls time and cache algorithms on allocator-aligned operands, which cuDNN may serve
  // with 16-byte vector loads. The same shapes then come as views one element into a buffer (x
  // for the forward and the filter gradient, grad_out for the input gradient): they must get an
  // algorithm valid at that alignment (conv.cu keys its cache by alignment), not fail or misread.
  // 16 -> 16 channels (multiples of 8): shapes tensor-core algorithms take in f16 / bf16.
  const Case k{2, 16, 9, 11, 16, 3, 3, params(1, 1, 1, 1, 1, 1, 1), false};
  uint64_t seed = 900;
  for (DType dt : kFloatTypes) {
    INFO(dtype_name(dt));
    const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c / k.p.groups, k.kh, k.kw};
    const Shape ys{k.n, k.o, out_h(k), out_w(k)};
    const Tensor w = random_tensor(ws, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor x = random_tensor(xs, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    const Tensor gy = random_tensor(ys, dt, ++seed, -1.0, 1.0, Layout::Contiguous, kGpu);
    (void)kernels::conv2d(x, w, Tensor(), k.p);
    (void)kernels::conv2d_backward_input(gy, w, xs, MemoryFormat::contiguous, k.p);
    (void)kernels::conv2d_backward_weight(gy, x, ws, k.p);
    const Tensor xo = offset_copy(x), gyo = offset_copy(gy);
    REQUIRE(reinterpret_cast<uintptr_t>(xo.data_ptr()) % 16 != 0);
    REQUIRE(reinterpret_cast<uintptr_t>(gyo.data_ptr()) % 16 != 0);
    const std::vector<double> xv = to_f64(xo), wv = to_f64(w), gv = to_f64(gyo);
    check_expect(kernels::conv2d(xo, w, Tensor(), k.p), ref_forward(k, xv, wv, {}, dt));
    check_expect(kernels::conv2d_backward_input(gyo, w, xs, MemoryFormat::contiguous, k.p),
                 ref_backward_input(k, gv, wv, dt));
    check_expect(kernels::conv2d_backward_weight(gyo, xo, ws, k.p), ref_backward_weight(k, gv, xv, dt));
  }
}

TEST_CASE("cuda conv2d with an empty batch or zero input channels", "[cuda]") {
  const Conv2dParams p = params(1, 1, 1, 1, 1, 1, 1);
  const Tensor x0 = zeros({0, 3, 5, 5}, {.dtype = DType::f32, .device = kGpu});
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 3, -1.0, 1.0, Layout::Contiguous, kGpu);
  CHECK(kernels::conv2d(x0, w, Tensor(), p).sizes() == Shape{0, 4, 5, 5});
  const Tensor gw =
      kernels::conv2d_backward_weight(zeros({0, 4, 5, 5}, {.dtype = DType::f32, .device = kGpu}), x0, {4, 3, 3, 3}, p);
  check_close(gw, std::vector<double>(static_cast<size_t>(gw.numel()), 0.0), 0.0, 0.0);
  // C = 0 input channels: every output is the bias alone.
  const Tensor xc = zeros({2, 0, 5, 5}, {.dtype = DType::f32, .device = kGpu});
  const Tensor wc = zeros({3, 0, 3, 3}, {.dtype = DType::f32, .device = kGpu});
  const Tensor b = from_vector({0.5, -1.0, 2.0}, {3}, {.dtype = DType::f32, .device = kGpu});
  const Tensor y = kernels::conv2d(xc, wc, b, p);
  std::vector<double> expect;
  for (int n = 0; n < 2; ++n)
    for (double bv : {0.5, -1.0, 2.0}) expect.insert(expect.end(), 25, bv);
  check_close(y, expect, 0.0, 0.0);
}

TEST_CASE("cuda conv2d splits a batch of 2^31+ elements into cuDNN-sized chunks", "[cuda][slow]") {
  // x (2049, 1, 1024, 1024) f64 has 2^31 + 2^20 elements: cuDNN sees two chunks (2047 and 2
  // samples). Sample n holds the constant n + 1 and grad_out is all ones, so the filter gradient
  // is a sum of integers below 2^53, exact in f64 in any order, and every output of sample n is
  // (n + 1) times a sum of at most 9 taps. This checks the chunk offsets, the second chunk's own
  // algorithm and the beta = 1 accumulation of the filter gradient across chunks.
  const int64_t N = 2049, H = 1024, W = 1024;
  const Conv2dParams p = params(1, 1, 1, 1, 1, 1, 1);
  const std::vector<double> wv = random_values(9, 31, -1.0, 1.0);
  const Tensor w = from_vector(wv, {1, 1, 3, 3}, {.dtype = DType::f64, .device = kGpu});
  /// Sum of the kernel taps that land inside the image for output (or input) position (h, w).
  auto tap_sum = [&](int64_t h, int64_t ww, bool flipped) {
    double s = 0.0, a = 0.0;
    for (int64_t ki = 0; ki < 3; ++ki)
      for (int64_t kj = 0; kj < 3; ++kj) {
        const int64_t ih = flipped ? h + 1 - ki : h - 1 + ki, iw = flipped ? ww + 1 - kj : ww - 1 + kj;
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
        s += wv[static_cast<size_t>(ki * 3 + kj)], a += std::fabs(wv[static_cast<size_t>(ki * 3 + kj)]);
      }
    return std::pair<double, double>(s, a);
  };
  auto check_sample = [&](const Tensor& t, int64_t n, bool flipped, double scale) {
    INFO("sample " << n);
    const Tensor s = t.narrow(0, n, 1);
    Expect e;
    e.val.resize(static_cast<size_t>(H * W));
    e.bound.resize(e.val.size());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ww = 0; ww < W; ++ww) {
        const auto [sum, abs] = tap_sum(h, ww, flipped);
        e.val[static_cast<size_t>(h * W + ww)] = scale * sum;
        e.bound[static_cast<size_t>(h * W + ww)] = loose_tol_sum(DType::f64, 9) * scale * abs;
      }
    check_expect(s, e);
  };
  {
    const Tensor xv = (arange(1.0, static_cast<double>(N) + 1.0, 1.0, {.dtype = DType::f64, .device = kGpu}));
    Tensor x = empty({N, 1, H, W}, {.dtype = DType::f64, .device = kGpu});
    x.copy_(xv.view({N, 1, 1, 1}).expand({N, 1, H, W}));
    const Tensor y = kernels::conv2d(x, w, Tensor(), p);
    for (int64_t n : {int64_t(0), int64_t(1000), N - 3, N - 2, N - 1})
      check_sample(y, n, false, static_cast<double>(n + 1));
    // Filter gradient: grad_out = 1, so gw[ki, kj] = sum_n (n + 1) * (number of valid positions).
    const Tensor gy = ones({N, 1, H, W}, {.dtype = DType::f64, .device = kGpu});
    const Tensor gw = kernels::conv2d_backward_weight(gy, x, {1, 1, 3, 3}, p);
    const double total = static_cast<double>(N) * static_cast<double>(N + 1) / 2.0;
    Expect e;
    for (int64_t ki = 0; ki < 3; ++ki)
      for (int64_t kj = 0; kj < 3; ++kj) {
        const double cnt = static_cast<double>((H - (ki == 1 ? 0 : 1)) * (W - (kj == 1 ? 0 : 1)));
        e.val.push_back(total * cnt);
        e.bound.push_back(loose_tol_sum(DType::f64, N * H * W) * total * cnt);
      }
    check_expect(gw, e);
  }
  {
    // Input gradient of grad_out = 1: gx[n, h, w] = sum of the taps whose output exists.
    const Tensor gy = ones({N, 1, H, W}, {.dtype = DType::f64, .device = kGpu});
    const Tensor gx = kernels::conv2d_backward_input(gy, w, {N, 1, H, W}, MemoryFormat::contiguous, p);
    for (int64_t n : {int64_t(0), N - 2, N - 1}) check_sample(gx, n, true, 1.0);
  }
}
