#pragma once
// Per-family registration of the CUDA implementations; register.cu calls them all.
#include <cstdint>

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

/// The convolution plans made so far in this process (kernels/cuda/conv.cu): on cuDNN's graph
/// API, and on its legacy calls (for a problem the graph API has no engine for), of which
/// `legacy_channels_last` are channels-last problems run on row-major copies; `searches` counts
/// the plan searches begun (a key's first call, or two threads racing on it), whether they found
/// a plan or threw. A plan is made on a problem's first call and reused after. For tests and
/// diagnostics.
struct ConvPlanCounts {
  int64_t graph = 0, legacy = 0, legacy_channels_last = 0, searches = 0;
};
ConvPlanCounts conv_plan_counts();

namespace detail {
/// For tests only: while set, new convolution plans skip cuDNN's graph-API search, as if it had
/// found no usable engine, and take the legacy fallback (problems planned before keep their plans).
void set_conv_graph_search_disabled_for_testing(bool disabled);
}  // namespace detail
}  // namespace ember::kernels::cuda
