// Dropout: the mask against an independent reading of the Philox stream, reproducibility, keep
// rate within a bound derived from n, 1/(1-p) scaling, gradcheck with a fixed mask, eval identity.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/autograd/ops_norm.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/dropout.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::layers::Dropout;
using ember::testing::kSecondOrder;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::to_f64;
using ember::testing::unit_roundoff;

namespace {

// Reference keep decision: u >= p with u the unit float of element i of the Philox stream.
bool keep_ref(uint64_t seed, uint64_t offset, int64_t i, double p) {
  return static_cast<double>(uint_to_unit_float(philox_element(seed, offset, static_cast<uint64_t>(i)))) >= p;
}

}  // namespace

TEST_CASE("dropout: mask, scaling and keep rate", "[cpu][layers]") {
  const int64_t n = 100003;  // odd: a partial last Philox block
  for (double p : {0.1, 0.25, 0.5, 0.9}) {
    INFO("p = " << p);
    Tensor x = random_tensor({n}, DType::f32, 3, 0.5, 1.5);  // no zeros, so zeros mark dropped elements
    const uint64_t seed = 1234, offset = 77;
    Tensor y = dropout(x, p, seed, offset);
    const auto xv = to_f64(x), yv = to_f64(y);
    int64_t kept = 0, mismatched = 0, badly_scaled = 0;
    // A kept y = x * fl32(1 / (1 - p)) (kernels/cpu/norm.cpp): 1 - p and the division in double, the
    // cast to f32 and the product in f32; the reference x / (1 - p) rounds twice in double.
    const double rel = kSecondOrder * (2 * unit_roundoff(DType::f32) + 4 * unit_roundoff(DType::f64));
    for (int64_t i = 0; i < n; ++i) {
      const bool k = keep_ref(seed, offset, i, p);
      if (k != (yv[i] != 0.0)) ++mismatched;
      if (k) {
        ++kept;
        const double want = xv[i] / (1.0 - p);
        if (std::abs(yv[i] - want) > rel * std::abs(want)) ++badly_scaled;
      }
    }
    CHECK(mismatched == 0);
    CHECK(badly_scaled == 0);
    // kept ~ Binomial(n, 1 - p): within 5 standard deviations.
    const double sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
    CHECK(std::abs(static_cast<double>(kept) - static_cast<double>(n) * (1 - p)) < 5 * sd);
    // Same (seed, offset): same mask; another offset: another mask.
    CHECK(to_f64(dropout(x, p, seed, offset)) == yv);
    CHECK(to_f64(dropout(x, p, seed, offset + 1)) != yv);
  }
  // Counters crossing 2^32 (the 4-block SIMD path carries into the counter's high word), every
  // float dtype, and lengths that leave 0-3 whole blocks and a partial one after the SIMD rounds.
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t len : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{63}, int64_t{4099}}) {
      INFO(dtype_name(dt) << " n = " << len);
      Tensor x = random_tensor({len}, dt, 5, 0.5, 1.5);
      const uint64_t seed = 99, offset = 0xFFFFFFFFull - 5;
      const auto yv = to_f64(dropout(x, 0.5, seed, offset));
      int64_t mismatched = 0;
      for (int64_t i = 0; i < len; ++i) mismatched += keep_ref(seed, offset, i, 0.5) != (yv[i] != 0.0);
      CHECK(mismatched == 0);
    }
  }
  Tensor x = random_tensor({1001}, DType::f64, 4);
  CHECK(to_f64(dropout(x, 0.0, 1, 2)) == to_f64(x));
  for (double v : to_f64(dropout(x, 1.0, 1, 2))) REQUIRE(v == 0.0);
  CHECK_THROWS_WITH(dropout(x, 1.5, 1, 2), Catch::Contains("[0, 1]"));
}

TEST_CASE("dropout: element i follows the row-major index of non-contiguous input", "[cpu][layers]") {
  Tensor xt = random_tensor({33, 17}, DType::f32, 5, -1, 1, Layout::Transposed);
  CHECK(to_f64(dropout(xt, 0.3, 9, 0)) == to_f64(dropout(xt.contiguous(), 0.3, 9, 0)));
}

TEST_CASE("dropout: gradcheck with a fixed mask", "[cpu][layers]") {
  auto fn = [](const std::vector<Tensor>& v) { return dropout(v[0], 0.35, 42, 1000); };
  EMBER_CHECK_GRADIENTS(fn, {random_tensor({7, 9}, DType::f64, 6, -1, 1, Layout::Strided)});
  // The gradient is the mask times 1/(1-p): exactly the forward applied to ones.
  Tensor x = random_tensor({5, 11}, DType::f64, 7);
  x.requires_grad_();
  dropout(x, 0.35, 42, 1000).backward(ones({5, 11}, {.dtype = DType::f64}));
  CHECK(to_f64(x.grad()) == to_f64(dropout(ones({5, 11}, {.dtype = DType::f64}), 0.35, 42, 1000)));
}

TEST_CASE("Dropout layer: reproducible from the generator, fresh masks per call, eval identity", "[cpu][layers]") {
  Tensor x = random_tensor({64, 33}, DType::f32, 8, 0.5, 1.5);
  Generator g1(99), g2(99);
  Dropout d1(0.5, g1), d2(0.5, g2);
  Tensor a1 = d1.forward(x), a2 = d1.forward(x);
  Tensor b1 = d2.forward(x), b2 = d2.forward(x);
  CHECK(to_f64(a1) == to_f64(b1));
  CHECK(to_f64(a2) == to_f64(b2));
  CHECK(to_f64(a1) != to_f64(a2));  // the generator advanced
  // The offsets came from the generator: the second call used offset ceil(numel / 4).
  CHECK(to_f64(a2) == to_f64(dropout(x, 0.5, 99, (64 * 33 + 3) / 4)));
  d1.eval();
  CHECK(to_f64(d1.forward(x)) == to_f64(x));
  CHECK(g1.offset() == 2 * ((64 * 33 + 3) / 4));  // eval draws nothing
  CHECK(d1.str() == "Dropout(p=0.5)");
}
