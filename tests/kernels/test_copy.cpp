// copy / fill / cast against conversions computed in the test from float64 values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                            DType::i32, DType::i64, DType::u8,  DType::boolean};

// The documented cast rules, written independently of kernels/convert.h.
double ref_convert(DType src, DType dst, double v) {
  if (dst == DType::boolean) return v != 0.0 ? 1.0 : 0.0;
  if (!is_floating(dst)) {
    const int64_t i = static_cast<int64_t>(is_floating(src) ? std::trunc(v) : v);
    if (dst == DType::u8) return static_cast<double>(i & 0xff);
    if (dst == DType::i32) return static_cast<double>(static_cast<int32_t>(i));
    return static_cast<double>(i);
  }
  return round_to(dst, v);
}

std::vector<double> ref_convert_all(DType src, DType dst, const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = ref_convert(src, dst, v[i]);
  return out;
}

// A "CUDA" tensor whose storage is really host memory: enough to exercise device checks that run
// before any kernel touches the data.
Tensor fake_cuda_tensor(const Shape& sizes) {
  static std::vector<float> buf(4096);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(DataPtr(buf.data(), nullptr, nullptr), buf.size() * sizeof(float), Device::cuda(0));
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  return Tensor(impl);
}

}  // namespace

TEST_CASE("copy: every dtype pair, contiguous and strided on both sides", "[cpu]") {
  const Shape shape{5, 7};
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  uint64_t seed = 1;
  for (DType sd : kAllDTypes) {
    for (DType dd : kAllDTypes) {
      for (Layout sl : layouts) {
        for (Layout dl : {Layout::Contiguous, Layout::Transposed}) {
          INFO(dtype_name(sd) << " -> " << dtype_name(dd) << " src layout " << int(sl) << " dst layout " << int(dl));
          // Integers in [-100, 100) exercise truncation, negative wrap to u8 and zero -> false.
          Tensor src = random_tensor(shape, sd, seed++, -100.0, 100.0, sl);
          Tensor dst = random_tensor(shape, dd, seed++, 0.0, 1.0, dl);
          kernels::copy(dst, src);
          check_close(dst, ref_convert_all(sd, dd, to_f64(src)), 0.0);
        }
      }
    }
  }
}

TEST_CASE("copy: large transposed copies cross the parallel grain", "[cpu]") {
  Tensor src = random_tensor({301, 257}, DType::f32, 7, -1.0, 1.0, Layout::Transposed);
  Tensor dst = empty({301, 257}, {.dtype = DType::f64});
  kernels::copy(dst, src);
  check_close(dst, to_f64(src), 0.0);
  Tensor back = random_tensor({301, 257}, DType::bf16, 8, -1.0, 1.0, Layout::Strided);
  kernels::copy(back, dst);
  check_close(back, ref_convert_all(DType::f64, DType::bf16, to_f64(dst)), 0.0);
}

TEST_CASE("copy: batched transposes (tiled path) with ragged tile edges", "[cpu]") {
  // Source transposed into a contiguous destination, and the reverse, over a batch of 3.
  Tensor src = random_tensor({3, 67, 45}, DType::f32, 21, -1.0, 1.0, Layout::Transposed);
  Tensor dst = empty({3, 67, 45}, {.dtype = DType::f16});
  kernels::copy(dst, src);
  check_close(dst, ref_convert_all(DType::f32, DType::f16, to_f64(src)), 0.0);
  Tensor src2 = random_tensor({3, 45, 67}, DType::i64, 22, -1000.0, 1000.0);
  Tensor dst2 = random_tensor({3, 45, 67}, DType::f64, 23, 0.0, 1.0, Layout::Transposed);
  kernels::copy(dst2, src2);
  check_close(dst2, to_f64(src2), 0.0);
  // A transpose inside an expanded (stride-0) batch dim.
  Tensor m = random_tensor({40, 33}, DType::f64, 24);
  Tensor expanded_t = as_strided_raw(m, {2, 33, 40}, {0, 1, 33}, 0);
  Tensor dst3 = empty({2, 33, 40}, {.dtype = DType::f64});
  kernels::copy(dst3, expanded_t);
  check_close(dst3, to_f64(expanded_t), 0.0);
}

TEST_CASE("copy: broadcasting the source", "[cpu]") {
  Tensor src = from_vector({1, 2, 3}, {3, 1}, {.dtype = DType::f32});
  Tensor dst = empty({2, 3, 5}, {.dtype = DType::i32});
  kernels::copy(dst, src);
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 5; ++c) want.push_back(r + 1);
  check_close(dst, want, 0.0);

  Tensor scalar = from_vector({-4.5}, {}, {.dtype = DType::f64});
  Tensor d2 = empty({4}, {.dtype = DType::f32});
  kernels::copy(d2, scalar);
  check_close(d2, {-4.5, -4.5, -4.5, -4.5}, 0.0);

  CHECK_THROWS_WITH(kernels::copy(empty({2, 3}), empty({4})), Catch::Contains("[4]") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(kernels::copy(empty({3}), empty({2, 3})), Catch::Contains("[2, 3]"));
}

TEST_CASE("copy: overlapping source and destination read before writing", "[cpu]") {
  Tensor x = random_tensor({6, 6}, DType::f32, 3);
  const auto orig = to_f64(x);
  kernels::copy(x, as_strided_raw(x, {6, 6}, {1, 6}, 0));  // x = x^T in place
  std::vector<double> want(36);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) want[i * 6 + j] = orig[j * 6 + i];
  check_close(x, want, 0.0);

  // Shift right by one inside one buffer (memmove semantics).
  Tensor v = from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {8}, {.dtype = DType::f32});
  kernels::copy(as_strided_raw(v, {7}, {1}, 1), as_strided_raw(v, {7}, {1}, 0));
  check_close(v, {0, 0, 1, 2, 3, 4, 5, 6}, 0.0);

  kernels::copy(v, v);  // self copy is a no-op
  check_close(v, {0, 0, 1, 2, 3, 4, 5, 6}, 0.0);
}

