// amp::GradScaler on a GPU: the fused unscale pass (kernels/cuda/amp.cu) against its CPU twin bit
// for bit, over more tensors than one launch takes (64), mixed dtypes (f32, f16, bf16, f64), odd
// sizes, a tensor of many tiles, strided views, and a bad value in the first, a middle and the last
// tensor; no host synchronisation inside unscale_; and the skip scenario of the CPU test.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include <ember/core/stream.h>
#include <ember/kernels/amp.h>
#include <ember/kernels/factory.h>
#include <ember/optim/grad_scaler.h>
#include <ember/optim/sgd.h>
#include "cuda/expect.h"
#include "optim/grad_scaler_check.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

/// 70 tensors: shapes cycling through odd sizes, dtypes through f32/f16/bf16/f64, every fifth
/// strided, plus one of 1000003 elements. Values U[-1, 1) on `device`.
std::vector<Tensor> many_tensors(Device device) {
  const std::vector<Shape> shapes = {{1}, {3}, {8193}, {8192}, {17, 31}, {5, 1, 7}, {2, 2}, {129}};
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  std::vector<Tensor> out;
  for (size_t i = 0; i < 70; ++i) {
    const Layout layout = i % 5 == 4 ? Layout::Strided : Layout::Contiguous;
    out.push_back(random_tensor(shapes[i % shapes.size()], dtypes[i % dtypes.size()], 50 + i, -1, 1, layout, device));
  }
  out.push_back(random_tensor({1000003}, DType::f32, 7, -1, 1, Layout::Contiguous, device));
  return out;
}

}  // namespace

TEST_CASE("CUDA unscale pass matches the CPU twin bit for bit, 71 tensors, mixed dtypes", "[cuda][grad_scaler]") {
  for (const double inv_scale : {1.0 / 65536, 0.5, 3.0 / 7}) {
    for (const long bad_at : {-1L, 0L, 33L, 70L}) {
      INFO("inv_scale " << inv_scale << " bad value in tensor " << bad_at);
      std::vector<Tensor> cpu = many_tensors(Device::cpu()), gpu = many_tensors(kGpu);
      if (bad_at >= 0) {
        for (auto* list : {&cpu, &gpu})
          (*list)[size_t(bad_at)].flatten().narrow(0, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
      }
      Tensor flag_cpu = zeros({1}), flag_gpu = zeros({1}, {.device = kGpu});
      kernels::non_finite_check_and_unscale_(cpu, flag_cpu, inv_scale);
      kernels::non_finite_check_and_unscale_(gpu, flag_gpu, inv_scale);
      CHECK(flag_gpu.to(Device::cpu()).item<float>() == flag_cpu.item<float>());
      CHECK(flag_cpu.item<float>() == (bad_at >= 0 ? 1 : 0));
      for (size_t i = 0; i < cpu.size(); ++i) {
        INFO("tensor " << i);
        check_same_bits(gpu[i], cpu[i], NanBits::AnyPayload);  // the planted NaN went through a multiply
      }
    }
  }
}

TEST_CASE("CUDA GradScaler: unscale_ does not wait for the GPU", "[cuda][grad_scaler]") {
  Tensor a = zeros({4097}, {.device = kGpu}).requires_grad_();
  Tensor b = zeros({3}, {.dtype = DType::f64, .device = kGpu}).requires_grad_();
  a.set_grad(ones({4097}, {.device = kGpu}));
  b.set_grad(ones({3}, {.dtype = DType::f64, .device = kGpu}));
  optim::SGD opt({a, b}, {.lr = 1});
  amp::GradScaler scaler({.init_scale = 4});
  const uint64_t syncs = host_synchronizations();
  scaler.unscale_(opt);
  CHECK(host_synchronizations() == syncs);
  CHECK(scaler.step(opt));  // reads the flag here
  CHECK(a.to_vector<double>() == std::vector<double>(4097, -0.25));
  CHECK(b.to_vector<double>() == std::vector<double>(3, -0.25));
}

TEST_CASE("CUDA GradScaler: an inf or a NaN in one gradient skips the step and halves the scale",
          "[cuda][grad_scaler]") {
  check_skip_on(kGpu, std::numeric_limits<double>::infinity());
  check_skip_on(kGpu, std::numeric_limits<double>::quiet_NaN());
}
