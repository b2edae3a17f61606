// data/transfer.h with CUDA: asynchronous host-to-device copies from page-locked memory
// (core/pinned.h) whose source blocks stay alive until an event says the copy is done.
//
// The in-flight list is never destroyed: process exit must not call into a
// CUDA runtime that may already be shutting down (the same choice as the CUDA caching allocator).
#include <cuda_runtime.h>

#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <vector>

#include <ember/core/cuda_check.h>
#include <ember/core/pinned.h>
#include <ember/data/transfer.h>

namespace ember::data::detail {

namespace {

// Host tensors whose copies may still be running, each with the event recorded after its copy.
class InFlight {
 public:
  cudaEvent_t get_event(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    auto& spare = spare_[device];
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void put_event(int device, cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    spare_[device].push_back(e);
  }
  void keep_until(Tensor host, int device, cudaEvent_t done) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({std::move(host), device, done});
  }

 private:
  struct Pending {
    Tensor host;
    int device;
    cudaEvent_t done;
  };
  void reap_locked() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      cudaError_t st = cudaEventQuery(it->done);
      if (st == cudaErrorNotReady) {
        ++it;
        continue;
      }
      (void)cudaGetLastError();
      spare_[it->device].push_back(it->done);
      it = pending_.erase(it);  // releases the host block back to the pool
    }
  }
  std::mutex mu_;
  std::list<Pending> pending_;
  std::map<int, std::vector<cudaEvent_t>> spare_;
};

InFlight& in_flight() {
  static InFlight* f = new InFlight();  // never destroyed (see top)
  return *f;
}

}  // namespace

Tensor copy_to_device_async(const Tensor& host, Device device, Stream consumer, Stream copy_stream, Event* ready) {
  if (device.is_cpu()) return host;
  EMBER_CHECK(host.device().is_cpu() && host.is_contiguous(),
              "copy_to_device_async: expected a contiguous CPU tensor, got ", host.shape_str(), " on ",
              host.device().str());
  EMBER_CHECK(consumer.device() == device && copy_stream.device() == device, "copy_to_device_async: streams on ",
              consumer.device().str(), " and ", copy_stream.device().str(), " for a copy to ", device.str());
  DeviceGuard guard(device);
  Tensor src = host;
  size_t nbytes = static_cast<size_t>(host.numel()) * host.element_size();
  if (nbytes > 0 && !ember::detail::is_pinned(host)) {
    src = ember::detail::pinned_empty(host.sizes(), host.dtype(), device);
    std::memcpy(src.data_ptr(), host.data_ptr(), nbytes);
  }
  Tensor dst;
  {
    StreamGuard sg(consumer);  // the caching allocator serves the stream that will use dst
    dst = empty(host.sizes(), {.dtype = host.dtype(), .device = device});
  }
  if (nbytes == 0) return dst;  // nothing copied: `ready` stays as it is
  auto cs = static_cast<cudaStream_t>(consumer.handle());
  auto xs = static_cast<cudaStream_t>(copy_stream.handle());
  InFlight& f = in_flight();
  const int dev = device.index();
  if (xs != cs) {
    // dst may reuse a block freed by work still queued on the consumer: copy after that work.
    cudaEvent_t before = f.get_event(dev);
    CUDA_CHECK(cudaEventRecord(before, cs));
    CUDA_CHECK(cudaStreamWaitEvent(xs, before, 0));
    f.put_event(dev, before);  // cudaStreamWaitEvent captured it; re-recording later is safe
  }
  CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyHostToDevice, xs));
  cudaEvent_t done = f.get_event(dev);
  CUDA_CHECK(cudaEventRecord(done, xs));
  if (ready) ready->record(copy_stream);
  else if (xs != cs) CUDA_CHECK(cudaStreamWaitEvent(cs, done, 0));
  f.keep_until(src, dev, done);
  return dst;
}

Tensor to_device_async(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
  Stream s = current_stream(device);
  return copy_to_device_async(host, device, s, s);
}

}  // namespace ember::data::detail
