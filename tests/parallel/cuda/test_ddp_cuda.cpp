// DistributedDataParallel on a GPU: 2 processes sharing cuda:0 over the tcp backend (CUDA tensors
// staged through pinned host memory) and 1 process over nccl. As on the CPU
// (tests/parallel/test_ddp.cpp), after every SGD-with-momentum step each rank's parameters equal
// those of one process trained on the whole batch. Runs only where a GPU is usable. Every child
// ends with its default group alive (no destroy_process_group) and must still exit with 0; a
// dedicated test also checks that such an exit is quiet.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <ember/ember.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"

using namespace ember;

TEST_CASE("ddp cuda child", "[.ddp_cuda_child]") {
  const int accumulation = std::getenv("EMBER_DDP_ACCUMULATION") ? std::atoi(std::getenv("EMBER_DDP_ACCUMULATION")) : 1;
  auto train = [accumulation](const char* backend) {
    return [accumulation, backend] { testing::train_and_compare(accumulation, false, backend, Device::cuda(0)); };
  };
  testing::run_scenario("EMBER_DDP_BACKEND", {{"tcp", train("tcp")}, {"nccl", train("nccl")}});
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

TEST_CASE("nccl exit child", "[.nccl_exit_child]") {
  // A program that ends with its default group alive (held in init_process_group's static, never
  // destroyed) and its last collective not waited for.
  auto run = [](const char* backend) {
    return [backend] {
      auto pg = testing::child_group(backend, Device::cuda(0));
      Tensor t = ones({1000}, {.device = Device::cuda(0)});
      pg->all_reduce(t, parallel::ReduceOp::sum)->wait();
      CHECK(t.to(Device::cpu()).to_vector<float>()[999] == 1.0f);
      pg->all_reduce(t, parallel::ReduceOp::sum);
    };
  };
  testing::run_scenario("EMBER_EXIT_BACKEND", {{"nccl", run("nccl")}, {"auto", run("auto")}});
}

TEST_CASE("a process that ends with a live nccl group exits with 0, quietly", "[cuda][parallel][ddp]") {
  // The default group outlives main; its communicator and watchdog must be shut down before the
  // CUDA runtime unloads (once this ended in std::terminate from the group's destructor).
  for (const char* backend : {"nccl", "auto"}) {
    INFO("backend " << backend);
    testing::Ranks job("[.nccl_exit_child]", 1, {std::string("EMBER_EXIT_BACKEND=") + backend});
    if (!job.wait_all(120)) continue;
    job.check_all_passed();
    const std::string out = job.output(0);
    INFO("output:\n" << out);
    CHECK_THAT(out, Catch::Contains("All tests passed") && !Catch::Contains("cudaErrorCudartUnloading") &&
                        !Catch::Contains("terminate called") && !Catch::Contains("watchdog stopped") &&
                        !Catch::Contains("could not restore"));
  }
}
