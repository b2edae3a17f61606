#include <ember/core/device.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>

#include <ember/core/cuda/runtime.h>
#include <ember/core/error.h>

namespace ember {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = cpu();
    return;
  }
  if (spec == "cuda") {
    *this = cuda(0);
    return;
  }
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    const std::string idx = spec.substr(5);
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0 && v < 1024 && idx.find_first_not_of("0123456789") == std::string::npos) {
      *this = cuda(static_cast<int>(v));
      return;
    }
  }
  EMBER_FAIL("invalid device '", spec, "' (expected cpu, cuda or cuda:N)");
}

int detail::nvidia_gpus_listed(const std::string& dir) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

Device Device::best() {
  if (cuda_device_count() > 0) return cuda(0);
  // A driver that is there but unusable is worth a word: the user expected the GPU. So is a GPU
  // that this build cannot use (built without CUDA, e.g. on a login node with no GPU, where
  // scripts/setup.sh builds the CPU backend only). No GPU at all stays silent.
  static std::once_flag told;
  std::call_once(told, [] {
    if (!cuda_compiled()) {
      const int gpus = detail::nvidia_gpus_listed();
      if (gpus > 0)
        std::fprintf(stderr,
                     "ember: this machine has %d NVIDIA GPU(s), but this ember build has no CUDA backend: "
                     "running on the CPU (rebuild with EMBER_CUDA=ON scripts/setup.sh)\n",
                     gpus);
      return;
    }
    if (detail::cuda_driver_version() == 0) return;
    std::fprintf(stderr, "ember: CUDA is installed but unusable, running on the CPU: %s\n",
                 cuda_unavailable_reason().c_str());
  });
  return cpu();
}

bool cuda_available() { return cuda_device_count() > 0; }

const Device& Device::validate() const {
  if (is_cuda()) {
    EMBER_CHECK(cuda_compiled(), "device ", str(), " requested, but this ember build has no CUDA support");
    int n = cuda_device_count();
    EMBER_CHECK(n > 0, "device ", str(), " requested, but no usable CUDA GPU was found: ", cuda_unavailable_reason());
    EMBER_CHECK(index_ < n, "device ", str(), " requested, but only ", n, " CUDA device(s) exist (cuda:0..cuda:", n - 1,
                ")");
  }
  return *this;
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_); }

}  // namespace ember
