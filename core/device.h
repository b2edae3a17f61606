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
  /// cuda:0 when this build has CUDA and a usable GPU is present, else cpu.
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

}  // namespace ember
