#pragma once
// For [cuda][slow] tests that need many GiB: whether that much device memory can be had now, so
// that a smaller GPU skips them (EMBER_SKIP) instead of failing with out-of-memory.
#include <cstdint>
#include <string>

#include <ember/core/caching_allocator.h>
#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>

namespace ember::testing {

/// "" when `bytes` of device memory can be allocated on `dev`, else the allocator's message. The
/// probe's block goes back to the driver either way.
inline std::string lacks_device_memory(Device dev, int64_t bytes) {
  CachingAllocator& alloc = cuda_caching_allocator(dev.index());
  std::string why;
  try {
    const Tensor probe = empty({bytes}, {.dtype = DType::u8, .device = dev});
  } catch (const Error& e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
    why = e.message();
  }
  alloc.empty_cache();
  return why;
}

}  // namespace ember::testing
