#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/dispatch.h>

namespace ember::kernels {

void register_cpu_kernels() {
  cpu::register_elementwise();
  cpu::register_copy();
  cpu::register_random();
  cpu::register_reduce();
  cpu::register_matmul();
  cpu::register_softmax();
  cpu::register_index();
  cpu::register_optim();
  cpu::register_amp();
  cpu::register_conv();
  cpu::register_pool();
  cpu::register_norm();
}

}  // namespace ember::kernels
