// CUDA graphs on a GPU (core/cuda_graph.h, train/graph_step.h): a captured training step replays
// bitwise like the eager step on the same data (the same kernels run: a replay launches what the
// capture recorded), new data in the static input gives the eager values, replays allocate nothing,
// a host wait inside a capture throws naming the op and leaves the device usable, dropout draws a
// new mask per replay (the one eager would), Adam's replays use the eager step counts, re-captures
// give the old pool's memory back, and the trainer with train.cuda_graphs reaches the eager run's
// results, also across an epoch's eager last batch.
//
// Bitwise: eager and replayed steps run the same kernels with the same launch parameters on the
// same inputs, so they give the same bits; the trainer runs use train.deterministic so that cuDNN's
// backward engines (some sum with atomics) are deterministic in both runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/caching_allocator.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/determinism.h>
#include <ember/core/record.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/kernels/factory.h>
#include <ember/layers/activation.h>
#include <ember/layers/conv.h>
#include <ember/layers/dropout.h>
#include <ember/layers/linear.h>
#include <ember/layers/loss.h>
#include <ember/layers/sequential.h>
#include <ember/optim/adam.h>
#include <ember/optim/sgd.h>
#include <ember/train/config.h>
#include <ember/train/metrics.h>
#include <ember/train/trainer.h>
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using Catch::Contains;

namespace {

const Device kGpu = Device::cuda(0);

// A small conv net: conv, relu, dropout, flatten, linear. Input (8, 3, 8, 8), 10 classes.
std::shared_ptr<layers::Sequential> small_net(uint64_t seed, double dropout) {
  Generator gen(seed);
  auto net = std::make_shared<layers::Sequential>();
  net->push_back(std::make_shared<layers::Conv2d>(3, 4, 3, layers::Conv2dOptions{.padding = 1}, gen));
  net->push_back(std::make_shared<layers::ReLU>());
  net->push_back(std::make_shared<layers::Dropout>(dropout));
  net->push_back(std::make_shared<layers::Flatten>());
  net->push_back(std::make_shared<layers::Linear>(4 * 8 * 8, 10, true, gen));
  net->to(kGpu);
  return net;
}

struct Batch {
  Tensor input, target;
};

Batch batch(uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({8, 3, 8, 8}, {}, gen).to(kGpu);
  std::vector<int64_t> t(8);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((seed * 7 + i * 3) % 10);
  return {x, from_vector(t, {8}).to(kGpu)};
}

Tensor step_body(layers::Module& net, optim::Optimizer& opt, const Batch& b) {
  Tensor loss = layers::cross_entropy(net.forward(b.input), b.target);
  loss.backward();
  opt.step();
  return loss.detach();
}

std::vector<Tensor> params_of(layers::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().to(Device::cpu()));
  return out;
}

}  // namespace

namespace {
// Deterministic engines for a test's duration (cuDNN's backward may otherwise sum with atomics,
// and two runs of the same kernels could differ in the last bit).
struct DeterministicScope {
  bool was = ember::deterministic();
  DeterministicScope() { ember::set_deterministic(true); }
  ~DeterministicScope() { ember::set_deterministic(was); }
};
}  // namespace

