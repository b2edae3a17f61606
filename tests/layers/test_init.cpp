// Initialisers: fans, gains, bounds and moments within limits derived from n (5 standard errors),
// reproducibility from a Generator, use on parameters that require grad.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/init.h>
#include "support/reference.h"

using namespace ember;
namespace init = ember::layers::init;
using ember::testing::to_f64;

namespace {

struct Moments {
  double mean = 0, mean_sq = 0, max_abs = 0;
  double n = 0;
};
Moments moments(const Tensor& t) {
  Moments m;
  auto v = to_f64(t);
  for (double x : v) {
    m.mean += x;
    m.mean_sq += x * x;
    m.max_abs = std::max(m.max_abs, std::abs(x));
  }
  m.n = static_cast<double>(v.size());
  m.mean /= m.n;
  m.mean_sq /= m.n;
  return m;
}

// U[-b, b): mean 0 (sd of the sample mean b / sqrt(3n)), E[x^2] = b^2/3 (sd sqrt(4/45) b^2 / sqrt(n)).
void check_uniform(const Tensor& t, double b) {
  const Moments m = moments(t);
  INFO("bound " << b << " mean " << m.mean << " mean_sq " << m.mean_sq);
  CHECK(m.max_abs <= b);
  CHECK(m.max_abs > 0.9 * b);  // n is large: some value lands in the outer 10%
  CHECK(std::abs(m.mean) < 5.0 * b / std::sqrt(3.0 * m.n));
  CHECK(std::abs(m.mean_sq - b * b / 3.0) < 5.0 * std::sqrt(4.0 / 45.0) * b * b / std::sqrt(m.n));
}
// N(0, s^2): mean sd s / sqrt(n); E[x^2] = s^2 with sd sqrt(2) s^2 / sqrt(n).
void check_normal(const Tensor& t, double s) {
  const Moments m = moments(t);
  INFO("std " << s << " mean " << m.mean << " mean_sq " << m.mean_sq);
  CHECK(std::abs(m.mean) < 5.0 * s / std::sqrt(m.n));
  CHECK(std::abs(m.mean_sq - s * s) < 5.0 * std::sqrt(2.0) * s * s / std::sqrt(m.n));
  CHECK(m.max_abs > 3.0 * s);  // n >= 10^4: P(all within 3 sd) ~ 0.9973^n, negligible
}

}  // namespace

TEST_CASE("init: fans and gains", "[cpu][layers]") {
  auto f = init::compute_fans(empty({32, 16, 3, 5}));
  CHECK(f.fan_in == 16 * 15);
  CHECK(f.fan_out == 32 * 15);
  f = init::compute_fans(empty({10, 7}));
  CHECK(f.fan_in == 7);
  CHECK(f.fan_out == 10);
  CHECK(init::calculate_gain(init::Nonlinearity::ReLU) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::Tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::Linear) == 1.0);
}

TEST_CASE("init: distributions match their parameters", "[cpu][layers]") {
  Generator gen(2024);
  const int64_t O = 128, I = 64, K = 3;  // fan_in = 576, fan_out = 1152, n = 73728
  Tensor w = empty({O, I, K, K});
  const double fan_in = I * K * K, fan_out = O * K * K;

  init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU, gen);
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / fan_in));
  init::kaiming_uniform_(w, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, gen);
  check_uniform(w, 1.0 / std::sqrt(fan_in));
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU, gen);
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / fan_out));
  init::kaiming_normal_(w, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU, gen);
  check_normal(w, std::sqrt(2.0) / std::sqrt(fan_out));
  init::xavier_uniform_(w, 1.5, gen);
  check_uniform(w, 1.5 * std::sqrt(6.0 / (fan_in + fan_out)));
  init::xavier_normal_(w, 1.0, gen);
  check_normal(w, std::sqrt(2.0 / (fan_in + fan_out)));

  Tensor u = empty({50001}, {.dtype = DType::f64});
  init::uniform_(u, 2.0, 5.0, gen);
  auto uv = to_f64(u);
  double s = 0;
  for (double v : uv) {
    REQUIRE(v >= 2.0);
    REQUIRE(v < 5.0);
    s += v;
  }
  const double n = static_cast<double>(uv.size());
  CHECK(std::abs(s / n - 3.5) < 5.0 * 3.0 / std::sqrt(12.0 * n));
  init::normal_(u, 0.0, 0.25, gen);
  check_normal(u, 0.25);
  init::normal_(u, 3.0, 0.5, gen);
  CHECK(std::abs(moments(u).mean - 3.0) < 5.0 * 0.5 / std::sqrt(n));
  init::zeros_(u);
  CHECK(moments(u).max_abs == 0.0);
  init::constant_(u, 1.25);
  CHECK(moments(u).mean == 1.25);
}

TEST_CASE("init: reproducible from the generator, works on parameters requiring grad", "[cpu][layers]") {
  Tensor a = empty({40, 30}), b = empty({40, 30}), c = empty({40, 30});
  a.requires_grad_();  // grad mode is on: init must still be allowed to write
  Generator g1(5), g2(5), g3(6);
  init::kaiming_uniform_(a, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, g1);
  init::kaiming_uniform_(b, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, g2);
  init::kaiming_uniform_(c, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, g3);
  CHECK(to_f64(a) == to_f64(b));
  CHECK(to_f64(a) != to_f64(c));
  CHECK(a.requires_grad());
  CHECK(a.is_leaf());
  // The generator advanced: a second draw differs from the first.
  init::kaiming_uniform_(b, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, g2);
  CHECK(to_f64(a) != to_f64(b));
  CHECK_THROWS_WITH(init::uniform_(empty({3}, {.dtype = DType::i64})), Catch::Contains("floating"));
}
