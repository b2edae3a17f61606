#pragma once
// A Storage is a shared, fixed-size byte buffer on one device. Tensors are views into it.
#include <cstddef>
#include <memory>

#include <ember/core/allocator.h>
#include <ember/core/device.h>

namespace ember {

class Storage {
 public:
  Storage() = default;
  /// Allocates `nbytes` on `device` through allocator_for(device).
  Storage(size_t nbytes, Device device);
  /// Wraps memory owned elsewhere (e.g. pinned host buffers).
  Storage(DataPtr data, size_t nbytes, Device device);

  void* data() const { return impl_ ? impl_->data.get() : nullptr; }
  size_t nbytes() const { return impl_ ? impl_->nbytes : 0; }
  Device device() const { return impl_ ? impl_->device : Device::cpu(); }
  bool defined() const { return impl_ != nullptr; }
  long use_count() const { return impl_.use_count(); }
  bool is_same(const Storage& o) const { return impl_ == o.impl_; }

 private:
  struct Impl {
    DataPtr data;
    size_t nbytes;
    Device device;
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace ember
