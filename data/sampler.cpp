#include <ember/data/sampler.h>

#include <cstring>
#include <sstream>

#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>

namespace ember::data {

namespace {

// Keeps the permutation's Philox key apart from other users of the same seed (augmentation,
// weight init), so their random streams are not the same numbers.
constexpr uint64_t kPermutationSalt = 0x7065726d75746531ULL;  // "permute1"

Tensor i64_value(int64_t v) { return from_vector(std::vector<int64_t>{v}, {1}); }

int64_t read_i64(const StateDict& s, const std::string& key, const std::string& who) {
  auto it = s.find(key);
  EMBER_CHECK(it != s.end(), who, ".load_state_dict: missing entry \"", key, "\"");
  const Tensor& t = it->second;
  EMBER_CHECK(t.defined() && t.numel() == 1 && !is_floating(t.dtype()), who, ".load_state_dict: entry \"", key,
              "\" should be one integer, found ", t.defined() ? dtype_name(t.dtype()) : "undefined", " ",
              t.defined() ? t.shape_str() : "");
  return t.item<int64_t>();
}

}  // namespace

void Sampler::set_epoch(int64_t epoch) {
  EMBER_CHECK(epoch >= 0, name(), ".set_epoch: expected epoch >= 0, got ", epoch);
  epoch_ = epoch;
  position_ = 0;
}

void Sampler::set_position(int64_t position) {
  EMBER_CHECK(position >= 0 && position <= size(), name(), ".set_position: expected 0..", size(), ", got ", position);
  position_ = position;
}

StateDict Sampler::state_dict() const {
  StateDict s;
  s["epoch"] = i64_value(epoch_);
  s["position"] = i64_value(position_);
  s["size"] = i64_value(size());
  for (const auto& [k, v] : extra_state()) s[k] = i64_value(v);
  return s;
}

void Sampler::load_state_dict(const StateDict& state) {
  const std::string who = name();
  auto extras = extra_state();
  for (const auto& [k, v] : state) {
    bool known = k == "epoch" || k == "position" || k == "size";
    for (const auto& e : extras) known = known || e.first == k;
    EMBER_CHECK(known, who, ".load_state_dict: unexpected entry \"", k, "\"");
  }
  int64_t epoch = read_i64(state, "epoch", who);
  int64_t position = read_i64(state, "position", who);
  int64_t size = read_i64(state, "size", who);
  EMBER_CHECK(size == this->size(), who, ".load_state_dict: entry \"size\" is ", size, " but this sampler yields ",
              this->size(), " indices per epoch (a different dataset?)");
  for (const auto& [k, v] : extras) {
    int64_t saved = read_i64(state, k, who);
    EMBER_CHECK(saved == v, who, ".load_state_dict: entry \"", k, "\" is ", saved, " but this sampler has ", v);
  }
  EMBER_CHECK(epoch >= 0, who, ".load_state_dict: entry \"epoch\" is ", epoch, ", expected >= 0");
  EMBER_CHECK(position >= 0 && position <= size, who, ".load_state_dict: entry \"position\" is ", position,
              ", expected 0..", size);
  epoch_ = epoch;
  position_ = position;
}

// ---- SequentialSampler ----

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  EMBER_CHECK(n >= 0, "SequentialSampler: expected n >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

std::string SequentialSampler::name() const { return "SequentialSampler(n=" + std::to_string(n_) + ")"; }

// ---- RandomSampler ----

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  const uint64_t key = splitmix64(seed ^ kPermutationSalt);
  // Fisher-Yates from the back: step i swaps v[i] with v[j], j uniform in [0, i], using two lanes
  // (64 bits) of the Philox block at counter (i, epoch).
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox4x32(key, static_cast<uint64_t>(i), static_cast<uint64_t>(epoch));
    uint64_t bits = (uint64_t(r.v[0]) << 32) | r.v[1];
    int64_t j = static_cast<int64_t>(bits % static_cast<uint64_t>(i + 1));
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  EMBER_CHECK(n >= 0, "RandomSampler: expected n >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return random_permutation(n_, seed_, epoch); }

std::string RandomSampler::name() const {
  std::ostringstream os;
  os << "RandomSampler(n=" << n_ << ", seed=" << seed_ << ")";
  return os.str();
}

std::vector<std::pair<std::string, int64_t>> RandomSampler::extra_state() const {
  int64_t s;
  std::memcpy(&s, &seed_, sizeof s);  // the seed's 64 bits, stored in an i64
  return {{"seed", s}};
}

}  // namespace ember::data
