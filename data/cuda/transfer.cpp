// data/transfer.h with CUDA: a caching pool of page-locked host blocks (cudaHostAlloc is slow and
// cudaFreeHost synchronizes the device, so blocks are kept and reused), and asynchronous
// host-to-device copies whose source blocks stay alive until an event says the copy is done.
//
// Both the pool and the in-flight list are never destroyed: process exit must not call into a
// CUDA runtime that may already be shutting down (the same choice as the CUDA caching allocator).
#include <cuda_runtime.h>

#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ember/core/allocator.h>
#include <ember/core/cuda_check.h>
#include <ember/core/storage.h>
#include <ember/data/transfer.h>

namespace ember::data::detail {

namespace {

// Requests round up to 4 KiB pages below 1 MiB and to 1 MiB above, and a cached block is reused
// for any request at least half its size, so batches of one shape (and the shorter last batch)
// keep hitting the cache.
size_t round_pinned(size_t n) {
  constexpr size_t kPage = 4096, kBig = size_t(1) << 20;
  if (n < kBig) return (n + kPage - 1) / kPage * kPage;
  return (n + kBig - 1) / kBig * kBig;
}

class PinnedPool {
 public:
  void* allocate(size_t nbytes) {
    size_t want = round_pinned(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(want);
      if (it != free_.end() && it->first <= 2 * want) {
        void* p = it->second;
        free_.erase(it);
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, want, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error state of this failure
      release_cached();
      CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocPortable));
    }
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = want;
    return p;
  }
  void release(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;  // not ours: cannot happen, never throw from a deleter
    free_.emplace(it->second, p);
  }
  bool owns(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    // A tensor may start inside a block (a view): look for the block containing p.
    for (const auto& [base, size] : sizes_) {
      auto b = static_cast<const char*>(base);
      if (static_cast<const char*>(p) >= b && static_cast<const char*>(p) < b + size) return true;
    }
    return false;
  }

 private:
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : free_) {
      cudaFreeHost(p);
      sizes_.erase(p);
    }
    free_.clear();
  }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> sizes_;
};

PinnedPool& pool() {
  static PinnedPool* p = new PinnedPool();  // never destroyed (see top)
  return *p;
}

void pinned_deleter(void* ctx, void* ptr) { static_cast<PinnedPool*>(ctx)->release(ptr); }

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

Tensor pinned_empty(const Shape& sizes, DType dtype, Device device) {
  size_t nbytes = static_cast<size_t>(numel_of(sizes)) * dtype_size(dtype);
  if (nbytes == 0) return empty(sizes, {.dtype = dtype});
  DeviceGuard guard(device);  // a no-op for the CPU; see transfer.h
  PinnedPool& p = pool();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage(DataPtr(p.allocate(nbytes), &p, &pinned_deleter), nbytes, Device::cpu());
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(impl);
}

bool is_pinned(const Tensor& t) { return t.numel() > 0 && pool().owns(t.data_ptr()); }

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
  if (nbytes > 0 && !is_pinned(host)) {
    src = pinned_empty(host.sizes(), host.dtype(), device);
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
