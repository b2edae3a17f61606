#pragma once
// Parameter initialisation, as in torch.nn.init. Every function fills its tensor in place under
// NoGradGuard (so it works on parameters that require grad), draws from `gen` (the default
// generator when omitted: manual_seed(s) makes a whole model's initialisation reproducible) and
// returns the same tensor handle. Works on any device and floating dtype.
#include <cstdint>

#include <ember/core/rng.h>
#include <ember/core/tensor.h>

namespace ember::layers::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Conv, Sigmoid, Tanh, ReLU, LeakyReLU };

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
/// Fans of a weight of shape (out, in, k...) (>= 2 dims): fan_in = in * prod(k),
/// fan_out = out * prod(k). A 1-D tensor (size n) has fan_in = fan_out = n (PyTorch errors there;
/// biases use 1/sqrt(fan_in of their weight) instead, so this case is for convenience only).
Fans compute_fans(const Tensor& t);
/// Recommended gain for a nonlinearity: 1 (Linear, Conv, Sigmoid), 5/3 (Tanh), sqrt(2) (ReLU),
/// sqrt(2 / (1 + a^2)) for LeakyReLU with negative slope `a`.
double calculate_gain(Nonlinearity nl, double a = 0.01);

/// U[lo, hi).
Tensor uniform_(const Tensor& t, double lo = 0.0, double hi = 1.0, Generator& gen = default_generator());
/// N(mean, std^2).
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
Tensor constant_(const Tensor& t, double value);

/// U[-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nl, a). PyTorch's default for
/// Linear and Conv2d weights is a = sqrt(5), FanIn, LeakyReLU, i.e. b = 1 / sqrt(fan_in).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nl = Nonlinearity::LeakyReLU, Generator& gen = default_generator());
/// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nl = Nonlinearity::LeakyReLU, Generator& gen = default_generator());
/// U[-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());
/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator& gen = default_generator());

}  // namespace ember::layers::init
