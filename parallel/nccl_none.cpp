// parallel/process_group_nccl.h in builds without CUDA: NCCL is never usable.
#ifndef EMBER_WITH_CUDA

#include <ember/core/error.h>
#include <ember/parallel/process_group_nccl.h>

namespace ember::parallel {

bool nccl_usable(int) { return false; }

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store>, const RankInfo&, const GroupOptions&) {
  EMBER_FAIL("the nccl backend needs a CUDA build of ember (rebuild with -DEMBER_CUDA=ON); use backend \"tcp\" for ",
             "CPU tensors");
}

namespace detail {
void nccl_ring_self_exchange(const Tensor&, const Tensor&, ReduceOp) {
  EMBER_FAIL("nccl_ring_self_exchange needs a CUDA build of ember");
}
}  // namespace detail

}  // namespace ember::parallel

#endif  // EMBER_WITH_CUDA
