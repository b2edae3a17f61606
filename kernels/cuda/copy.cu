// CUDA copy (with dtype cast, any strides on both sides), fill, and raw cross-device transfer.
//
// Shape of the kernels:
//  * Same dtype, both sides contiguous: one cudaMemcpyAsync (the copy engine beats any kernel).
//  * Same dtype otherwise: the bits are moved by an elementwise kernel instantiated per element
//    size (u8/u16/u32/u64), not per dtype; launch_elementwise picks its vectorized contiguous loop
//    or its StridedIndexer loop (src may be a broadcast view with stride 0; dst may be strided).
//  * Different dtypes: one instantiation per (src, dst) pair through convert<D>(s) from
//    kernels/convert.h, the very function the CPU twin uses, so casts agree bit for bit.
//  * fill: zero on a contiguous tensor is a cudaMemsetAsync (all-zero bits are 0 in every dtype);
//    otherwise the value is converted once on the host and its bit pattern stored by a kernel
//    instantiated per element size.
//  * transfer: cudaMemcpyAsync on the current stream of the CUDA side, then a synchronize, so the
//    call is synchronous as kernels/copy.h promises. Between two GPUs it is a peer copy on the
//    source's current stream, after the destination's current stream has drained (the destination
//    block may have been freed and reused on that stream while older kernels still read it).
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include <ember/core/cuda_graph.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/cuda/loops.cuh>

namespace ember::kernels::cuda {
namespace {

template <typename D, typename S> struct ConvertF {
  __device__ D operator()(S s) const { return convert<D>(s); }
};

template <typename U> struct IdentityF {
  __device__ U operator()(U x) const { return x; }
};

template <typename U> struct ConstantF {
  U bits;
  __device__ U operator()() const { return bits; }
};

void copy_impl(const Tensor& src, const Tensor& dst) {
  // The front (kernels/copy.cpp: copy, cast and its staging copies) expands src to dst's shape and
  // takes cross-device copies through transfer_table: debug-only.
  EMBER_DEBUG_ASSERT(src.sizes() == dst.sizes(), "copy (cuda): source shape ", src.shape_str(),
                     " differs from destination shape ", dst.shape_str());
  EMBER_DEBUG_ASSERT(src.device() == dst.device(), "copy (cuda): source on ", src.device().str(),
                     " but destination on ", dst.device().str(), "; cross-device copies go through kernels::copy");
  const int64_t n = dst.numel();
  if (src.dtype() == dst.dtype()) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      launch_on(dst, [&](cudaStream_t stream) {
        CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(n) * dst.element_size(),
                                   cudaMemcpyDeviceToDevice, stream));
      });
      return;
    }
    dispatch_bits(dst.element_size(), "copy",
                  [&]<typename U>() { launch_elementwise<U>(dst, IdentityF<U>{}, operand<U>(src)); });
    return;
  }
  EMBER_DISPATCH_ALL(src.dtype(), "copy", [&]<typename S>() {
    EMBER_DISPATCH_ALL(dst.dtype(), "copy", [&]<typename D>() {
      if constexpr (!std::is_same_v<S, D>) {  // equal dtypes took the bit-moving path above
        launch_elementwise<D>(dst, ConvertF<D, S>{}, operand<S>(src));
      }
    });
  });
}

void fill_impl(const Tensor& dst, double value) {
  if (value == 0.0 && !std::signbit(value) && dst.is_contiguous()) {  // -0.0 must keep its sign bit
    launch_on(dst, [&](cudaStream_t stream) { zero_fill(dst, stream); });
    return;
  }
  EMBER_DISPATCH_ALL(dst.dtype(), "fill", [&]<typename T>() {
    const T v = convert<T>(value);
    using U = typename BitsOf<sizeof(T)>::type;
    U bits;
    std::memcpy(&bits, &v, sizeof(T));
    launch_elementwise<U>(dst, ConstantF<U>{bits});
  });
}

// ---- transfer ----

cudaStream_t current_cuda_stream(Device d) { return static_cast<cudaStream_t>(current_stream(d).handle()); }

// Lets `from` read and write `to`'s memory directly (NVLink/PCIe P2P) when the hardware allows, so
// cudaMemcpyPeerAsync need not stage through the host. Done once per ordered pair; failures are not
// errors (the peer copy still works, only slower).
void enable_peer_access_once(int from, int to) {
  static std::mutex mu;
  static std::set<std::pair<int, int>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert({from, to}).second) return;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    return;
  }
  DeviceGuard guard(Device::cuda(from));
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  // e.g. cudaErrorPeerAccessAlreadyEnabled: not sticky, but cleared so the next EMBER_LAUNCH_CHECK
  // (cudaGetLastError) does not report it against an unrelated kernel.
  if (err != cudaSuccess) (void)cudaGetLastError();
}

void transfer_impl(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  ember::detail::check_not_capturing(dst_device.is_cpu()   ? "a copy to the host (item(), to(cpu))"
                                     : src_device.is_cpu() ? "a copy from the host (to(cuda), from_vector)"
                                                           : "a copy between devices (to())");
  if (src_device.is_cpu()) {  // host -> device, ordered after earlier work on dst's stream
    DeviceGuard guard(dst_device);
    const cudaStream_t s = current_cuda_stream(dst_device);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
    Stream(dst_device, s).synchronize();  // counted, and reports failed device checks
    return;
  }
  if (dst_device.is_cpu()) {  // device -> host, after the kernels that produced src
    DeviceGuard guard(src_device);
    const cudaStream_t s = current_cuda_stream(src_device);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    Stream(src_device, s).synchronize();
    return;
  }
  if (src_device == dst_device) {
    DeviceGuard guard(src_device);
    const cudaStream_t s = current_cuda_stream(src_device);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
    Stream(src_device, s).synchronize();
    return;
  }
  // GPU -> other GPU. Drain dst's stream first (see the top comment), then copy on src's stream.
  {
    DeviceGuard guard(dst_device);
    current_stream(dst_device).synchronize();
  }
  enable_peer_access_once(src_device.index(), dst_device.index());
  DeviceGuard guard(src_device);
  const cudaStream_t s = current_cuda_stream(src_device);
  CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index(), src, src_device.index(), nbytes, s));
  Stream(src_device, s).synchronize();
}

}  // namespace

void register_copy() {
  copy_table.set(DeviceType::CUDA, &copy_impl);
  fill_table.set(DeviceType::CUDA, &fill_impl);
  transfer_table.set(DeviceType::CUDA, &transfer_impl);
}

}  // namespace ember::kernels::cuda
