// Front functions of sampling: checks, reserving counter ranges from the Generator, dispatch.
#include <ember/kernels/random.h>

#include <cmath>

#include <ember/core/cuda_graph.h>
#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<SampleFn> sample_table("sample");

namespace {

void sample(const char* name, Distribution dist, const Tensor& t, double a, double b, Generator& gen) {
  EMBER_CHECK(t.defined(), name, ": tensor is undefined");
  if (dist != Distribution::Bernoulli)
    EMBER_CHECK(is_floating(t.dtype()), name, ": expected a floating tensor (f32, f64, f16, bf16), got ",
                dtype_name(t.dtype()));
  const int64_t n = t.numel();
  if (n == 0) return;
  // Implementations fill contiguous memory in layout order; other views sample into a temporary.
  Tensor target = t.is_contiguous() ? t : empty(t.sizes(), t.options());
  // A captured launch keeps its offset: every replay would draw the same numbers (dropout reads a
  // per-replay offset from the device instead; these kernels do not).
  ember::detail::check_capturable(name,
                                  "its generator offset is baked into the launch, so every replay would draw "
                                  "the same numbers");
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.reserve(static_cast<uint64_t>(n));
  sample_table(t.device(), dist, target, a, b, seed, offset);
  if (!target.is_same(t)) copy(t, target);
}

}  // namespace

void uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  EMBER_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "uniform_: expected finite lo <= hi, got lo ", lo,
              ", hi ", hi);
  sample("uniform_", Distribution::Uniform, t, lo, hi, gen);
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  EMBER_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0,
              "normal_: expected finite mean and std >= 0, got mean ", mean, ", std ", std);
  sample("normal_", Distribution::Normal, t, mean, std, gen);
}

void bernoulli_(const Tensor& t, double p, Generator& gen) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli_: expected 0 <= p <= 1, got ", p);
  sample("bernoulli_", Distribution::Bernoulli, t, p, 0.0, gen);
}

}  // namespace ember::kernels
