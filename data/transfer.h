#pragma once
// Internal (not part of the public API): host-to-device transfers for the data pipeline. The
// page-locked memory they stage through is core's (core/pinned.h).
// CUDA builds define these in data/cuda/transfer.cpp; builds without CUDA in data/transfer_cpu.cpp.
#include <ember/core/stream.h>
#include <ember/core/tensor.h>

namespace ember::data::detail {

/// A copy of `host` (contiguous, CPU) on `device`. For a CUDA device the copy is asynchronous:
/// the result is allocated on `consumer` (the stream that will read it), the transfer runs on
/// `copy_stream` after the work already queued on `consumer` (whose freed blocks the result may
/// reuse), and `consumer` waits for the transfer. `host` is staged through pinned memory (core/pinned.h) when it
/// is not pinned, and kept alive until the transfer completes. For the CPU device: `host` itself.
/// With `ready` given, the copy records it instead and `consumer` does not wait yet: the caller
/// calls ready->wait(consumer) when it hands the data over, so that work queued on `consumer` in
/// between (the previous batch's step) runs while the copy does.
Tensor copy_to_device_async(const Tensor& host, Device device, Stream consumer, Stream copy_stream,
                            Event* ready = nullptr);
/// copy_to_device_async with the device's current stream as both streams.
Tensor to_device_async(const Tensor& host, Device device);

}  // namespace ember::data::detail
