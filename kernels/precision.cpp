#include <ember/kernels/precision.h>

#include <atomic>

namespace ember {

namespace {
// Read on every GEMM and convolution: relaxed, a setting needs no ordering with other memory.
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace ember