TEST_CASE("cuda graph: replays of a captured conv step equal the eager steps bitwise, with new data", "[cuda]") {
  DeterministicScope deterministic;
  manual_seed(11);
  auto eager_net = small_net(3, 0.25);
  auto graph_net = small_net(3, 0.25);
  optim::SGD eager_opt(eager_net->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD graph_opt(graph_net->parameters(), {.lr = 0.1, .momentum = 0.9});
  // The dropout draws from the default generator; both runs start from the same offsets.
  const RngState s0 = default_generator().state();
  std::vector<float> eager_losses;
  for (uint64_t i = 0; i < 6; ++i) {
    eager_opt.zero_grad();
    eager_losses.push_back(step_body(*eager_net, eager_opt, batch(100 + i)).item<float>());
  }
  const auto eager_params = params_of(*eager_net);

  default_generator().set_state(s0);
  const Stream side = new_stream(kGpu);
  std::vector<float> graph_losses;
  {
    StreamGuard on_side(side);  // warm-up on the capture stream (handles, cuDNN engines)
    for (uint64_t i = 0; i < 2; ++i) {
      graph_opt.zero_grad();
      graph_losses.push_back(step_body(*graph_net, graph_opt, batch(100 + i)).item<float>());
    }
  }
  Batch statics = batch(102);
  graph_opt.zero_grad();
  cuda::Graph graph;
  Tensor static_loss;
  {
    cuda::GraphCapture capture(graph, side);
    static_loss = step_body(*graph_net, graph_opt, statics);
    capture.end();
  }
  REQUIRE(graph.captured());
  CHECK(graph.rng_stride() == 8 * 4 * 8 * 8 / 4);  // one dropout of 2048 elements per step
  CachingAllocator& alloc = cuda_caching_allocator(0);
  AllocatorStats before{};
  for (uint64_t i = 2; i < 6; ++i) {
    const Batch b = batch(100 + i);
    statics.input.copy_(b.input);
    statics.target.copy_(b.target);
    graph.replay();
    graph_losses.push_back(static_loss.item<float>());
    if (i == 2) before = alloc.stats();
  }
  const AllocatorStats after = alloc.stats();
  CHECK(after.num_backend_allocs == before.num_backend_allocs);  // replays allocate nothing new
  CHECK(after.private_pool_reserved > 0);
  for (size_t i = 0; i < eager_losses.size(); ++i) CHECK(graph_losses[i] == eager_losses[i]);
  ember::testing::check_same(params_of(*graph_net), eager_params, "parameters after 6 steps");
  // Re-captures (what a new learning rate does) give the old pool's memory back: without that, each
  // new pool kept one more step's working set reserved (at least one 2 MiB segment per capture).
  size_t reserved_first = 0;
  for (int k = 0; k < 4; ++k) {
    graph_opt.zero_grad();
    {
      cuda::GraphCapture capture(graph, side);
      static_loss = step_body(*graph_net, graph_opt, statics);
      capture.end();
    }
    graph.replay();
    synchronize(kGpu);
    if (k == 0) reserved_first = alloc.stats().reserved;
    else CHECK(alloc.stats().reserved <= reserved_first + (size_t{2} << 20));
  }
  graph.reset();
  CHECK(alloc.stats().private_pool_reserved == 0);
}

TEST_CASE("cuda graph: a host wait inside a capture throws naming the op; the device stays usable", "[cuda]") {
  auto net = small_net(5, 0.0);
  const Stream side = new_stream(kGpu);
  const Batch b = batch(7);
  {
    StreamGuard on_side(side);
    (void)sum(net->forward(b.input)).item<float>();  // warm-up: handles, engines
  }
  const Stream before = current_stream(kGpu);
  cuda::Graph graph;
  const std::string msg = ember::testing::error_of([&] {
    cuda::GraphCapture capture(graph, side);
    profiler::RecordScope op("my_loss_read", profiler::Category::op);
    Tensor y = sum(net->forward(b.input));
    (void)y.item<float>();  // a copy to the host: refused before it waits
  });
  CHECK_THAT(msg, Contains("cannot run while a CUDA graph is being captured") && Contains("in op my_loss_read"));
  CHECK_FALSE(graph.captured());
  CHECK_FALSE(detail::capturing());
  CHECK(current_stream(kGpu) == before);
  CHECK_THAT(ember::testing::error_of([&] { graph.replay(); }), Contains("the capture failed"));
  // The device works: an eager forward and a read.
  CHECK(std::isfinite(sum(net->forward(b.input)).item<float>()));
  synchronize(kGpu);
  // Random sampling other than dropout is refused by name (its offset would repeat).
  const std::string rand_msg = ember::testing::error_of([&] {
    cuda::GraphCapture capture(graph, side);
    (void)randn({4}, {.device = kGpu});
  });
  CHECK_THAT(rand_msg, Contains("cannot be captured in a CUDA graph"));
  CHECK(std::isfinite(sum(net->forward(b.input)).item<float>()));
}

TEST_CASE("cuda graph: a replay after the generator moved on the host is refused, a new capture replays", "[cuda]") {
  // Replay k draws dropout's numbers right after replay k - 1's; an eager draw between them took
  // those same numbers from the host generator, so the replay would hand them out twice.
  manual_seed(5);
  auto net = small_net(3, 0.25);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  const Stream side = new_stream(kGpu);
  {
    StreamGuard on_side(side);
    for (uint64_t i = 0; i < 2; ++i) {
      opt.zero_grad();
      (void)step_body(*net, opt, batch(300 + i));
    }
  }
  Batch statics = batch(302);
  cuda::Graph graph;
  auto capture = [&] {
    opt.zero_grad();
    cuda::GraphCapture c(graph, side);
    (void)step_body(*net, opt, statics);
    c.end();
  };
  capture();
  REQUIRE(graph.rng_stride() > 0);
  graph.replay();
  graph.replay();
  (void)rand({8}, {.device = kGpu});  // an eager draw from the default generator
  CHECK_THAT(ember::testing::error_of([&] { graph.replay(); }),
             Catch::Contains("moved since the last replay") && Catch::Contains("capture again"));
  CHECK(graph.replays() == 2);
  capture();
  graph.replay();
  manual_seed(6);
  CHECK_THAT(ember::testing::error_of([&] { graph.replay(); }), Catch::Contains("seed changed"));
  capture();
  manual_seed(7);
  CHECK_THAT(ember::testing::error_of([&] { graph.replay(); }), Catch::Contains("moved since the capture"));
  synchronize(kGpu);
}

TEST_CASE("cuda graph: Adam captured steps at the replay's step count, as eager Adam does", "[cuda]") {
  // The bias corrections 1 - beta^t change every step: a replay that kept the captured t would
  // drift from eager Adam at once (step 2 vs 3 differs by ~25% in lr / (1 - 0.9^t)).
  DeterministicScope deterministic;
  auto eager_net = small_net(21, 0.0);
  auto graph_net = small_net(21, 0.0);
  optim::Adam eager_opt(eager_net->parameters(), {.lr = 0.01});
  optim::Adam graph_opt(graph_net->parameters(), {.lr = 0.01});
  for (uint64_t i = 0; i < 7; ++i) {
    eager_opt.zero_grad();
    (void)step_body(*eager_net, eager_opt, batch(40 + i));
  }
  const Stream side = new_stream(kGpu);
  {
    StreamGuard on_side(side);
    for (uint64_t i = 0; i < 2; ++i) {
      graph_opt.zero_grad();
      (void)step_body(*graph_net, graph_opt, batch(40 + i));
    }
  }
  Batch statics = batch(42);
  graph_opt.zero_grad();
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph, side);
    (void)step_body(*graph_net, graph_opt, statics);
    capture.end();
  }
  for (uint64_t i = 2; i < 7; ++i) {
    const Batch b = batch(40 + i);
    statics.input.copy_(b.input);
    statics.target.copy_(b.target);
    graph.replay();
  }
  // The host step counts followed the replays (a checkpoint saves 7).
  const StateDict st = graph_opt.state_dict();
  bool saw_step = false;
  for (const auto& [name, t] : st)
    if (name.find("step") != std::string::npos && t.numel() == 1 && t.dtype() == DType::i64) {
      CHECK(t.item<int64_t>() == 7);
      saw_step = true;
    }
  CHECK(saw_step);
  // Same kernels on the same data; only the bias corrections come from the device's pow instead of
  // the host's (a last-bit difference in a double, rarely visible after the rounding to f32): the
  // parameters agree to a few f32 roundings of their size. A replay at the captured step count
  // would be off by ~1e-3 here (lr 0.01, corrections 25% apart).
  const auto e = params_of(*eager_net), g = params_of(*graph_net);
  for (size_t i = 0; i < e.size(); ++i) {
    const Tensor diff = amax(abs(e[i] - g[i]));
    const Tensor scale = amax(abs(e[i]));
    CHECK(diff.item<float>() <= 1e-6f * (1.0f + scale.item<float>()));
  }
}

