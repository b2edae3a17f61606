#pragma once
// Per-family registration of the CUDA implementations; register.cu calls them all.
namespace ember::kernels::cuda {
void register_elementwise();  // unary, unary_backward, binary, binary_scalar, where
void register_copy();         // copy, fill, transfer
void register_random();       // sample
void register_reduce();       // reduce, argmax
void register_matmul();       // gemm (cuBLAS)
void register_softmax();      // softmax, softmax_backward, cross_entropy(+backward)
void register_index();        // index_select, index_add
}  // namespace ember::kernels::cuda
