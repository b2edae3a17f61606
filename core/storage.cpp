#include <ember/core/storage.h>

namespace ember {

Storage::Storage(size_t nbytes, Device device)
    : impl_(std::make_shared<Impl>(Impl{allocator_for(device).allocate(nbytes), nbytes, device})) {}

Storage::Storage(DataPtr data, size_t nbytes, Device device)
    : impl_(std::make_shared<Impl>(Impl{std::move(data), nbytes, device})) {}

}  // namespace ember
