#pragma once
// Differentiable communication between devices of one process, the pieces DataParallel is made
// of (PyTorch's torch.nn.parallel.comm / _functions): Broadcast (backward: reduce-add), Scatter
// (backward: gather) and Gather (backward: scatter). Each is recorded in autograd when grad mode
// is on and its input requires grad, so a gradient that reaches a replica's copy of a tensor
// flows back to the tensor itself, on its own device.
//
// Transfers between devices are kernels::copy calls (synchronous for cross-device copies, on the
// calling thread's current streams). The device list may repeat a device.
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/tensor.h>

namespace ember::parallel {

/// "{cuda:0, cuda:1}": a device list as errors print it.
std::string devices_str(const std::vector<Device>& devices);

/// How scatter() splits `size` rows over `parts` devices: min(parts, size) chunks as even as
/// possible, the first ones one larger (10 over 3 -> {4, 3, 3}; 2 over 3 -> {1, 1}). size >= 1
/// and parts >= 1, else an error.
std::vector<int64_t> chunk_sizes(int64_t size, int64_t parts);

/// One copy of t per entry of `devices` (output i on devices[i], same shape and dtype). Where
/// devices[i] is t's own device, output i is an alias of t's storage (no copy): read it, never
/// write it. Backward: the outputs' gradients summed on t's device, in device-list order.
std::vector<Tensor> broadcast_to(const Tensor& t, const std::vector<Device>& devices);

/// Splits t (at least 1-D, size >= 1 along `dim`) into chunk_sizes(t.size(dim), devices.size())
/// chunks along `dim`, chunk i on devices[i] (fewer chunks than devices when t is smaller). A
/// chunk on t's own device is a view of t. Backward: the chunks' gradients concatenated along
/// `dim` on t's device (a chunk that got none contributes zeros). Errors name t's shape and the
/// devices.
std::vector<Tensor> scatter(const Tensor& t, const std::vector<Device>& devices, int64_t dim = 0);

/// Concatenates parts (same dtype, same number of dims >= 1, equal sizes except along `dim`)
/// along `dim` into a new tensor on `out`. Backward: the gradient split along `dim` and each
/// piece sent back to its part's device. Errors name the mismatching shapes.
Tensor gather(const std::vector<Tensor>& parts, Device out, int64_t dim = 0);

}  // namespace ember::parallel
