// ember::set_deterministic (core/determinism.h) and what the CPU kernels promise without it: every
// op below gives bitwise the same result when run twice and with the switch on (the CPU ignores
// it); the reductions, batch norm, softmax, index_add, pooling and a whole mnist_cnn step also with
// the thread pool at 1, 2 and 3 threads (the work is cut differently; the summation order does
// not follow the cut). Matrix products and convolutions do follow the thread count (measured here:
// f64 matmul and f32 conv2d differ in the last bits between 1, 2 and 3 threads), so for them the
// promise is per thread count. Sizes are chosen so that each op
// really splits over the pool (past its grain): matmul's BLAS blocks of C, the reductions' R
// blocks, batch norm's channel blocks, the convolution's per-image GEMMs and im2col, the index_add
// tiles. docs/determinism.md lists these facts; the [cuda] side is tests/cuda/test_determinism_cuda.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/autograd/ops_conv.h>
#include <ember/autograd/ops_norm.h>
#include <ember/core/determinism.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/core/thread_pool.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/index.h>
#include <ember/layers/loss.h>
#include <ember/models/mnist_cnn.h>
#include <ember/optim/sgd.h>
#include "support/bitwise.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::check_same;
using ember::testing::Outputs;
using ember::testing::random_tensor;
using ember::testing::seeded_indices;

namespace {

struct RestoreThreads {
  int saved = num_threads();
  ~RestoreThreads() { set_num_threads(saved); }
};

/// Runs fn at 1 thread (twice), then at 2 and 3 threads, and with the determinism switch on;
/// every run must give the bytes of the first.
void require_deterministic(const std::string& what, const std::function<Outputs()>& fn) {
  RestoreThreads restore;
  set_num_threads(1);
  const Outputs ref = fn();
  check_same(ref, fn(), what + " (1 thread, run twice)");
  for (int n : {2, 3}) {
    set_num_threads(n);
    REQUIRE(num_threads() == n);
    check_same(ref, fn(), what + " (" + std::to_string(n) + " threads against 1)");
  }
  DeterministicGuard on(true);
  check_same(ref, fn(), what + " (3 threads, set_deterministic(true))");
}

/// For the ops whose result follows the thread count (their GEMMs split the sum over K by thread:
/// docs/determinism.md): at 1, 2 and 3 threads, and with the switch on, each run gives the bytes
/// of the run before it with the same thread count.
void require_reproducible_per_thread_count(const std::string& what, const std::function<Outputs()>& fn) {
  RestoreThreads restore;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    REQUIRE(num_threads() == n);
    const Outputs first = fn();
    check_same(first, fn(), what + " (" + std::to_string(n) + " threads, run twice)");
    DeterministicGuard on(true);
    check_same(first, fn(), what + " (" + std::to_string(n) + " threads, set_deterministic(true))");
  }
}

Tensor leaf(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Tensor t = random_tensor(s, dt, seed);
  t.requires_grad_(true);
  return t;
}

/// Forward outputs then every leaf's gradient, after backward of sum(out * fixed weights).
Outputs with_grads(const Tensor& out, const std::vector<Tensor>& leaves, uint64_t seed) {
  const Tensor r = random_tensor(out.sizes(), out.dtype(), seed);
  sum(mul(out, r)).backward();
  Outputs o{out.detach()};
  for (const Tensor& l : leaves) o.push_back(l.grad());
  return o;
}

}  // namespace

TEST_CASE("determinism: the switch, its guard and the error of an op without a deterministic path", "[cpu]") {
  REQUIRE_FALSE(deterministic());  // off unless a program asks
  CHECK_NOTHROW(detail::alert_nondeterministic("some_op (cuda)"));  // off: nothing to alert
  {
    DeterministicGuard on(true);
    CHECK(deterministic());
    CHECK_THROWS_WITH(detail::alert_nondeterministic("some_op (cuda)", "atomics"),
                      Catch::Contains("some_op (cuda) has no deterministic implementation (atomics)") &&
                          Catch::Contains("set_deterministic(false)") && Catch::Contains("train.deterministic"));
    {
      DeterministicGuard off(false);
      CHECK_FALSE(deterministic());
    }
    CHECK(deterministic());  // the inner guard restored the outer setting
  }
  CHECK_FALSE(deterministic());
  set_deterministic(true);
  CHECK(deterministic());
  set_deterministic(false);
  CHECK_FALSE(deterministic());
}

TEST_CASE("determinism (cpu): matrix products are reproducible at a given thread count", "[cpu][determinism]") {
  // Large enough that the BLAS path cuts C into one block per thread (kernels/cpu/matmul.cpp) and
  // the blocked GEMM splits its tiles; 3 threads make uneven blocks.
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    const Tensor a = random_tensor({301, 257}, dt, 1), b = random_tensor({257, 190}, dt, 2);
    const Tensor tall = random_tensor({1000, 64}, dt, 3), narrow = random_tensor({64, 9}, dt, 4);
    const Tensor ba = random_tensor({2, 67, 130}, dt, 5), bb = random_tensor({2, 130, 64}, dt, 6);
    require_reproducible_per_thread_count("matmul", [&] {
      return Outputs{matmul(a, b), matmul(tall, narrow), matmul(ba, bb)};
    });
    require_reproducible_per_thread_count("matmul backward", [&] {
      const Tensor x = leaf({301, 257}, 7, dt), w = leaf({257, 190}, 8, dt);
      return with_grads(matmul(x, w), {x, w}, 9);
    });
  }
}

