#pragma once
// Dropout: zeroes each element with probability p in training mode, scaling the rest by 1/(1-p).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <ember/core/rng.h>
#include <ember/layers/module.h>

namespace ember::layers {

/// Each training-mode forward takes its mask's (seed, offset) from `gen` (reserving numel()
/// elements), so a run seeded with manual_seed is reproducible on CPU and GPU alike. Identity in
/// eval mode. Any input shape. A clone owns a generator of its own (see clone_structure).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  /// A Dropout with the same p drawing its masks from a generator it owns, seeded from this
  /// module's generator state and the number of clones taken before (the generator is not
  /// advanced), so replicas running on different threads never share a generator and two clones
  /// get different masks.
  std::shared_ptr<Module> clone_structure() const override;
  /// Makes this module draw its masks from a new generator it owns, seeded as clone_structure()
  /// seeds a clone's from `original`'s generator. For containers whose clone_structure() builds a
  /// Dropout with a scratch generator (models::PreActBlock).
  void own_generator_forked_from(const Dropout& original);
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;  // not owned unless own_gen_ holds it; outlives the module otherwise
  std::shared_ptr<Generator> own_gen_;  // set on clones: the generator gen_ points at
  mutable std::atomic<uint64_t> forks_{0};  // clones taken of this module (their seeds differ)
};

}  // namespace ember::layers
