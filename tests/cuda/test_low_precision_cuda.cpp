// f16 and bf16 on the GPU (issue 14): every op the CNN models use (the cases of
// tests/support/low_precision_cases.h) on cuda:0 against its CPU twin in the same dtype, from the
// same exactly representable inputs. Both devices compute in f32 and round once, so two results
// may fall on either side of a rounding boundary: one ulp of the low dtype, at most 2 unit
// roundoffs relative (k = 2), plus the f32 floor of check_lp; exact cases (k = 0) stay exact.
// Outputs a case lists in cuda_second_rounding (conv2d with a bias: cuDNN may round the bias-free
// sum first) get the two-rounding bound derived at the top of low_precision_cases.h.
// Casts of special values (ties, overflow, inf, NaN) must agree bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <ember/core/device.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/optim.h>
#include "support/low_precision_cases.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using namespace ember::testing::lp;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST_CASE("cuda low precision: every CNN op in f16 and bf16 matches the CPU twin", "[cuda][low_precision]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const LpCase& c : lp_cases()) {
      INFO(c.name << " in " << dtype_name(dt));
      const std::vector<Tensor> gpu = c.run(LpCtx{.dt = dt, .rep = dt, .dev = kGpu});
      const std::vector<Tensor> cpu = c.run(LpCtx{.dt = dt, .rep = dt, .dev = Device::cpu()});
      REQUIRE(gpu.size() == cpu.size());
      for (size_t i = 0; i < gpu.size(); ++i) {
        INFO("output " << i);
        CHECK(gpu[i].device() == kGpu);
        CHECK(gpu[i].dtype() == cpu[i].dtype());
        const bool floating = is_floating(cpu[i].dtype());
        double k = floating && c.k != 0.0 ? 2.0 : 0.0, extra = 0.0;
        for (const SecondRounding& s : c.cuda_second_rounding) {
          if (s.output != i) continue;
          const double u = unit_roundoff(dt);
          k = (3.0 + u) / (1.0 - u);
          extra = u * (1.0 + u) * s.addend_bound;
        }
        check_lp(gpu[i].to(Device::cpu()), cpu[i], dt, k, extra);
      }
    }
  }
}

TEST_CASE("cuda low precision: casts to and from f16 and bf16 agree with the CPU bit for bit",
          "[cuda][low_precision]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in{1.0f + 0x1p-11f,
                              1.0f + 3 * 0x1p-11f,
                              1.0f + 0x1p-8f,
                              1.0f + 3 * 0x1p-8f,
                              -2.5f,
                              0x1p-24f,
                              0x1p-130f,
                              65504.0f,
                              65520.0f,
                              70000.0f,
                              3.0e38f,
                              std::numeric_limits<float>::max(),
                              inf,
                              -inf,
                              std::nanf("")};
  const Tensor x = from_vector(in, {static_cast<int64_t>(in.size())});
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor on_gpu = kernels::cast(x.to(kGpu), dt);
    const Tensor on_cpu = kernels::cast(x, dt);
    check_lp(on_gpu.to(Device::cpu()), on_cpu, dt, 0.0);
    check_lp(kernels::cast(on_gpu, DType::f32).to(Device::cpu()), kernels::cast(on_cpu, DType::f32), dt, 0.0);
  }
}

TEST_CASE("cuda low precision: optimizers step f32 parameters with f16/bf16 gradients as the CPU does",
          "[cuda][low_precision]") {
  using namespace kernels;
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const auto sgd = [&](Device dev) {
      const LpCtx c{.dev = dev};
      SgdSlot s{c.in({3, 5}, 2), cast(c.in({3, 5}, 1), dt), zeros({3, 5}, {.device = dev}), true};
      sgd_step({s}, SgdHyper{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      return s.param.to(Device::cpu());
    };
    const auto adam = [&](Device dev) {
      const LpCtx c{.dev = dev};
      AdamSlot s{c.in({3, 5}, 2), cast(c.in({3, 5}, 1), dt), zeros({3, 5}, {.device = dev}),
                 zeros({3, 5}, {.device = dev}), 1};
      adam_step({s}, AdamHyper{.lr = 0.01, .weight_decay = 0.01, .decoupled = true});
      return s.param.to(Device::cpu());
    };
    // f32 math on both devices from identical inputs: a few f32 roundings apart at most.
    check_lp(sgd(kGpu), sgd(Device::cpu()), DType::f32, 4.0);
    check_lp(adam(kGpu), adam(Device::cpu()), DType::f32, 16.0);
  }
}
