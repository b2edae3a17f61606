// index_select / index_add (kernels/index.h) on the CPU against references computed here.
#include <catch2/catch.hpp>

#include <vector>

#include <ember/kernels/copy.h>
#include <ember/kernels/index.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

Tensor index_tensor(const std::vector<int64_t>& v, DType dt = DType::i64) {
  return from_vector(std::vector<double>(v.begin(), v.end()), {static_cast<int64_t>(v.size())}, {.dtype = dt});
}

/// (outer, D, inner) split of shape around dim.
void split(const Shape& s, int64_t dim, int64_t& outer, int64_t& D, int64_t& inner) {
  outer = 1, D = s[dim], inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
}

}  // namespace

TEST_CASE("index_select along every dim, any layout and dtype, duplicates", "[cpu][index]") {
  const std::vector<int64_t> idx = {4, 0, 2, 2, 4, 1, 3};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::u8})
    for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      Tensor x = random_tensor({5, 5, 5}, dt, 3, 0.0, 100.0, layout);
      const std::vector<double> xv = to_f64(x);
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        INFO(dtype_name(dt) << " dim " << dim << " strides " << shape_str(x.strides()));
        Tensor y = kernels::index_select(x, dim, index_tensor(idx, dim == 1 ? DType::i32 : DType::i64));
        Shape expect_shape = x.sizes();
        expect_shape[d] = static_cast<int64_t>(idx.size());
        CHECK(y.sizes() == expect_shape);
        CHECK(y.dtype() == dt);
        int64_t outer, D, inner;
        split(x.sizes(), d, outer, D, inner);
        const int64_t K = static_cast<int64_t>(idx.size());
        std::vector<double> ref;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t k = 0; k < K; ++k)
            for (int64_t i = 0; i < inner; ++i) ref.push_back(xv[(o * D + idx[k]) * inner + i]);
        CHECK(to_f64(y) == ref);  // a gather is exact
      }
    }
  // Larger rows (memcpy path with many bytes) and an empty index.
  Tensor big = random_tensor({3, 1000}, DType::f32, 4);
  Tensor sel = kernels::index_select(big, 0, index_tensor({2, 2, 0}));
  const std::vector<double> bv = to_f64(big), sv = to_f64(sel);
  CHECK(std::vector<double>(sv.begin(), sv.begin() + 1000) == std::vector<double>(bv.begin() + 2000, bv.end()));
  CHECK(std::vector<double>(sv.begin() + 2000, sv.end()) == std::vector<double>(bv.begin(), bv.begin() + 1000));
  CHECK(kernels::index_select(big, 1, index_tensor({})).sizes() == Shape{3, 0});
}

TEST_CASE("index_add accumulates duplicates along every dim, strided out", "[cpu][index]") {
  const std::vector<int64_t> idx = {3, 0, 3, 1, 3, 0};
  const int64_t K = static_cast<int64_t>(idx.size());
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i64})
    for (int64_t dim : {0, 1, 2}) {
      const Shape out_shape{4, 4, 4};
      Shape src_shape = out_shape;
      src_shape[dim] = K;
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        INFO(dtype_name(dt) << " dim " << dim << " layout " << static_cast<int>(layout));
        Tensor out = random_tensor(out_shape, dt, 10 + dim, -8, 8, layout);
        Tensor src = random_tensor(src_shape, dt, 20 + dim, -8, 8, Layout::Strided);
        std::vector<double> ref = to_f64(out);
        const std::vector<double> sv = to_f64(src);
        int64_t outer, D, inner;
        split(out_shape, dim, outer, D, inner);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t k = 0; k < K; ++k)
            for (int64_t i = 0; i < inner; ++i) {
              double& dst = ref[(o * D + idx[k]) * inner + i];
              dst = round_to(dt, dst + sv[(o * K + k) * inner + i]);  // one rounding per add, in order
            }
        Tensor keep = out;
        kernels::index_add(out, dim, index_tensor(idx), src);
        CHECK(out.is_same(keep));
        CHECK(out.strides() == keep.strides());
        // Exact: ref rounds each add to dt in the kernel's order (kernels/cpu/index.cpp: f32 and f64
        // add in their own type, bf16 in float then rounds), and a sum of two p-bit values rounded
        // through a format of >= 2p + 2 bits (double for f32, float and double for bf16) rounds as
        // if once (innocuous double rounding, Figueroa 1995). i64 adds are exact.
        check_close(out, ref, 0.0);
      }
    }
  // src of another dtype is cast to out's.
  Tensor out = from_vector({0, 0, 0}, {3}, {.dtype = DType::f64});
  kernels::index_add(out, 0, index_tensor({2, 2, 0}), from_vector<double>({1.5, 2.5, -1}, {3}, {.dtype = DType::f32}));
  CHECK(to_f64(out) == std::vector<double>{-1, 0, 4});
}

