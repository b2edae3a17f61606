#pragma once
// The device side of core/device_check.h: how a kernel raises a DeviceErrorSlot, and how a later
// kernel on the same stream sees that an earlier one raised it (without a trip to the host).
#include <cstdint>

#include <ember/core/device_check.h>

namespace ember {

/// Raises the slot with two values (e.g. the bad index and where it was). The first thread to
/// claim it (the claim word moves to this check's ticket) writes the values, then the flag, with a
/// system-wide fence between so the host never sees the flag without them; the others return.
/// A null slot (a launch inside a CUDA graph capture: core/cuda_graph.h) does not report.
__device__ inline void raise_device_error(const DeviceErrorSlot& s, int64_t a, int64_t b = 0) {
  if (s.claim == nullptr) return;
  if (atomicMax(s.claim, s.ticket) < s.ticket) {
    volatile int64_t* r = s.record;
    r[1] = a;
    r[2] = b;
    __threadfence_system();
    r[0] = 1;
  }
}

/// True when a kernel queued earlier on this stream raised the slot (kernel boundaries order the
/// claim word's update before this read).
__device__ inline bool device_error_raised(const DeviceErrorSlot& s) {
  if (s.claim == nullptr) return false;
  return *reinterpret_cast<const volatile unsigned long long*>(s.claim) >= s.ticket;
}

}  // namespace ember
