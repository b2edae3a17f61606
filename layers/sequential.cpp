#include <ember/layers/sequential.h>

#include <ember/core/error.h>

namespace ember::layers {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const ModulePtr& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<ModulePtr>& modules) {
  for (const ModulePtr& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr m) {
  EMBER_CHECK(m != nullptr, "Sequential::push_back: null module at position ", modules_.size());
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const ModulePtr& m : modules_) y = m->forward(y);
  return y;
}

std::shared_ptr<Module> Sequential::clone_structure() const {
  auto c = std::make_shared<Sequential>();
  for (const ModulePtr& m : modules_) c->push_back(m->clone_structure());
  return c;
}

const ModulePtr& Sequential::operator[](int64_t i) const {
  const int64_t n = size();
  EMBER_CHECK(i >= -n && i < n, "Sequential[", i, "]: index out of range for ", n, " modules");
  return modules_[static_cast<size_t>(i < 0 ? i + n : i)];
}

}  // namespace ember::layers
