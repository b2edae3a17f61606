// The CUDA entry points of core/ in a build without CUDA: no devices, and a clear error (never a
// silent CPU fallback) from anything that needs a GPU. CUDA builds define these in core/cuda/.
#ifndef EMBER_WITH_CUDA

#include <string>

#include <ember/core/caching_allocator.h>
#include <ember/core/cuda/runtime.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/device.h>
#include <ember/core/device_check.h>
#include <ember/core/error.h>
#include <ember/core/pinned.h>

namespace ember {

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this ember build has no CUDA support (rebuild with -DEMBER_CUDA=ON)"; }

CachingAllocator& cuda_caching_allocator(int index) {
  EMBER_FAIL("cannot allocate on cuda:", index,
             ": this ember build has no CUDA support (rebuild with -DEMBER_CUDA=ON)");
}

void cuda_empty_cache() {}

std::unique_ptr<DeviceCheckRegistry::Backend> detail::make_cuda_device_check_backend() { return nullptr; }

namespace detail {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  EMBER_FAIL(what, ": this ember build has no CUDA support (rebuild with -DEMBER_CUDA=ON)");
}
}  // namespace

// No page-locked memory without CUDA: ordinary CPU memory serves, and nothing is pinned.
Tensor pinned_empty(const Shape& sizes, DType dtype, Device) { return empty(sizes, {.dtype = dtype}); }
bool is_pinned(const Tensor&) { return false; }

int cuda_driver_version() noexcept { return 0; }
std::string cuda_pci_bus_id(int) noexcept { return ""; }
void nvtx_push(const char*) noexcept {}
void nvtx_pop() noexcept {}
bool cuda_runtime_unloading() noexcept { return false; }
int cuda_get_device() { no_cuda("cuda_get_device"); }
void cuda_set_device(int) { no_cuda("DeviceGuard(cuda)"); }
void* cuda_pool_stream(int) { no_cuda("new_stream(cuda)"); }
void cuda_stream_synchronize(int, void*) { no_cuda("Stream::synchronize(cuda)"); }
void cuda_device_synchronize(int) { no_cuda("synchronize(cuda)"); }
void* cuda_event_create(int) { no_cuda("Event::record on a CUDA stream"); }
void cuda_event_destroy(int, void*) noexcept {}
void cuda_event_record(int, void*, void*) { no_cuda("Event::record on a CUDA stream"); }
void cuda_event_wait(void*, int, void*) { no_cuda("Event::wait on a CUDA stream"); }
void cuda_event_synchronize(void*) { no_cuda("Event::synchronize(cuda)"); }
bool cuda_event_query(void*) { no_cuda("Event::query(cuda)"); }
float cuda_event_elapsed_ms(void*, void*) { no_cuda("Event::elapsed_ms(cuda)"); }
void* cuda_pooled_event_record(int, void*) { no_cuda("recording a CUDA event"); }
void cuda_pooled_event_release(int, void*) noexcept {}
void cuda_stream_begin_capture(int, void*) { no_cuda("cuda::Graph::capture_begin"); }
void* cuda_stream_end_capture(int, void*, std::string& error) noexcept {
  error = "this ember build has no CUDA support";
  return nullptr;
}
void* cuda_graph_instantiate(int, void*) { no_cuda("cuda::Graph::capture_end"); }
void cuda_graph_launch(int, void*, void*) { no_cuda("cuda::Graph::replay"); }
void cuda_graph_destroy(int, void*, void*) noexcept {}
void* cuda_graph_rng_alloc(int) { no_cuda("cuda::Graph::capture_begin"); }
void cuda_graph_rng_set(int, void*, uint64_t, uint64_t, uint64_t) { no_cuda("cuda::Graph::capture_begin"); }
void cuda_graph_rng_advance(int, void*, void*) { no_cuda("cuda::Graph::capture_begin"); }
void cuda_graph_rng_free(int, void*) noexcept {}

}  // namespace detail
}  // namespace ember

#endif  // EMBER_WITH_CUDA
