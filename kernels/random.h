#pragma once
// Sampling on the counter-based Philox generator (core/rng.h). The layout convention there makes
// CPU and CUDA produce the same numbers for the same seed and offset.
#include <cstdint>

#include <ember/core/rng.h>
#include <ember/core/tensor.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

/// Fills t (any floating dtype, contiguous) with U[lo, hi). Advances gen by ceil(numel/4).
void uniform_(const Tensor& t, double lo, double hi, Generator& gen = default_generator());
/// N(mean, std^2) by Box-Muller: element i uses block (offset + i/4); lanes (l & ~1, l | 1) of
/// that block form the pair; even lanes take the cosine branch, odd lanes the sine branch.
void normal_(const Tensor& t, double mean, double std, Generator& gen = default_generator());
/// 1 with probability p, else 0 (u < p with u uniform as above), in t's dtype.
void bernoulli_(const Tensor& t, double p, Generator& gen = default_generator());

// ---- implementation signatures (t contiguous) ----
enum class Distribution : uint8_t { Uniform, Normal, Bernoulli };
/// a, b: (lo, hi), (mean, std) or (p, unused).
using SampleFn = void(Distribution dist, const Tensor& t, double a, double b, uint64_t seed, uint64_t offset);
extern DispatchTable<SampleFn> sample_table;

}  // namespace ember::kernels
