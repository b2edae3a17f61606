#include <ember/core/allocator.h>

#include <cstdlib>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>

namespace ember {
namespace {

constexpr size_t kCpuAlignment = 64;

// Host segments for the caching allocator. Caching matters on the CPU too: glibc hands large
// blocks back to the OS on free, so every fresh activation or gradient buffer was page-faulted and
// zeroed again by the kernel (measured 7-18x slower than the add kernel itself on 16M- and
// 1M-element adds, docs/benchmarks.md). Blocks are 512-byte multiples inside 64-byte aligned
// segments.
class HostBackend final : public CachingAllocator::Backend {
 public:
  void* alloc(size_t nbytes) override {
    return std::aligned_alloc(kCpuAlignment, (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
  }
  void free(void* ptr) override { std::free(ptr); }
  void* current_stream() override { return nullptr; }
  std::string name() const override { return "cpu"; }
};

}  // namespace

Allocator& cpu_allocator() {
  // Never destroyed: tensors held by other statics may be freed after this one would have been.
  static CachingAllocator* alloc = new CachingAllocator(std::make_unique<HostBackend>());
  return *alloc;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  EMBER_CHECK(cuda_compiled(), "cannot allocate on ", device.str(), ": this ember build has no CUDA support");
  return cuda_caching_allocator(device.index());
}

}  // namespace ember
