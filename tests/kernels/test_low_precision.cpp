// f16 and bf16 on the CPU (issue 14): every op the CNN models use, run in the low dtype from
// inputs exactly representable in it, against its f32 result (cases and tolerances in
// tests/support/low_precision_cases.h: k * unit roundoff * |f32| with k = 2 for a result computed
// in f32 and rounded once, k = 0 for exact ones); casts (round to nearest even, inf/NaN, overflow);
// the optimizers' dtype rules.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/optim.h>
#include "support/low_precision_cases.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using namespace ember::testing::lp;

TEST_CASE("low precision: every CNN op in f16 and bf16 matches its f32 result rounded once", "[low_precision][cpu]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const LpCase& c : lp_cases()) {
      INFO(c.name << " in " << dtype_name(dt) << " (k = " << c.k << ")");
      const std::vector<Tensor> low = c.run(LpCtx{.dt = dt, .rep = dt});
      const std::vector<Tensor> ref = c.run(LpCtx{.dt = DType::f32, .rep = dt});
      REQUIRE(low.size() == ref.size());
      for (size_t i = 0; i < low.size(); ++i) {
        INFO("output " << i);
        const bool floating_ref = ref[i].dtype() == DType::f32;
        // Floating outputs come back in the low dtype (or f32 where the op's contract says so:
        // cross_entropy rows, BatchNorm statistics and parameter gradients).
        if (floating_ref) CHECK((low[i].dtype() == dt || low[i].dtype() == DType::f32));
        else CHECK(low[i].dtype() == ref[i].dtype());
        check_lp(low[i], ref[i], dt, floating_ref ? c.k : 0.0);
      }
    }
  }
}

namespace {
struct CastCase {
  float in;
  double want;
};
/// Casts every `in` to dt, expects `want`, and expects `want` back when widening to f32 (exact);
/// NaN must stay NaN both ways.
void check_casts(DType dt, const std::vector<CastCase>& cases) {
  std::vector<float> in{std::nanf("")};
  std::vector<double> want{std::nan("")};
  for (const CastCase& c : cases) in.push_back(c.in), want.push_back(c.want);
  const Tensor low = kernels::cast(from_vector(in, {static_cast<int64_t>(in.size())}), dt);
  CHECK(low.dtype() == dt);
  check_lp(low, from_vector(want, {static_cast<int64_t>(want.size())}, {.dtype = DType::f64}), dt, 0.0);
  check_lp(kernels::cast(low, DType::f32),
           from_vector(want, {static_cast<int64_t>(want.size())}, {.dtype = DType::f64}), dt, 0.0);
}
}  // namespace

// Ties between two neighbours go to the even one; values above a tie go up; past the largest
// finite value (by half an ulp or more) is infinity.
TEST_CASE("low precision: f32 to f16 and bf16 rounds to nearest even, keeps inf and NaN", "[low_precision][cpu]") {
  const double inf = std::numeric_limits<double>::infinity();
  const float finf = std::numeric_limits<float>::infinity();
  check_casts(DType::f16, {{1.0f + 0x1p-11f, 1.0},
                           {1.0f + 3 * 0x1p-11f, 1.0 + 0x1p-9},
                           {1.0f + 0x1p-11f + 0x1p-20f, 1.0 + 0x1p-10},
                           {-2.5f, -2.5},
                           {0x1p-24f, 0x1p-24},  // the smallest subnormal
                           {65504.0f, 65504.0},
                           {65519.0f, 65504.0},
                           {65520.0f, inf},  // halfway to 2^16: overflows
                           {70000.0f, inf},
                           {-1e6f, -inf},
                           {finf, inf},
                           {-finf, -inf}});
  check_casts(DType::bf16, {{1.0f + 0x1p-8f, 1.0},
                            {1.0f + 3 * 0x1p-8f, 1.0 + 0x1p-6},
                            {1.0f + 0x1p-8f + 0x1p-20f, 1.0 + 0x1p-7},
                            {-2.5f, -2.5},
                            {0x1p-130f, 0x1p-130},
                            {3.0e38f, round_to(DType::bf16, 3.0e38)},
                            {std::numeric_limits<float>::max(), inf},  // rounds up past the largest bf16
                            {finf, inf},
                            {-finf, -inf}});
}

TEST_CASE("low precision: representable values survive f32 -> f16/bf16 -> f32 exactly", "[low_precision][cpu]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = LpCtx{}.in({257}, 7);
    const Tensor there = kernels::cast(x, dt);
    CHECK(to_f64(kernels::cast(there, DType::f32)) == to_f64(x));
    const Tensor y = zeros({257}, {.dtype = dt});
    kernels::copy(y, x);
    CHECK(to_f64(y) == to_f64(x));
  }
}

// By design (kernels/optim.h) parameters and optimizer state are f32 or f64; f16/bf16 enter the
// optimizers as gradients of f32 master weights, which must step exactly as the f32 gradient.
TEST_CASE("low precision: optimizers take f16/bf16 gradients of f32 parameters, refuse f16/bf16 parameters",
          "[low_precision][cpu]") {
  using namespace kernels;
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const LpCtx c;
    const Tensor g32 = c.in({3, 5}, 1);
    const Tensor g_low = cast(g32, dt);
    const SgdHyper sh{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    const AdamHyper ah{.lr = 0.01, .weight_decay = 0.01, .decoupled = true};
    const auto sgd = [&](const Tensor& g) {
      SgdSlot s{c.in({3, 5}, 2), g, zeros({3, 5}), true};
      sgd_step({s}, sh);
      return s.param;
    };
    const auto adam = [&](const Tensor& g) {
      AdamSlot s{c.in({3, 5}, 2), g, zeros({3, 5}), zeros({3, 5}), 1};
      adam_step({s}, ah);
      return s.param;
    };
    CHECK(to_f64(sgd(g_low)) == to_f64(sgd(g32)));
    CHECK(to_f64(adam(g_low)) == to_f64(adam(g32)));
    // The global norm of low-precision gradients accumulates in f32.
    const Tensor n = global_norm({g_low});
    CHECK(n.dtype() == DType::f32);
    check_lp(n, global_norm({g32}), DType::f32, 4.0);

    const Tensor p_low = cast(c.in({3, 5}, 2), dt);
    CHECK_THROWS_WITH(sgd_step({SgdSlot{p_low, g_low, {}, false}}, SgdHyper{.lr = 0.1}),
                      Catch::Contains("parameters must be f32 or f64") && Catch::Contains(dtype_name(dt)));
    CHECK_THROWS_WITH(adam_step({AdamSlot{p_low, g_low, zeros({3, 5}, {.dtype = dt}), zeros({3, 5}, {.dtype = dt})}},
                                AdamHyper{.lr = 0.1}),
                      Catch::Contains("parameters must be f32 or f64"));
  }
}