TEST_CASE("cuda graph: cross_entropy is capturable; its class check is not armed inside", "[cuda]") {
  const Stream side = new_stream(kGpu);
  Tensor logits = randn({4, 5}).to(kGpu);
  Tensor target = from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4}).to(kGpu);
  {
    StreamGuard on_side(side);
    (void)layers::cross_entropy(logits, target).item<float>();
  }
  cuda::Graph graph;
  Tensor loss;
  {
    cuda::GraphCapture capture(graph, side);
    loss = layers::cross_entropy(logits, target);
    capture.end();
  }
  graph.replay();
  const float eager = layers::cross_entropy(logits, target).item<float>();
  CHECK(loss.item<float>() == eager);
}

namespace {
train::ExperimentConfig graph_run(const std::string& dir, bool graphs,
                                  train::OptimizerKind optimizer = train::OptimizerKind::sgd, int64_t epochs = 1) {
  train::ExperimentConfig c;
  c.name = graphs ? "graphs" : "eager";
  c.device = "cuda:0";
  c.seed = 9;
  c.epochs = epochs;
  c.model.name = train::ModelKind::cifar_cnn;  // with dropout
  c.data.dataset = train::DatasetKind::synthetic;
  c.data.limit_train = 544;  // 8 batches of 64 (3 warm-up, 1 capture, 4 replays) and one of 32 (eager)
  c.data.limit_test = 128;
  c.data.batch_size = 64;
  c.data.test_batch_size = 64;
  c.data.workers = 1;
  c.optim.name = optimizer;
  c.optim.lr = optimizer == train::OptimizerKind::sgd ? 0.02 : 1e-3;
  c.optim.momentum = optimizer == train::OptimizerKind::sgd ? 0.9 : 0.0;
  c.train.deterministic = true;
  c.train.cuda_graphs = graphs;
  c.output.run_dir = dir;
  c.output.log_interval = 1e6;
  return c;
}
}  // namespace