TEST_CASE("determinism (cpu): conv2d forward and both backwards are reproducible at a given thread count",
          "[cpu][determinism]") {
  struct Case {
    const char* name;
    Shape x, w;
    Conv2dFuncOptions opt;
    bool channels_last;
  };
  const std::vector<Case> cases = {
      {"3x3 pad 1", {8, 16, 20, 20}, {32, 16, 3, 3}, {.padding = 1}, false},
      {"3x3 pad 1 channels-last", {8, 16, 20, 20}, {32, 16, 3, 3}, {.padding = 1}, true},
      {"stride 2, groups 2", {6, 8, 17, 17}, {12, 4, 5, 5}, {.stride = 2, .padding = 2, .groups = 2}, false},
      {"1x1", {4, 32, 16, 16}, {64, 32, 1, 1}, {}, false},
  };
  for (const Case& c : cases) {
    require_reproducible_per_thread_count(std::string("conv2d ") + c.name, [&] {
      Tensor x = random_tensor(c.x, DType::f32, 11), w = random_tensor(c.w, DType::f32, 12);
      if (c.channels_last) {
        x = x.contiguous(MemoryFormat::channels_last);
        w = w.contiguous(MemoryFormat::channels_last);
      }
      x.requires_grad_(true);
      w.requires_grad_(true);
      const Tensor b = leaf({c.w[0]}, 13);
      return with_grads(conv2d(x, w, b, c.opt), {x, w, b}, 14);
    });
  }
}

TEST_CASE("determinism (cpu): sums and means do not depend on the thread count", "[cpu][determinism]") {
  // A full sum of 2^20 values goes over R blocks (kernels/cpu/reduce.cpp); (64, 40000) over dim 1
  // too (few outputs); dim 0 of (4096, 64) over output elements.
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor big = random_tensor({int64_t{1} << 20}, dt, 21);
    const Tensor wide = random_tensor({64, 40000}, dt, 22), tall = random_tensor({4096, 64}, dt, 23);
    require_deterministic("sum / mean", [&] {
      return Outputs{sum(big), mean(big), sum(wide, {1}), mean(wide, {1}), sum(tall, {0}), mean(tall, {0, 1})};
    });
  }
}

TEST_CASE("determinism (cpu): batch norm (training, both layouts) does not depend on the thread count",
          "[cpu][determinism]") {
  for (const Shape& s : {Shape{16, 8, 24, 24}, Shape{4096, 64}}) {
    for (bool channels_last : {false, true}) {
      if (channels_last && s.size() != 4) continue;
      INFO("shape " << shape_str(s) << (channels_last ? " channels-last" : ""));
      require_deterministic("batch_norm", [&] {
        Tensor x = random_tensor(s, DType::f32, 31, -2.0, 3.0);
        if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
        x.requires_grad_(true);
        const Tensor weight = leaf({s[1]}, 32), bias = leaf({s[1]}, 33);
        const Tensor rm = zeros({s[1]}), rv = ones({s[1]});
        Outputs o = with_grads(batch_norm(x, weight, bias, rm, rv, true), {x, weight, bias}, 34);
        o.push_back(rm);
        o.push_back(rv);
        return o;
      });
    }
  }
}

TEST_CASE("determinism (cpu): softmax, log-softmax and cross-entropy do not depend on the thread count",
          "[cpu][determinism]") {
  const Tensor target = seeded_indices(512, 100, 40);
  require_deterministic("softmax / cross_entropy", [&] {
    const Tensor x = leaf({512, 100}, 41), y = leaf({100, 300}, 42);
    const Tensor loss = add(add(cross_entropy(x, target, 0.1), sum(mul(softmax(x, 1), random_tensor({512, 100})))),
                            sum(mul(log_softmax(y, 0), random_tensor({100, 300}))));
    loss.backward();
    return Outputs{loss.detach(), x.grad(), y.grad()};
  });
}

TEST_CASE("determinism (cpu): index_add, embedding backward and pooling backward do not depend on the thread count",
          "[cpu][determinism]") {
  // Duplicate indices: index_add walks the index in order inside each tile (kernels/cpu/index.cpp).
  const Tensor idx = seeded_indices(5000, 300, 50);
  require_deterministic("index_add / index_select backward", [&] {
    const Tensor out = random_tensor({3, 300, 700}, DType::f32, 51);
    kernels::index_add(out, 1, idx.narrow(0, 0, 40), random_tensor({3, 40, 700}, DType::f32, 52));
    const Tensor table = leaf({300, 64}, 53);
    Outputs o = with_grads(index_select(table, 0, idx), {table}, 54);
    o.push_back(out);
    return o;
  });
  require_deterministic("max_pool2d / avg_pool2d backward (overlapping windows)", [&] {
    const Tensor x = leaf({8, 16, 33, 33}, 55);
    const Tensor y = add(max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}),
                         avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}));
    return with_grads(y, {x}, 56);
  });
}

TEST_CASE("determinism (cpu): an mnist_cnn training step does not depend on the thread count or the run",
          "[cpu][determinism]") {
  // Two SGD steps with momentum (dropout drawing from the seeded default generator): the loss, the
  // logits and every parameter after the steps.
  const Tensor x = random_tensor({32, 1, 28, 28}, DType::f32, 61, 0.0, 1.0);
  const Tensor target = seeded_indices(32, 10, 60);
  require_deterministic("mnist_cnn steps", [&] {
    Generator init(7);
    auto model = models::mnist_cnn(init);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    manual_seed(99);
    Outputs o;
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const Tensor logits = model->forward(x);
      const Tensor loss = layers::cross_entropy(logits, target);
      loss.backward();
      opt.step();
      o.push_back(logits.detach());
      o.push_back(loss.detach());
    }
    for (const Tensor& p : model->parameters()) o.push_back(p.detach().clone());
    return o;
  });
}
