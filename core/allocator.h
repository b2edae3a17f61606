#pragma once
// Allocators hand out DataPtrs: a raw pointer plus the function that returns it. Storage holds one.
#include <cstddef>
#include <memory>

#include <ember/core/device.h>

namespace ember {

/// Owning, move-only pointer to device or host memory. The deleter gets back `ctx` (usually the
/// allocator) and the pointer, so stateful allocators need no global lookup.
class DataPtr {
 public:
  using Deleter = void (*)(void* ctx, void* ptr);
  DataPtr() = default;
  DataPtr(void* ptr, void* ctx, Deleter deleter) : ptr_(ptr), ctx_(ctx), deleter_(deleter) {}
  DataPtr(DataPtr&& o) noexcept : ptr_(o.ptr_), ctx_(o.ctx_), deleter_(o.deleter_) { o.release(); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_, ctx_ = o.ctx_, deleter_ = o.deleter_;
      o.release();
    }
    return *this;
  }
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() { reset(); }
  void* get() const { return ptr_; }
  void reset() {
    if (deleter_ && ptr_) deleter_(ctx_, ptr_);
    release();
  }

 private:
  void release() { ptr_ = nullptr, ctx_ = nullptr, deleter_ = nullptr; }
  void* ptr_ = nullptr;
  void* ctx_ = nullptr;
  Deleter deleter_ = nullptr;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns at least `nbytes` bytes (an empty DataPtr for nbytes == 0).
  virtual DataPtr allocate(size_t nbytes) = 0;
};

/// 64-byte aligned host memory, cached like device memory (a CachingAllocator over host segments).
Allocator& cpu_allocator();
/// The allocator for tensors on `device`: cpu_allocator() or that GPU's caching allocator
/// (cuda_caching_allocator in core/caching_allocator.h). Throws for CUDA in a build without it.
Allocator& allocator_for(Device device);

}  // namespace ember
