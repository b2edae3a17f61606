// The nccl backend on one GPU (world size 1), the nccl ring's transport and CUDA reduction with the
// process as its own neighbour, the "auto" backend's routing, and the tcp backend staging CUDA
// tensors through pinned host memory. Runs only where a GPU is usable (ember_cuda_tests exits 77
// otherwise).
#include <catch2/catch.hpp>

#include <ember/ember.h>
#include <ember/parallel/init.h>
#include <ember/parallel/process_group_nccl.h>
#include <ember/parallel/ring.h>

#include "parallel/collective_check.h"
#include "support/error_of.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::coll_compare_rank;
using ember::testing::coll_fill;
using ember::testing::error_of;

namespace {

const Device kGpu = Device::cuda(0);
const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

Tensor filled_cpu(int64_t n, DType dt, uint64_t salt, int rank) {
  Tensor t = empty({n}, {.dtype = dt});
  coll_fill(t.data_ptr(), dt, n, salt, rank);
  return t;
}

std::shared_ptr<ProcessGroup> group_of_one(const std::string& backend, const std::string& algorithm = "native") {
  static std::shared_ptr<TcpStore> store = [] {
    TcpStoreOptions o;
    o.port = 0;
    o.is_server = true;
    o.timeout_s = 30;
    return std::make_shared<TcpStore>(o);
  }();
  InitOptions o;
  o.backend = backend;
  o.algorithm = algorithm;
  o.rank.rank = 0;
  o.rank.world_size = 1;
  o.timeout_s = 30;
  o.store = store;
  return init_process_group(o);
}

}  // namespace

TEST_CASE("nccl (world size 1): every collective, dtype and op, native and ring", "[cuda][parallel]") {
  for (const char* algorithm : {"native", "ring"}) {
    INFO("algorithm " << algorithm);
    auto pg = group_of_one("nccl", algorithm);
    CHECK(pg->backend() == "nccl");
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000003)}) {
      for (DType dt : kDtypes) {
        for (ReduceOp op : kOps) {
          Tensor t = filled_cpu(n, dt, 3, 0).to(kGpu);
          pg->all_reduce(t, op)->wait();
          Tensor back = t.to(Device::cpu());
          INFO(dtype_name(dt) << " " << reduce_op_name(op) << " n " << n);
          CHECK(testing::coll_compare_reduced(back.data_ptr(), dt, n, op, 3, 1) == "");
        }
        Tensor b = filled_cpu(n, dt, 4, 0).to(kGpu);
        pg->broadcast(b, 0)->wait();
        CHECK(coll_compare_rank(b.to(Device::cpu()).data_ptr(), dt, n, 4, 0) == "");
        Tensor out = zeros({n}, {.dtype = dt, .device = kGpu});
        pg->all_gather(out, b)->wait();
        CHECK(coll_compare_rank(out.to(Device::cpu()).data_ptr(), dt, n, 4, 0) == "");
        Tensor rs = zeros({n}, {.dtype = dt, .device = kGpu});
        pg->reduce_scatter(rs, b, ReduceOp::avg)->wait();
        CHECK(coll_compare_rank(rs.to(Device::cpu()).data_ptr(), dt, n, 4, 0) == "");
      }
    }
    pg->barrier()->wait();
    CHECK(pg->sequence_number() > 0);

    // A CPU tensor is an error naming both devices.
    CHECK_THAT(error_of([&] { pg->all_reduce(zeros({4})); }),
               Catch::Contains("is on cpu") && Catch::Contains("runs on cuda:0"));
  }
  destroy_process_group();
}

TEST_CASE("nccl ring: send/recv through ncclSend/ncclRecv and the CUDA reduction, every dtype and op",
          "[cuda][parallel]") {
  // With this process as its own next and previous rank, one exchange moves `src` into the
  // staging buffer and the ring's kernel reduces it into `dst`: dst = op(dst, src), which is the
  // world-size-2 reduction of the values of "ranks" 0 (dst) and 1 (src).
  for (DType dt : kDtypes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      for (int64_t n : {int64_t(1), int64_t(4097), int64_t(1000003)}) {
        Tensor dst = filled_cpu(n, dt, 8, 0).to(kGpu), src = filled_cpu(n, dt, 8, 1).to(kGpu);
        parallel::detail::nccl_ring_self_exchange(src, dst, op);
        INFO(dtype_name(dt) << " " << reduce_op_name(op) << " n " << n);
        CHECK(testing::coll_compare_reduced(dst.to(Device::cpu()).data_ptr(), dt, n, op, 8, 2) == "");
      }
    }
  }
}

TEST_CASE("auto backend: CUDA tensors to nccl, CPU tensors to tcp, and tcp stages CUDA tensors", "[cuda][parallel]") {
  auto pg = group_of_one("auto");
  CHECK(pg->backend() == "auto");
  Tensor cpu = filled_cpu(100, DType::f32, 6, 0), gpu = cpu.to(kGpu);
  pg->all_reduce(cpu, ReduceOp::avg)->wait();
  pg->all_reduce(gpu, ReduceOp::avg)->wait();
  CHECK(coll_compare_rank(gpu.to(Device::cpu()).data_ptr(), DType::f32, 100, 6, 0) == "");
  CHECK(coll_compare_rank(cpu.data_ptr(), DType::f32, 100, 6, 0) == "");

  // tcp with CUDA tensors: the result is copied back from pinned host memory.
  auto tcp = group_of_one("tcp");
  Tensor in = filled_cpu(1001, DType::bf16, 7, 0).to(kGpu);
  Tensor out = zeros({1001}, {.dtype = DType::bf16, .device = kGpu});
  tcp->all_gather(out, in)->wait();
  CHECK(coll_compare_rank(out.to(Device::cpu()).data_ptr(), DType::bf16, 1001, 7, 0) == "");
  destroy_process_group();
}
