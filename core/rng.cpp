// Generator state: a seed and a running Philox block offset. The numbers themselves come from the
// inline philox4x32 in core/rng.h so that CPU and CUDA kernels compute the same function.
#include <ember/core/rng.h>

#include <ember/core/cuda_graph.h>

namespace ember {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}

RngState Generator::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return RngState{seed_, offset_};
}

void Generator::set_state(const RngState& st) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = st.seed;
  offset_ = st.offset;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  offset_ = offset;
}

uint64_t Generator::reserve(uint64_t n) {
  // n elements use blocks offset .. offset + ceil(n / 4) - 1 (4 lanes per block). Written without
  // n + 3 so that n near 2^64 cannot wrap.
  const uint64_t blocks = n / 4 + (n % 4 != 0 ? 1 : 0);
  // Inside a CUDA graph capture the offset is baked into the launch; the graph notes how far each
  // generator moved, and every replay moves it that far again (core/cuda_graph.h, Dropout).
  if (detail::capturing()) detail::note_capture_rng(this, blocks);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t start = offset_;
  offset_ += blocks;
  return start;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
