#pragma once
// Atomic adds for every dtype a scatter-add writes (index_add, max-pool's backward): the native
// atomics where the architecture has them (f16 from sm_70, bf16 from sm_80), otherwise a
// compare-and-swap on the aligned 32-bit word holding the element (u8 and bool have no byte
// atomics anywhere). Each add rounds to the element's dtype, as the native ones and the CPU do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/kernels/cuda/reduce_utils.cuh>

namespace ember::kernels::cuda {

/// 16-bit float add (Half, BFloat16) through a compare-and-swap on the aligned 32-bit word holding
/// it (older GPUs only); the sum is rounded to T once per add, as the native atomics do.
template <typename T> __device__ inline void atomic_add_16_cas(T* addr, float val) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
  const unsigned int shift = (a & 2) ? 16u : 0u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    T cur;
    cur.bits = static_cast<uint16_t>((assumed >> shift) & 0xffffu);
    const T sum = store_as<T>(load_as<float>(cur) + val);
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | (static_cast<unsigned int>(sum.bits) << shift));
  } while (old != assumed);
}

// 8-bit add through a compare-and-swap on the aligned 32-bit word holding it (no byte atomics):
// u8 wraps modulo 256, bool adds as logical or (what T(a + b) gives on the CPU).
template <typename T> __device__ inline void atomic_add_8_cas(T* addr, T val) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
  const unsigned int shift = static_cast<unsigned int>(a & 3) * 8u;
  const unsigned int v = static_cast<unsigned int>(val);
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int cur = (assumed >> shift) & 0xffu;
    const unsigned int sum = std::is_same_v<T, bool> ? ((cur | v) != 0u ? 1u : 0u) : ((cur + v) & 0xffu);
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (sum << shift));
  } while (old != assumed);
}

/// *addr += val, atomically: float, double, i32, i64, Half, BFloat16, u8 (wraps) and bool (or).
template <typename T> __device__ inline void atomic_add(T* addr, T val) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>) {
    atomicAdd(addr, val);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement: unsigned wrap-around addition is signed addition.
    atomicAdd(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(val));
  } else if constexpr (std::is_same_v<T, Half>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    atomicAdd(reinterpret_cast<__half*>(addr), __ushort_as_half(val.bits));
#else
    atomic_add_16_cas(addr, load_as<float>(val));
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(addr), __ushort_as_bfloat16(val.bits));
#else
    atomic_add_16_cas(addr, load_as<float>(val));
#endif
  } else {
    static_assert(std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>, "atomic_add: unexpected type");
    atomic_add_8_cas(addr, val);
  }
}

}  // namespace ember::kernels::cuda