TEST_CASE("index_add with a long inner dim and many outer rows (parallel tiles)", "[cpu][index]") {
  const int64_t outer = 7, D = 5, inner = 9001;
  const std::vector<int64_t> idx = {1, 4, 1, 1, 0, 4, 2, 1};
  const int64_t K = static_cast<int64_t>(idx.size());
  Tensor out = random_tensor({outer, D, inner}, DType::f64, 1);
  Tensor src = random_tensor({outer, K, inner}, DType::f64, 2);
  std::vector<double> ref = to_f64(out);
  const std::vector<double> sv = to_f64(src);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < inner; ++i) ref[(o * D + idx[k]) * inner + i] += sv[(o * K + k) * inner + i];
  kernels::index_add(out, 1, index_tensor(idx), src);
  check_close(out, ref, 0.0);  // exact: the same f64 adds in the same order (k ascending) as ref
}

TEST_CASE("index ops: bad indices and shapes are errors naming them", "[cpu][index]") {
  Tensor x = random_tensor({3, 6}, DType::f32, 1);
  CHECK_THROWS_WITH(kernels::index_select(x, 1, index_tensor({0, 6, 1})),
                    Catch::Contains("index 6") && Catch::Contains("position 1") && Catch::Contains("[0, 6)") &&
                        Catch::Contains("[3, 6]"));
  CHECK_THROWS_WITH(kernels::index_select(x, 0, index_tensor({-1})),
                    Catch::Contains("index -1") && Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(kernels::index_select(x, 0, from_vector({0, 1}, {2}, {.dtype = DType::f32})),
                    Catch::Contains("f32"));
  CHECK_THROWS_WITH(kernels::index_select(x, 0, from_vector({0, 1, 1, 0}, {2, 2}, {.dtype = DType::i64})),
                    Catch::Contains("1-D"));
  CHECK_THROWS(kernels::index_select(x, 2, index_tensor({0})));

  Tensor out = empty({3, 6});
  CHECK_THROWS_WITH(kernels::index_add(out, 0, index_tensor({0, 3}), empty({2, 6})),
                    Catch::Contains("index 3") && Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(kernels::index_add(out, 0, index_tensor({0, 1}), empty({2, 5})),
                    Catch::Contains("[2, 6]") && Catch::Contains("[2, 5]"));
}

TEST_CASE("index_add with src a view of out reads src before writing", "[cpu][index]") {
  // src = out's rows 0..1, added into rows 1 and 2: reading src row 1 after row 1 was updated
  // would give row 2 = 100 + 11 instead of 100 + 10.
  Tensor out = from_vector({1, 2, 10, 20, 100, 200, 1000, 2000}, {4, 2}, {.dtype = DType::f64});
  Tensor src = out.narrow(0, 0, 2);
  kernels::index_add(out, 0, index_tensor({1, 2}), src);
  CHECK(to_f64(out) == std::vector<double>{1, 2, 11, 22, 110, 220, 1000, 2000});
}

TEST_CASE("index_add and copy refuse an expanded destination", "[cpu][index]") {
  Tensor base = from_vector({1, 2}, {1, 2}, {.dtype = DType::f32});
  Tensor expanded = base.expand({3, 2});
  CHECK_THROWS_WITH(
      kernels::index_add(expanded, 0, index_tensor({0}), from_vector({5, 6}, {1, 2}, {.dtype = DType::f32})),
      Catch::Contains("index_add") && Catch::Contains("[3, 2]") && Catch::Contains("expanded"));
  CHECK_THROWS_WITH(kernels::copy(expanded, from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, {.dtype = DType::f32})),
                    Catch::Contains("copy") && Catch::Contains("[3, 2]") && Catch::Contains("expanded"));
  CHECK(to_f64(base) == std::vector<double>{1, 2});  // untouched
}
