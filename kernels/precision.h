#pragma once
// Precision switches of the GPU's f32 math, process-wide (as torch.backends' allow_tf32 flags).
namespace ember {

/// Whether f32 matrix products and convolutions on a GPU may use TF32 tensor cores (cuBLAS's
/// CUBLAS_COMPUTE_32F_FAST_TF32, and cuDNN's engines with tensor-core numerics): about 10 bits of
/// mantissa in the products, several times the f32 throughput on Ampere and later. Off by
/// default, so that f32 results agree with the CPU's to f32 precision. One switch for both
/// (PyTorch has one for matmul and one for cuDNN). It changes nothing on the CPU, in builds
/// without CUDA, or for f16, bf16 and f64. Thread-safe; it takes effect from the next call, and
/// cached convolution plans are kept per setting.
void set_allow_tf32(bool on);
/// The current setting of set_allow_tf32 (false unless it was turned on).
bool allow_tf32();

}  // namespace ember
