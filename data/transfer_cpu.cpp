// data/transfer.h in builds without CUDA: no device other than the CPU.
#ifndef EMBER_WITH_CUDA

#include <ember/core/error.h>
#include <ember/data/transfer.h>

namespace ember::data::detail {

Tensor copy_to_device_async(const Tensor& host, Device device, Stream, Stream, Event*) {
  EMBER_CHECK(device.is_cpu(), "DataLoader: cannot copy a batch to ", device.str(),
              ": this ember build has no CUDA support (rebuild with -DEMBER_CUDA=ON)");
  return host;
}

Tensor to_device_async(const Tensor& host, Device device) { return copy_to_device_async(host, device, {}, {}); }

}  // namespace ember::data::detail

#endif  // EMBER_WITH_CUDA
