#include <ember/kernels/dispatch.h>

#include <mutex>

namespace ember::kernels {

namespace detail {
std::atomic<bool> g_registered{false};
}

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
#ifdef EMBER_WITH_CUDA
    register_cuda_kernels();
#endif
    detail::g_registered.store(true, std::memory_order_release);
  });
}

void missing_kernel(const char* op, DeviceType type) {
  const char* dev = type == DeviceType::CPU ? "cpu" : "cuda";
  if (type == DeviceType::CUDA) {
#ifndef EMBER_WITH_CUDA
    EMBER_FAIL("no kernel for op '", op, "' on device ", dev, ": this ember build has no CUDA support");
#endif
  }
  EMBER_FAIL("no kernel for op '", op, "' on device ", dev);
}

}  // namespace ember::kernels