namespace {
// Trains `eager` and `graphs` (the same run without and with train.cuda_graphs) and checks that
// every epoch ends with the same bits: the same kernels on the same data under deterministic
// engines, so the losses of training and of the evaluation on the final parameters are equal, not
// just close.
void check_runs_equal(const train::ExperimentConfig& eager, const train::ExperimentConfig& graphs) {
  REQUIRE(train::Trainer(eager).run().exit_code == 0);
  REQUIRE(train::Trainer(graphs).run().exit_code == 0);
  const auto e = train::read_metrics_file(eager.output.run_dir + "/metrics.jsonl");
  const auto g = train::read_metrics_file(graphs.output.run_dir + "/metrics.jsonl");
  REQUIRE(e.size() == static_cast<size_t>(eager.epochs));
  REQUIRE(g.size() == e.size());
  for (size_t i = 0; i < e.size(); ++i) {
    INFO("epoch " << i + 1);
    CHECK(g[i].train_loss == e[i].train_loss);
    CHECK(g[i].test_loss == e[i].test_loss);
    CHECK(g[i].test_acc == e[i].test_acc);
  }
}
}  // namespace

TEST_CASE("cuda graph: the trainer with train.cuda_graphs ends where the eager run does", "[cuda][train]") {
  ember::testing::TempDir dir;
  DeterministicScope restore;  // train.deterministic sets the process-wide switch
  check_runs_equal(graph_run(dir.file("eager"), false), graph_run(dir.file("graphs"), true));
}

TEST_CASE("cuda graph: a learning rate that moves every step gives the graph up after 3 captures in a row",
          "[cuda][train]") {
  // Cosine moves the learning rate at every step; a captured step holds a fixed one. Steps 1-3 are
  // warm-up, 4 captures, 5 and 6 re-capture for their new rates, and at 7 (the third in a row) the
  // trainer gives the graph up: 7, 8 and the last batch run eagerly. The run still ends where the
  // eager one does, bit for bit, and the log says why the graphs went off.
  ember::testing::TempDir dir;
  DeterministicScope restore;
  train::ExperimentConfig eager = graph_run(dir.file("eager"), false), graphs = graph_run(dir.file("graphs"), true);
  eager.schedule.name = graphs.schedule.name = train::ScheduleKind::cosine;
  check_runs_equal(eager, graphs);
  std::ifstream log(dir.file("graphs") + "/log.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("the learning rate changed at 3 steps in a row") &&
                       Catch::Contains("CUDA graphs are off for the rest of the run"));
}

TEST_CASE("cuda graph: after an epoch's eager last batch the trainer re-captures; Adam and dropout stay in step",
          "[cuda][train]") {
  // Each epoch ends with an eager batch of 32; it moves Adam's step counts and dropout's offsets on
  // the host. Replaying the old graph in the second epoch would reuse a step count and draw masks
  // the eager batch already drew; the trainer captures again instead, so both epochs match eager.
  ember::testing::TempDir dir;
  DeterministicScope restore;
  const auto adam = train::OptimizerKind::adam;
  check_runs_equal(graph_run(dir.file("eager"), false, adam, 2), graph_run(dir.file("graphs"), true, adam, 2));
}
