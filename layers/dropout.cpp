#include <ember/layers/dropout.h>

#include <sstream>

#include <ember/autograd/ops_norm.h>
#include <ember/core/error.h>

namespace ember::layers {

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  EMBER_CHECK(x.defined(), "Dropout: undefined input");
  if (!is_training() || p_ == 0.0) return x;
  const uint64_t seed = gen_->seed();
  const uint64_t offset = gen_->reserve(static_cast<uint64_t>(x.numel()));
  return dropout(x, p_, seed, offset);
}

std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p_;
  return os.str();
}

}  // namespace ember::layers
