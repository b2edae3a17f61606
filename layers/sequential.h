#pragma once
// Sequential: children applied in order, named "0", "1", ... (so state dict keys read "0.weight").
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <ember/layers/module.h>

namespace ember::layers {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);
  /// Appends a module as child number size().
  void push_back(ModulePtr m);
  /// Input of the first child -> output of the last (the input itself when empty).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  /// A Sequential of the children's clone_structure(), in order.
  std::shared_ptr<Module> clone_structure() const override;

  int64_t size() const { return static_cast<int64_t>(modules_.size()); }
  /// Child i (negative counts from the end).
  const ModulePtr& operator[](int64_t i) const;

 private:
  std::vector<ModulePtr> modules_;
};

}  // namespace ember::layers
