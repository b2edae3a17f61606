// Pooling on channels-last tensors, on every device (tests/support/device_test.h): the NHWC kernels
// scan each window in the order the NCHW kernels do, so a channels-last input gives the row-major
// result bit for bit (values, arg-max indices, gradients), in the channels-last layout, and the
// kernels receive channels-last operands (no transposes on the way in or out).
#include <cmath>
#include <vector>

#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/pool.h>
#include "support/device_test.h"
#include "support/reference.h"
#include "support/table_override.h"

using namespace ember;
using namespace ember::testing;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::channels_last;

/// A channels-last tensor of random values (C = 5 and H * W > 1: the two layouts differ).
Tensor cl_input(const Shape& s, DType dt, uint64_t seed) {
  return random_tensor(s, dt, seed, -1.0, 1.0, Layout::Contiguous, test_device()).contiguous(kCL);
}

kernels::Pool2dParams params(int64_t k, int64_t s, int64_t pad, bool ceil, bool include_pad = true) {
  return {.kernel_h = k,
          .kernel_w = k + 1,
          .stride_h = s,
          .stride_w = s,
          .pad_h = pad,
          .pad_w = pad,
          .ceil_mode = ceil,
          .count_include_pad = include_pad};
}

/// x copied into row-major strides (not x.contiguous(): an (N, C, 1, 1) tensor with channels-last
/// strides counts as contiguous, and would be its own reference).
Tensor row_major(const Tensor& x) { return kernels::copy_in_layout(x, MemoryFormat::contiguous); }

/// got is channels-last and holds the values of want (a row-major result): equal, element by element.
void check_same(const Tensor& got, const Tensor& want) {
  CHECK(got.suggest_memory_format() == kCL);  // channels-last strides exactly (also for an (N, C, 1, 1) result)
  CHECK(to_f64(got) == to_f64(want));
}

const Shape kShape = {2, 5, 7, 9};
const std::vector<DType> kDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
// 2x2 stride 2 (the NCHW fast path), overlapping 3x4 stride 1 padded, 3x4 stride 2 with ceil_mode.
const std::vector<kernels::Pool2dParams> kWindows = {
    {}, params(3, 1, 1, false), params(3, 2, 1, true), params(2, 1, 1, false, false)};

}  // namespace

DEVICE_TEST_CASE("pool layout: max pooling of channels_last equals row-major, indices and gradients included",
                 "[pool][memory_format]") {
  for (DType dt : kDtypes) {
    for (size_t w = 0; w < kWindows.size(); ++w) {
      INFO(dtype_name(dt) << ", window " << w);
      const kernels::Pool2dParams& p = kWindows[w];
      const Tensor x = cl_input(kShape, dt, 100 + w);
      const kernels::MaxPoolResult r = kernels::max_pool2d(x, p);
      const kernels::MaxPoolResult rr = kernels::max_pool2d(row_major(x), p);
      check_same(r.out, rr.out);
      check_same(r.indices, rr.indices);

      const Tensor gy = cl_input(r.out.sizes(), dt, 200 + w);
      const Tensor gx = kernels::max_pool2d_backward(gy, r.indices, x.sizes(), kCL);
      const Tensor gxr = kernels::max_pool2d_backward(row_major(gy), rr.indices, x.sizes(), MemoryFormat::contiguous);
      CHECK(gx.suggest_memory_format() == kCL);
      // Overlapping windows may pick one position several times; the CUDA kernel adds those with
      // atomics in the storage dtype, in no fixed order: each such sum may differ by its roundings.
      const std::vector<double> a = to_f64(gx), b = to_f64(gxr);
      const std::vector<double> mag = to_f64(kernels::max_pool2d_backward(
          kernels::unary(kernels::UnaryOp::Abs, gy), rr.indices, x.sizes(), MemoryFormat::contiguous));
      const double u = loose_tol(dt), windows = static_cast<double>(p.kernel_h * (p.kernel_w));
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::fabs(a[i] - b[i]) <= 2 * windows * u * mag[i]))
          FAIL_CHECK("grad element " << i << ": " << a[i] << " vs " << b[i]);
    }
  }
}

