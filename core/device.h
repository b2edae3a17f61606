#pragma once
// Where a tensor lives. There is no global device mode: every tensor carries its Device.
#include <cstdint>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceTypes = 2;

/// A device: "cpu" or "cuda:N".
class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index = 0) : type_(type), index_(type == DeviceType::CPU ? 0 : index) {}
  /// Parses "cpu", "cuda" (= cuda:0) or "cuda:N". Throws on anything else. Does not check that
  /// the device exists; use validate() for that.
  explicit Device(const std::string& spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  /// cuda:0 when this build has CUDA and a usable GPU is present, else cpu. When a CUDA driver is
  /// installed but unusable (e.g. too old for ember's CUDA runtime), says why on stderr, once.
  static Device best();

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  /// Throws if this device cannot be used here (no CUDA in the build, no GPU, index out of range).
  const Device& validate() const;
  std::string str() const;

  friend bool operator==(const Device& a, const Device& b) = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

/// True when this build was compiled with CUDA support.
bool cuda_compiled();
/// Number of usable CUDA devices (0 without CUDA or without a GPU). Never throws.
int cuda_device_count();
/// True when this build has CUDA and at least one usable GPU (cuda_device_count() > 0).
bool cuda_available();
/// Why CUDA cannot be used here, or "" when it can: "this ember build has no CUDA support ...", or
/// the error cudaGetDeviceCount returned (its name and text) with the CUDA driver and runtime
/// versions, e.g. "cudaGetDeviceCount failed: cudaErrorInsufficientDriver (CUDA driver version is
/// insufficient for CUDA runtime version); CUDA driver 12.2, CUDA runtime 13.0". Never throws.
std::string cuda_unavailable_reason();

}  // namespace ember
