// core/pinned.h with CUDA: a caching pool of page-locked host blocks. cudaHostAlloc is slow and
// cudaFreeHost synchronizes the device, so blocks are kept and reused.
//
// The pool is never destroyed: process exit must not call into a CUDA runtime that may already be
// shutting down (the same choice as the CUDA caching allocator).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include <ember/core/allocator.h>
#include <ember/core/cuda_check.h>
#include <ember/core/pinned.h>
#include <ember/core/storage.h>
#include <ember/core/stream.h>

namespace ember::detail {

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

}  // namespace ember::detail