TEST_CASE("fill: every dtype, strided views leave the gaps alone", "[cpu]") {
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    Tensor t = empty({3, 5}, {.dtype = dt});
    kernels::fill(t, -2.5);
    const double want = dt == DType::boolean ? 1.0 : dt == DType::u8 ? 254.0 : is_floating(dt) ? -2.5 : -2.0;
    check_close(t, std::vector<double>(15, want), 0.0);
  }
  Tensor buf = random_tensor({4, 10}, DType::f64, 11);
  const auto before = to_f64(buf);
  kernels::fill(as_strided_raw(buf, {4, 5}, {10, 2}, 1), 3.0);  // odd columns
  std::vector<double> want = before;
  for (int r = 0; r < 4; ++r)
    for (int c = 1; c < 10; c += 2) want[r * 10 + c] = 3.0;
  check_close(buf, want, 0.0);

  Tensor big = as_strided_raw(zeros({200001}), {100000}, {2}, 1);  // > grain, strided
  kernels::fill(big, 1.5);
  for (double v : to_f64(big)) REQUIRE(v == 1.5);
}

TEST_CASE("cast: new contiguous tensor with the documented rounding rules", "[cpu]") {
  Tensor src =
      from_vector<double>({2.9, -2.9, 0.0, -0.0, NAN, 0.5, 1e10, 65504.0, 1e6, -1.0}, {10}, {.dtype = DType::f64});
  CHECK(to_f64(kernels::cast(src, DType::boolean)) == std::vector<double>{1, 1, 0, 0, 1, 1, 1, 1, 1, 1});
  const auto i32 = to_f64(kernels::cast(as_strided_raw(src, {2}, {1}, 0), DType::i32));
  CHECK(i32 == std::vector<double>{2, -2});
  CHECK(kernels::cast(src, DType::i64).data<int64_t>()[6] == 10000000000LL);
  const auto h = to_f64(kernels::cast(src, DType::f16));
  CHECK(h[7] == 65504.0);
  CHECK(std::isinf(h[8]));
  CHECK(std::isnan(h[4]));
  CHECK(to_f64(kernels::cast(from_vector({-1.0, 300.0}, {2}, {.dtype = DType::i32}), DType::u8)) ==
        std::vector<double>{255, 44});

  Tensor t = random_tensor({4, 3}, DType::f32, 5, -1, 1, Layout::Transposed);
  Tensor same = kernels::cast(t, DType::f32);
  CHECK(same.is_contiguous());
  CHECK_FALSE(same.storage().is_same(t.storage()));
  check_close(same, to_f64(t), 0.0);
}

// C++ leaves a floating value an integer cannot hold undefined (UBSan stopped the test above at its
// NaN); ember converts it as CUDA's instruction does, so both devices agree: NaN to 0, the rest
// saturated to i64's range, narrower integers wrapping from there like in-range values do.
TEST_CASE("cast: NaN and values beyond int64 convert to integers as on CUDA", "[cpu]") {
  const double big = 1e30, two63 = 9223372036854775808.0;
  Tensor src =
      from_vector<double>({NAN, big, -big, INFINITY, -INFINITY, two63, -two63, 1e10, -2.9}, {9}, {.dtype = DType::f64});
  Tensor i64 = kernels::cast(src, DType::i64);
  const int64_t* v = i64.data<int64_t>();
  CHECK(v[0] == 0);
  CHECK(v[1] == INT64_MAX);
  CHECK(v[2] == INT64_MIN);
  CHECK(v[3] == INT64_MAX);
  CHECK(v[4] == INT64_MIN);
  CHECK(v[5] == INT64_MAX);
  CHECK(v[6] == INT64_MIN);
  CHECK(v[7] == 10000000000LL);
  CHECK(v[8] == -2);
  // Narrow targets: through i64, then wrapped (1e10 mod 2^32 as i32; INT64_MAX's low byte as u8).
  CHECK(to_f64(kernels::cast(src, DType::i32)) == std::vector<double>{0, -1, 0, -1, 0, -1, 0, 1410065408, -2});
  CHECK(to_f64(kernels::cast(src, DType::u8)) == std::vector<double>{0, 255, 0, 255, 0, 255, 0, 0, 254});
  CHECK(to_f64(kernels::cast(kernels::cast(src, DType::f32), DType::i64)) == to_f64(i64));
  Tensor filled = empty({3}, {.dtype = DType::i32});
  kernels::fill(filled, NAN);
  CHECK(to_f64(filled) == std::vector<double>{0, 0, 0});
}

TEST_CASE("copy: empty tensors and device errors", "[cpu]") {
  kernels::copy(empty({0, 3}), empty({0, 3}, {.dtype = DType::i64}));
  kernels::fill(empty({0}), 1.0);
  CHECK(kernels::cast(empty({2, 0}), DType::f16).sizes() == Shape{2, 0});
#ifndef EMBER_WITH_CUDA
  // Without CUDA the staging buffer on cuda:0 cannot exist: a clear error, never a silent CPU copy.
  CHECK_THROWS_WITH(kernels::copy(fake_cuda_tensor({4}), from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::f32})),
                    Catch::Contains("no CUDA support"));
#else
  (void)fake_cuda_tensor;
#endif
}
