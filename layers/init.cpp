// Initialisers: draw U[0, 1) or N(0, 1) with the public factories (same numbers on CPU and GPU for
// one generator state), scale and shift them, and copy into the target under NoGradGuard.
#include <ember/layers/init.h>

#include <cmath>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>

namespace ember::layers::init {
namespace {

void check_target(const Tensor& t, const char* what) {
  EMBER_CHECK(t.defined(), what, ": undefined tensor");
  EMBER_CHECK(is_floating(t.dtype()), what, ": expected a floating tensor, got dtype ", dtype_name(t.dtype()),
              " of shape ", t.shape_str());
}

// Draws in f64 for f64 targets and f32 otherwise (16-bit targets round once, in copy_).
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::f64 ? DType::f64 : DType::f32; }

int64_t fan_of(const Tensor& t, FanMode mode, const char* what) {
  const Fans f = compute_fans(t);
  const int64_t fan = mode == FanMode::FanIn ? f.fan_in : f.fan_out;
  EMBER_CHECK(fan > 0, what, ": zero fan for a tensor of shape ", t.shape_str());
  return fan;
}

}  // namespace

Fans compute_fans(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() >= 1, "compute_fans: expected a tensor with >= 1 dim");
  if (t.dim() == 1) return {t.size(0), t.size(0)};
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(Nonlinearity nl, double a) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + a * a));
  }
  return 1.0;
}

Tensor uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  check_target(t, "init::uniform_");
  EMBER_CHECK(lo <= hi, "init::uniform_: expected lo <= hi, got [", lo, ", ", hi, ")");
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  Tensor u = rand(t.sizes(), {.dtype = draw_dtype(t), .device = t.device()}, gen);
  Tensor target = t;
  target.copy_(u * (hi - lo) + lo);
  return t;
}

Tensor normal_(const Tensor& t, double mean, double std, Generator& gen) {
  check_target(t, "init::normal_");
  EMBER_CHECK(std >= 0.0, "init::normal_: expected std >= 0, got ", std);
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  Tensor z = randn(t.sizes(), {.dtype = draw_dtype(t), .device = t.device()}, gen);
  Tensor target = t;
  target.copy_(z * std + mean);
  return t;
}

Tensor constant_(const Tensor& t, double value) {
  check_target(t, "init::constant_");
  NoGradGuard no_grad;
  Tensor target = t;
  target.fill_(value);
  return t;
}
Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  check_target(t, "init::kaiming_uniform_");
  const double bound =
      calculate_gain(nl, a) * std::sqrt(3.0 / static_cast<double>(fan_of(t, mode, "kaiming_uniform_")));
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator& gen) {
  check_target(t, "init::kaiming_normal_");
  const double std = calculate_gain(nl, a) / std::sqrt(static_cast<double>(fan_of(t, mode, "kaiming_normal_")));
  return normal_(t, 0.0, std, gen);
}

Tensor xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  check_target(t, "init::xavier_uniform_");
  const Fans f = compute_fans(t);
  EMBER_CHECK(f.fan_in + f.fan_out > 0, "init::xavier_uniform_: zero fans for shape ", t.shape_str());
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out));
  return uniform_(t, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator& gen) {
  check_target(t, "init::xavier_normal_");
  const Fans f = compute_fans(t);
  EMBER_CHECK(f.fan_in + f.fan_out > 0, "init::xavier_normal_: zero fans for shape ", t.shape_str());
  const double std = gain * std::sqrt(2.0 / static_cast<double>(f.fan_in + f.fan_out));
  return normal_(t, 0.0, std, gen);
}

}  // namespace ember::layers::init
