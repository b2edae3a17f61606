// The tcp backend on 2, 3 and 4 real processes over 127.0.0.1: all_reduce, broadcast, all_gather,
// reduce_scatter for sizes 0, 1, N-1, N+1 and 1000003, every dtype and reduce op, element by element
// against the expected values (integers exactly, floats against a float64 reduction with a
// dtype-derived tolerance); calls overlapped through their Work handles; tiny ring slices (many
// pipeline stages); barrier; send/recv; sequence numbers. Plus in-process checks of the argument
// errors on a group of one.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/init.h>
#include <ember/parallel/process_group_tcp.h>

#include "parallel/collective_check.h"
#include "parallel/multiproc.h"
#include "support/error_of.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::coll_compare_rank;
using ember::testing::coll_compare_reduced;
using ember::testing::coll_fill;
using ember::testing::error_of;

namespace {

const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

std::vector<int64_t> sizes_for(int world) { return {0, 1, world - 1, world + 1, 1000003}; }

Tensor filled(int64_t n, DType dt, uint64_t salt, int rank) {
  Tensor t = empty({n}, {.dtype = dt});
  coll_fill(t.data_ptr(), dt, n, salt, rank);
  return t;
}

// One rank of the "collectives" job (EMBER_PG_SCENARIO=collectives).
void collectives_child() {
  const int me = std::atoi(std::getenv("RANK"));
  InitOptions o;
  o.backend = "tcp";
  o.timeout_s = 60;
  o.store = testing::store_from_env(60);
  auto pg = init_process_group(o);
  o.slice_bytes = 24;  // a second group whose ring moves 24-byte slices: many pipeline stages
  auto tiny = init_process_group(o);
  REQUIRE(pg->rank() == me);
  const int n = pg->world_size(), r = pg->rank();
  CHECK(pg->info().source == "torchrun");
  CHECK(pg->backend() == "tcp");
  CHECK(pg->local_rank() == r);
  CHECK(&default_group() == tiny.get());
  uint64_t calls = 0;

  // all_reduce: the four ops of one dtype and size in flight together, then checked.
  for (int64_t size : sizes_for(n)) {
    for (DType dt : kDtypes) {
      std::vector<Tensor> ts;
      std::vector<std::shared_ptr<Work>> works;
      const uint64_t salt = uint64_t(size) * 7 + uint64_t(dt);
      for (ReduceOp op : kOps) {
        ts.push_back(filled(size, dt, salt, r));
        works.push_back(pg->all_reduce(ts.back(), op));
        ++calls;
      }
      for (size_t k = 0; k < works.size(); ++k) {
        works[k]->wait();
        CHECK(works[k]->is_completed());
        INFO("all_reduce size " << size);
        CHECK(coll_compare_reduced(ts[k].data_ptr(), dt, size, kOps[k], salt, n) == "");
      }
    }
  }
  CHECK(pg->sequence_number() == calls);

  for (int64_t size : {int64_t(n + 1), int64_t(1001)}) {
    for (DType dt : kDtypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        INFO("tiny-slice all_reduce size " << size);
        Tensor t = filled(size, dt, 99, r);
        tiny->all_reduce(t, op)->wait();
        CHECK(coll_compare_reduced(t.data_ptr(), dt, size, op, 99, n) == "");
      }
    }
  }

  // broadcast from every root; the receivers start with other values.
  for (int64_t size : sizes_for(n)) {
    for (DType dt : kDtypes) {
      for (int root = 0; root < n; ++root) {
        if (size > 1000 && root != n - 1) continue;  // the large size once per dtype
        INFO("broadcast size " << size << " root " << root);
        Tensor t = filled(size, dt, 5, r);
        pg->broadcast(t, root)->wait();
        CHECK(coll_compare_rank(t.data_ptr(), dt, size, 5, root) == "");
      }
    }
  }

