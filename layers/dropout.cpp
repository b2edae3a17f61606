#include <ember/layers/dropout.h>

#include <sstream>

#include <ember/autograd/ops_norm.h>
#include <ember/core/error.h>

namespace ember::layers {
namespace {
constexpr uint64_t kForkSalt = 0x64726f706f757466ULL;  // "dropoutf": keys forks apart from masks
}  // namespace

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

std::shared_ptr<Module> Dropout::clone_structure() const {
  auto c = std::make_shared<Dropout>(p_);
  c->own_generator_forked_from(*this);
  return c;
}

void Dropout::own_generator_forked_from(const Dropout& original) {
  // A Philox block keyed by the original generator's state, at a counter past anything a mask
  // reads, numbered by how many clones the original has made: distinct, reproducible seeds, and
  // the original generator (often the process-wide default one) is not advanced.
  const RngState st = original.gen_->state();
  const uint64_t fork = original.forks_.fetch_add(1, std::memory_order_relaxed);
  const Philox4 r = philox4x32(splitmix64(st.seed ^ kForkSalt), st.offset, fork + 1);
  own_gen_ = std::make_shared<Generator>((static_cast<uint64_t>(r.v[1]) << 32) | r.v[0]);
  gen_ = own_gen_.get();
}

std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p_;
  return os.str();
}

}  // namespace ember::layers
