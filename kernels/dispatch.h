#pragma once
// Per-op dispatch tables keyed by device type. Each op family header declares its impl signature
// and one DispatchTable; kernels/cpu/register.cpp and kernels/cuda/register.cu fill the tables from
// explicit register_cpu_kernels() / register_cuda_kernels() calls, made once on first use.
// A missing entry is an error naming the op and the device; there is no silent CPU fallback.
#include <atomic>
#include <utility>

#include <ember/core/device.h>
#include <ember/core/error.h>

namespace ember::kernels {

/// Fills every table with the CPU implementations.
void register_cpu_kernels();
/// Fills every table with the CUDA implementations (defined only in CUDA builds).
void register_cuda_kernels();
/// Runs the registration calls once per process (thread-safe).
void ensure_kernels_registered();
[[noreturn]] void missing_kernel(const char* op, DeviceType type);

namespace detail {
extern std::atomic<bool> g_registered;
}

template <typename Fn> class DispatchTable {
 public:
  explicit constexpr DispatchTable(const char* name) : name_(name) {}
  void set(DeviceType type, Fn* fn) { fns_[static_cast<int>(type)] = fn; }
  Fn* get(DeviceType type) const {
    if (!detail::g_registered.load(std::memory_order_acquire)) ensure_kernels_registered();
    Fn* fn = fns_[static_cast<int>(type)];
    if (fn == nullptr) missing_kernel(name_, type);
    return fn;
  }
  /// Calls the implementation for `device`'s type.
  template <typename... Args> decltype(auto) operator()(Device device, Args&&... args) const {
    return get(device.type())(std::forward<Args>(args)...);
  }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn* fns_[kNumDeviceTypes] = {};
};

}  // namespace ember::kernels