  // all_gather and reduce_scatter with blocks of every size.
  for (int64_t m : sizes_for(n)) {
    for (DType dt : kDtypes) {
      INFO("all_gather block " << m);
      Tensor in = filled(m, dt, 11, r);
      Tensor out = empty({n, m}, {.dtype = dt});
      pg->all_gather(out, in)->wait();
      for (int q = 0; q < n; ++q) {
        const char* block = static_cast<const char*>(out.data_ptr()) + size_t(q * m) * dtype_size(dt);
        CHECK(coll_compare_rank(block, dt, m, 11, q) == "");
      }
      for (ReduceOp op : kOps) {
        if (m > 1000 && op != ReduceOp::sum && op != ReduceOp::max) continue;
        INFO("reduce_scatter block " << m << " " << reduce_op_name(op));
        Tensor input = filled(n * m, dt, 13, r);
        Tensor mine = empty({m}, {.dtype = dt});
        pg->reduce_scatter(mine, input, op)->wait();
        CHECK(coll_compare_reduced(mine.data_ptr(), dt, m, op, 13, n, r * m) == "");
        CHECK(coll_compare_rank(input.data_ptr(), dt, n * m, 13, r) == "");  // input untouched
      }
    }
  }

  // barrier: nobody passes before everybody has arrived.
  auto store = o.store;
  store->add("arrived", 1);
  pg->barrier()->wait();
  CHECK(store->get("arrived") == std::to_string(n));

  // send/recv around the ring (even ranks send first, so large messages cannot deadlock).
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t size : {int64_t(1), int64_t(300000)}) {
    Tensor out = filled(size, DType::f64, 21, r), in = empty({size}, {.dtype = DType::f64});
    if (r % 2 == 0) {
      pg->send(out, next)->wait();
      pg->recv(in, prev)->wait();
    } else {
      pg->recv(in, prev)->wait();
      pg->send(out, next)->wait();
    }
    CHECK(coll_compare_rank(in.data_ptr(), DType::f64, size, 21, prev) == "");
  }
  pg->barrier()->wait();
  destroy_process_group();
  CHECK_FALSE(is_initialized());
}

}  // namespace

TEST_CASE("tcp process group child", "[.pg_child]") {
  testing::run_scenario("EMBER_PG_SCENARIO", {{"collectives", collectives_child}});
}

TEST_CASE("tcp process group: every collective, size, dtype and op on 2, 3 and 4 processes", "[multiproc][parallel]") {
  for (int world : {2, 3, 4}) {
    INFO("world size " << world);
    testing::Ranks job("[.pg_child]", world, {"EMBER_PG_SCENARIO=collectives"});
    if (job.wait_all(180)) job.check_all_passed();
  }
}

TEST_CASE("tcp process group: a group of one, and argument errors", "[cpu][parallel]") {
  const InitOptions o = testing::group_of_one_options(10);
  auto pg = init_process_group(o);
  CHECK(is_initialized());
  CHECK(pg->info().source == "options");
  CHECK(pg->world_size() == 1);
  CHECK(pg->timeout_s() == 10);

  Tensor t = filled(5, DType::f32, 3, 0);
  pg->all_reduce(t, ReduceOp::avg)->wait();
  CHECK(coll_compare_rank(t.data_ptr(), DType::f32, 5, 3, 0) == "");
  Tensor out = empty({5}, {.dtype = DType::f32});
  pg->all_gather(out, t)->wait();
  CHECK(coll_compare_rank(out.data_ptr(), DType::f32, 5, 3, 0) == "");
  pg->barrier()->wait();
  CHECK(pg->sequence_number() == 3);

  CHECK_THAT(error_of([&] { pg->all_reduce(empty({4, 3}).t()); }), Catch::Contains("must be contiguous"));
  CHECK_THAT(error_of([&] { pg->all_reduce(empty({4}, {.dtype = DType::u8})); }),
             Catch::Contains("dtype u8") && Catch::Contains("f32, f64, f16, bf16, i32 and i64"));
  CHECK_THAT(error_of([&] { pg->broadcast(t, 1); }), Catch::Contains("root 1 is not a rank"));
  CHECK_THAT(error_of([&] { pg->send(t, 0); }), Catch::Contains("dst = 0 is not another rank"));
  CHECK_THAT(error_of([&] { pg->all_gather(empty({4}), t); }),
             Catch::Contains("'out' must hold 1 x 5 elements of f32") && Catch::Contains("(4,)"));
  CHECK_THAT(error_of([&] { pg->reduce_scatter(empty({2}), t); }), Catch::Contains("'input' must hold 1 x 2"));

  InitOptions bad = o;
  bad.backend = "mpi";
  CHECK_THAT(error_of([&] { init_process_group(bad); }), Catch::Contains("unknown backend 'mpi'"));
  destroy_process_group();
  CHECK_FALSE(is_initialized());
  CHECK_THAT(error_of([&] { default_group(); }), Catch::Contains("init_process_group() first"));
  // The group still works through the handle the caller kept.
  pg->barrier()->wait();
}
