// DistributedDataParallel on a GPU: 2 processes sharing cuda:0 over the tcp backend (CUDA tensors
// staged through pinned host memory) and 1 process over nccl. As on the CPU
// (tests/parallel/test_ddp.cpp), after every SGD-with-momentum step each rank's parameters equal
// those of one process trained on the whole batch. Runs only where a GPU is usable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"

using namespace ember;

TEST_CASE("ddp cuda child", "[.ddp_cuda_child]") {
  const char* backend = std::getenv("EMBER_DDP_BACKEND");
  const int accumulation = std::getenv("EMBER_DDP_ACCUMULATION") ? std::atoi(std::getenv("EMBER_DDP_ACCUMULATION")) : 1;
  if (backend != nullptr) testing::train_and_compare(accumulation, false, backend, Device::cuda(0));
}

TEST_CASE("ddp on cuda:0: 2 processes over tcp, 1 over nccl, like one process", "[cuda][parallel][ddp]") {
  for (const char* accumulation : {"1", "2"}) {
    INFO("accumulation " << accumulation);
    testing::Ranks tcp("[.ddp_cuda_child]", 2,
                       {"EMBER_DDP_BACKEND=tcp", std::string("EMBER_DDP_ACCUMULATION=") + accumulation});
    if (tcp.wait_all(180)) tcp.check_all_passed();
    testing::Ranks nccl("[.ddp_cuda_child]", 1,
                        {"EMBER_DDP_BACKEND=nccl", std::string("EMBER_DDP_ACCUMULATION=") + accumulation});
    if (nccl.wait_all(180)) nccl.check_all_passed();
  }
}