DEVICE_TEST_CASE("pool layout: average and adaptive average of channels_last equal row-major, forward and backward",
                 "[pool][memory_format]") {
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    for (size_t w = 0; w < kWindows.size(); ++w) {
      INFO("window " << w);
      const Tensor x = cl_input(kShape, dt, 300 + w);
      const Tensor y = kernels::avg_pool2d(x, kWindows[w]);
      check_same(y, kernels::avg_pool2d(row_major(x), kWindows[w]));
      const Tensor gy = cl_input(y.sizes(), dt, 400 + w);
      check_same(kernels::avg_pool2d_backward(gy, x.sizes(), kCL, kWindows[w]),
                 kernels::avg_pool2d_backward(row_major(gy), x.sizes(), MemoryFormat::contiguous, kWindows[w]));
    }
    // Down to one value per channel (the ResNets' head), to uneven windows, and up (windows overlap).
    for (const auto& [ho, wo] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4}, {10, 11}}) {
      INFO("adaptive to " << ho << " x " << wo);
      const Tensor x = cl_input(kShape, dt, 500 + ho);
      const Tensor y = kernels::adaptive_avg_pool2d(x, ho, wo);
      check_same(y, kernels::adaptive_avg_pool2d(row_major(x), ho, wo));
      const Tensor gy = cl_input(y.sizes(), dt, 600 + ho);
      check_same(kernels::adaptive_avg_pool2d_backward(gy, x.sizes(), kCL),
                 kernels::adaptive_avg_pool2d_backward(row_major(gy), x.sizes(), MemoryFormat::contiguous));
    }
  }
}

DEVICE_TEST_CASE("pool layout: a 1x1 channels_last input pooled up to 2x2 stays channels_last, values as row-major",
                 "[pool][memory_format]") {
  // (2, 5, 1, 1) is dense in both layouts; made with channels-last strides it counts as channels-last,
  // and its (2, 5, 2, 2) output is then channels-last only.
  const Tensor x = empty({2, 5, 1, 1}, {.dtype = DType::f32, .device = test_device()}, kCL);
  kernels::copy(x, random_tensor({2, 5, 1, 1}, DType::f32, 7, -1.0, 1.0, Layout::Contiguous, test_device()));
  REQUIRE(x.suggest_memory_format() == kCL);
  check_same(kernels::adaptive_avg_pool2d(x, 2, 2), kernels::adaptive_avg_pool2d(row_major(x), 2, 2));
}

DEVICE_TEST_CASE("pool layout: the input gradient takes the forward input's layout, also from an (N, C, 1, 1) gradient",
                 "[pool][memory_format]") {
  // A flatten after global pooling hands back a row-major (N, C, 1, 1) gradient, dense in both
  // layouts: its strides cannot say the gradient should be channels-last; the caller's format does.
  const Tensor gy = random_tensor({2, 5, 1, 1}, DType::f32, 8, -1.0, 1.0, Layout::Contiguous, test_device());
  REQUIRE(gy.suggest_memory_format() == MemoryFormat::contiguous);
  check_same(kernels::adaptive_avg_pool2d_backward(gy, kShape, kCL),
             kernels::adaptive_avg_pool2d_backward(gy, kShape, MemoryFormat::contiguous));
  const kernels::Pool2dParams whole{.kernel_h = 7, .kernel_w = 9, .stride_h = 1, .stride_w = 1};
  check_same(kernels::avg_pool2d_backward(gy, kShape, kCL, whole),
             kernels::avg_pool2d_backward(gy, kShape, MemoryFormat::contiguous, whole));
  const kernels::MaxPoolResult r = kernels::max_pool2d(cl_input(kShape, DType::f32, 9), whole);
  check_same(kernels::max_pool2d_backward(gy, r.indices, kShape, kCL),
             kernels::max_pool2d_backward(gy, row_major(r.indices), kShape, MemoryFormat::contiguous));
}

namespace {
// A spy in the dispatch table: records the layout of the operands the max-pool kernel receives.
kernels::MaxPoolFn* g_real_max_pool = nullptr;
bool g_saw_channels_last = false;
void spy_max_pool(const Tensor& x, const kernels::Pool2dParams& p, const Tensor& out, const Tensor& indices,
                  MemoryFormat f) {
  g_saw_channels_last = f == kCL && x.is_contiguous(kCL) && !x.is_contiguous() && out.is_contiguous(kCL) &&
                        !out.is_contiguous() && indices.is_contiguous(kCL);
  g_real_max_pool(x, p, out, indices, f);
}
}  // namespace

DEVICE_TEST_CASE("pool layout: the kernels get the channels_last operands and write the result in place",
                 "[pool][memory_format]") {
  const TableOverride spy(kernels::max_pool2d_table, test_device().type(), &spy_max_pool);
  g_real_max_pool = spy.original();
  g_saw_channels_last = false;
  const kernels::MaxPoolResult r = kernels::max_pool2d(cl_input(kShape, DType::f32, 9), {});
  CHECK(g_saw_channels_last);
  CHECK(r.out.is_contiguous(kCL));
}
