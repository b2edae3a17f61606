#include <ember/kernels/cuda/cuda_kernels.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

void register_cuda_kernels() {
  cuda::register_elementwise();
  cuda::register_copy();
  cuda::register_random();
  cuda::register_reduce();
  cuda::register_matmul();
  cuda::register_softmax();
  cuda::register_index();
  cuda::register_conv();
  cuda::register_pool();
  cuda::register_norm();
  cuda::register_optim();
  cuda::register_amp();
}

}  // namespace ember::kernels
