#pragma once
// A test hook of the CUDA convolution (kernels/cuda/conv.cu), apart from cuda_kernels.h so that
// adding it recompiles only the convolution.
namespace ember::kernels::cuda::detail {
/// For tests only: while set, new convolution plans made under ember::set_deterministic(true) count
/// every cuDNN engine and algorithm as nondeterministic, so that they reach the error a problem with
/// no deterministic candidate raises (problems planned before keep their plans).
void set_conv_nondeterministic_only_for_testing(bool on);
}  // namespace ember::kernels::cuda::detail
