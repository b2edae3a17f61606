#include "core/allocator.h"

#include <cstdlib>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace ember {
namespace {

constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {};
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    EMBER_CHECK(p != nullptr, "out of host memory allocating ", nbytes, " bytes");
    return DataPtr(p, nullptr, [](void*, void* ptr) { std::free(ptr); });
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator alloc;
  return alloc;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  EMBER_CHECK(cuda_compiled(), "cannot allocate on ", device.str(), ": this ember build has no CUDA support");
  return cuda_caching_allocator(device.index());
}

}  // namespace ember
