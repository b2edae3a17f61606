#pragma once
// Per-family registration of the CUDA implementations; register.cu calls them all.
namespace ember::kernels::cuda {
void register_elementwise();  // unary, unary_backward, binary, binary_scalar, where
void register_copy();  // copy, fill, transfer
void register_random();  // sample
void register_reduce();  // reduce, argmax
void register_matmul();  // gemm (cuBLAS)
void register_softmax();  // softmax, softmax_backward, cross_entropy(+backward)
void register_index();  // index_select, index_add
void register_conv();  // conv2d forward, backward-input, backward-weight (cuDNN)
void register_pool();  // max/avg/adaptive-avg pool2d and their backwards
void register_norm();  // batch_norm(+backward) (cuDNN), dropout
void register_optim();  // sgd_step, adam_step, global_norm, clip_by_norm
void register_amp();  // non_finite_check_and_unscale
}  // namespace ember::kernels::cuda
