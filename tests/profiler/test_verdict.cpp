// profiler/verdict.h on synthetic spans whose shares are known: each finding (input-, communication-,
// compute-, launch-bound, optimizer) fires past its threshold with the measured share, the rank and
// its knobs; a profile below every threshold says "No bottleneck found"; only the thread that ran
// the steps counts; and a real mnist_cnn profile gives shares that add up within its steps.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/profiler/profile.h>
#include <ember/profiler/verdict.h>

using namespace ember;
using namespace ember::profiler;

namespace {

// Spans in microseconds on thread `thread`; depth from the caller (the spans of a case nest).
struct RankBuilder {
  RankProfile r;
  explicit RankBuilder(int rank = 0, bool cuda = false) {
    r.rank = rank;
    r.cuda = cuda;
    r.thread_names = {"main", "loader worker 0"};
  }
  RankBuilder& span(const std::string& name, Category c, uint64_t start_us, uint64_t end_us, uint32_t depth,
                    uint32_t thread = 0) {
    Span s;
    s.event.name = name;
    s.event.category = c;
    s.event.start_ns = start_us * 1000;
    s.event.end_ns = end_us * 1000;
    s.event.depth = depth;
    s.event.thread = thread;
    r.spans.push_back(s);
    return *this;
  }
  // The last span's kernels ran on GPU 0 from start_us to end_us.
  RankBuilder& gpu(uint64_t start_us, uint64_t end_us) {
    r.spans.back().event.gpu_device = 0;
    r.spans.back().event.gpu_start_ns = start_us * 1000;
    r.spans.back().event.gpu_end_ns = end_us * 1000;
    return *this;
  }
  RankProfile done() {
    compute_self_times(r.spans);
    return r;
  }
};

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("verdict: waiting for batches past a fifth of the step is input-bound", "[cpu][profiler]") {
  RankBuilder b;
  b.span("step 2", Category::step, 0, 1000, 0)
      .span("wait for batch", Category::data, 0, 400, 1)
      .span("conv2d", Category::op, 400, 850, 1)
      // The loader worker's collating is not the training thread's time.
      .span("collate batch", Category::data, 0, 1000, 0, 1);
  const Verdict v = verdict({b.done()});
  REQUIRE(v.ranks.size() == 1);
  CHECK(v.ranks[0].steps == 1);
  CHECK(v.ranks[0].input == Approx(0.4));
  CHECK(v.ranks[0].compute == Approx(0.45));
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].kind == "input-bound");
  CHECK(v.findings[0].share == Approx(0.4));
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "**input-bound**"));
  CHECK(contains(md, "40.0% of step time (threshold 20.0%)"));
  CHECK(contains(md, "`data.workers`"));
  CHECK(contains(md, "`data.resident`"));
  CHECK_FALSE(contains(md, "on rank"));  // one rank: no rank named
}

TEST_CASE("verdict: with data.workers 0, collating on the training thread is input time", "[cpu][profiler]") {
  RankBuilder b;
  b.span("step 1", Category::step, 0, 1000, 0)
      .span("collate batch", Category::data, 0, 600, 1)  // no workers: the training thread collates
      .span("conv2d", Category::op, 600, 950, 1);
  const Verdict v = verdict({b.done()});
  CHECK(v.ranks[0].input == Approx(0.6));
  REQUIRE_FALSE(v.findings.empty());
  CHECK(v.findings[0].kind == "input-bound");
  CHECK(contains(v.markdown(), "`data.workers`"));
}

TEST_CASE("verdict: exposed all-reduce on the slowest rank is communication-bound", "[cpu][profiler]") {
  RankBuilder r0(0), r1(1);
  r0.span("step 3", Category::step, 0, 1000, 0).span("wait for gradient all-reduce", Category::comm, 800, 900, 1);
  r1.span("step 3", Category::step, 0, 1000, 0).span("wait for gradient all-reduce", Category::comm, 600, 900, 1);
  const Verdict v = verdict({r0.done(), r1.done()});
  CHECK(v.ranks[0].comm == Approx(0.1));
  CHECK(v.ranks[1].comm == Approx(0.3));
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].kind == "communication-bound");
  CHECK(v.findings[0].rank == 1);
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "30.0% of step time on rank 1"));
  CHECK(contains(md, "`parallel.bucket_cap_mb`"));
  CHECK(contains(md, "`data.batch_size`"));
  CHECK(contains(md, "`parallel.comm_hook`"));
  CHECK(contains(md, "| 1 | 1 | 1.000 | 0.0% | 30.0% |"));  // the table row of rank 1
}

TEST_CASE("verdict: convolutions and matrix products past half the step are compute-bound", "[cpu][profiler]") {
  for (const bool cuda : {false, true}) {
    RankBuilder b(0, cuda);
    b.span("step 5", Category::step, 0, 1000, 0)
        .span("conv2d", Category::op, 0, 300, 1)
        .span("add", Category::op, 250, 300, 2)  // inside conv2d: not its own time
        .span("matmul", Category::op, 300, 400, 1)
        .span("Conv2dBackward", Category::backward, 400, 800, 1)
        .span("MatmulBackward", Category::backward, 800, 850, 1);
    const Verdict v = verdict({b.done()});
    CHECK(v.ranks[0].compute == Approx(0.8));  // 250 + 100 + 400 + 50 of 1000
    REQUIRE(v.findings.size() == 1);
    CHECK(v.findings[0].kind == "compute-bound");
    const std::string md = v.markdown();
    INFO(md);
    CHECK(contains(md, "80.0% of step time"));
    if (cuda) {
      CHECK(contains(md, "`precision` bf16 or fp16"));
      CHECK(contains(md, "`memory_format` channels_last"));
    } else {
      CHECK(contains(md, "On a CPU this is the arithmetic itself"));
    }
    CHECK(contains(md, "`data.batch_size`"));
  }
}

TEST_CASE("verdict: many tiny ops are launch-bound (per-op overhead on a CPU), naming the ops", "[cpu][profiler]") {
  for (const bool cuda : {false, true}) {
    RankBuilder b(0, cuda);
    b.span("step 1", Category::step, 0, 1000, 0);
    for (uint64_t i = 0; i < 60; ++i) b.span("add", Category::op, 10 * i, 10 * i + 5, 1);  // 5 us each
    for (uint64_t i = 0; i < 20; ++i) b.span("ReluBackward", Category::backward, 600 + 10 * i, 600 + 10 * i + 8, 1);
    b.span("conv2d", Category::op, 850, 950, 1);  // 100 us: not tiny
    const Verdict v = verdict({b.done()});
    CHECK(v.ranks[0].launch == Approx(0.46));  // 300 + 160 of 1000
    REQUIRE(v.ranks[0].tiny_ops.size() == 2);
    CHECK(v.ranks[0].tiny_ops[0] == "`add` (60 calls, 5.0 us)");  // the larger total first
    CHECK(v.ranks[0].tiny_ops[1] == "`ReluBackward` (20 calls, 8.0 us)");
    REQUIRE(v.findings.size() == 1);
    CHECK(v.findings[0].kind == "launch-bound");
    const std::string md = v.markdown();
    INFO(md);
    CHECK(contains(md, "46.0% of step time"));
    CHECK(contains(md, cuda ? "kernel launch" : "per-op overhead"));
    CHECK(contains(md, "`add` (60 calls, 5.0 us)"));
  }
}

TEST_CASE("verdict: on a CPU a matmul too small to be more than its overhead is launch time, not also compute",
          "[cpu][profiler]") {
  RankBuilder b;
  b.span("step 1", Category::step, 0, 1000, 0);
  for (uint64_t i = 0; i < 100; ++i) b.span("matmul", Category::op, 10 * i, 10 * i + 8, 1);  // 8 us each
  const Verdict v = verdict({b.done()});
  CHECK(v.ranks[0].launch == Approx(0.8));
  CHECK(v.ranks[0].compute == Approx(0.0));  // counted once: the shares are parts of one step
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].kind == "launch-bound");
}

TEST_CASE("verdict: with GPU time, a GPU idle while nothing is awaited is launch-bound, naming tiny kernels",
          "[cpu][profiler]") {
  RankBuilder b(0, true);
  b.span("step 2", Category::step, 100, 1100, 0)
      // The GPU finishes the previous step's kernels while the host waits for the batch: counted once.
      .span("wait for batch", Category::data, 100, 200, 1)
      .span("conv2d", Category::op, 60, 90, 0)
      .gpu(60, 150);  // before the step, 50 us inside it
  for (uint64_t i = 0; i < 60; ++i)
    b.span("add", Category::op, 200 + 10 * i, 200 + 10 * i + 4, 1).gpu(205 + 10 * i, 208 + 10 * i);
  // linear's kernels hold matmul's: one busy interval, not two.
  b.span("linear", Category::op, 800, 830, 1).gpu(850, 1000).span("matmul", Category::op, 805, 820, 2).gpu(850, 950);
  const Verdict v = verdict({b.done()});
  const RankShares& r = v.ranks[0];
  // Busy: 50 (the conv before, within the step) + 60 * 3 + 150 = 380 of 1000 us.
  CHECK(r.gpu_busy == Approx(0.38));
  CHECK(r.compute == Approx(0.20));  // conv2d's 50 and linear's 150: the GPU's, not the host spans'
  // Idle and unexplained: 1000 - (380 busy + 100 waiting for the batch - 50 of them overlapping) = 570.
  CHECK(r.launch == Approx(0.57));
  REQUIRE(r.tiny_ops.size() == 1);
  CHECK(r.tiny_ops[0] == "`add` (60 calls, 3.0 us on the GPU)");
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].kind == "launch-bound");
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "the GPU is idle 57.0% of step time (threshold 30.0%)"));
  CHECK(contains(md, "GPU busy 38.0%"));
  CHECK(contains(md, "`train.cuda_graphs` true"));
  CHECK(contains(md, "| GPU busy | GPU on conv/matmul | GPU waiting for launches |"));
  CHECK(contains(md, "| 0 | 1 | 1.000 | 10.0% | 0.0% | 38.0% | 20.0% | 57.0% | 0.0% |"));
}

TEST_CASE("verdict: with GPU time, compute-bound is the GPU running conv and matmul kernels", "[cpu][profiler]") {
  RankBuilder b(0, true);
  // The host launches in 40 us and then waits at the loss (an op that synchronises).
  b.span("step 0", Category::step, 0, 1000, 0)
      .span("conv2d", Category::op, 0, 20, 1)
      .gpu(20, 500)
      .span("Conv2dBackward", Category::backward, 20, 40, 1)
      .span("conv2d_backward", Category::op, 22, 38, 2)
      .gpu(500, 900)
      .span("item", Category::op, 40, 950, 1)
      .gpu(900, 950);
  const Verdict v = verdict({b.done()});
  const RankShares& r = v.ranks[0];
  CHECK(r.gpu_busy == Approx(0.93));
  CHECK(r.compute == Approx(0.88));
  CHECK(r.launch == Approx(0.07));  // 0-20 and 950-1000
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].kind == "compute-bound");
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "the GPU runs the kernels of convolutions and matrix products"));
  CHECK(contains(md, "88.0% of step time"));
  // No GPU time recorded (gpu_time off): the host's self times, as on a CPU.
  RankBuilder host(0, true);
  host.span("step 0", Category::step, 0, 1000, 0).span("conv2d", Category::op, 0, 20, 1);
  CHECK(rank_shares(host.done()).gpu_busy == -1);
}

TEST_CASE("verdict: an optimizer step past its threshold is a finding, several findings by share", "[cpu][profiler]") {
  RankBuilder b;
  b.span("step 0", Category::step, 0, 1000, 0)
      .span("wait for batch", Category::data, 0, 250, 1)
      .span("optimizer step", Category::optimizer, 700, 1000, 1)
      .span("mul", Category::op, 750, 900, 2);  // an op inside the step: the optimizer's time still
  const Verdict v = verdict({b.done()});
  CHECK(v.ranks[0].optimizer == Approx(0.3));
  REQUIRE(v.findings.size() == 2);
  CHECK(v.findings[0].kind == "optimizer");  // 30% before the input's 25%
  CHECK(v.findings[1].kind == "input-bound");
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "`train.accumulation_steps`"));
  CHECK(md.find("**optimizer**") < md.find("**input-bound**"));
}

TEST_CASE("verdict: below every threshold there is no bottleneck, and the closest share is named", "[cpu][profiler]") {
  RankBuilder b;
  b.span("step 4", Category::step, 0, 2000, 0)
      .span("wait for batch", Category::data, 0, 200, 1)  // 10%
      .span("conv2d", Category::op, 200, 800, 1)  // 30%
      .span("Conv2dBackward", Category::backward, 800, 1000, 1)  // 10%: conv/matmul 40%
      .span("optimizer step", Category::optimizer, 1800, 1900, 1);  // 5%
  const Verdict v = verdict({b.done()});
  CHECK(v.findings.empty());
  const std::string md = v.markdown();
  INFO(md);
  CHECK(contains(md, "No bottleneck found"));
  CHECK(contains(md, "the closest is conv/matmul at 40.0% (threshold 50.0%)"));
  // No spans at all: nothing to judge.
  CHECK(contains(verdict({}).markdown(), "No spans to judge"));
}

TEST_CASE("verdict: without step spans the shares are of the main thread's recorded time", "[cpu][profiler]") {
  RankBuilder b;
  b.span("wait for batch", Category::data, 100, 400, 0)
      .span("matmul", Category::op, 400, 500, 0)
      .span("collate batch", Category::data, 0, 2000, 0, 1);  // longer, but on the loader's thread
  const RankShares s = rank_shares(b.done());
  CHECK(s.thread == 0);
  CHECK(s.steps == 0);
  CHECK(s.step_ns == 400'000);  // 100 to 500 us
  CHECK(s.input == Approx(0.75));
}

TEST_CASE("verdict: a real mnist_cnn profile, ops_markdown holds the table and the verdict", "[cpu][profiler]") {
  auto model = models::mnist_cnn();
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  Generator gen(1);
  const Tensor x = randn({8, 1, 28, 28}, {}, gen);
  const Tensor y = from_vector(std::vector<int64_t>{3, 7, 1, 0, 2, 2, 9, 5}, {8});
  Profile p({.schedule = {.active = 2}});
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    layers::cross_entropy(model->forward(x), y).backward();
    opt.step();
    p.step();
  }
  p.stop();
  const RankProfile r = rank_profile(p, 0, false);
  const RankShares s = rank_shares(r);
  CHECK(s.steps == 2);
  CHECK(s.compute > 0);
  CHECK(s.optimizer > 0);
  CHECK(s.input == 0);  // no loader
  CHECK(s.compute + s.launch + s.optimizer <= 1.0 + 1e-9);  // disjoint parts of the steps
  const std::string md = ops_markdown({r});
  INFO(md);
  CHECK(contains(md, "| span | category | calls |"));
  CHECK(contains(md, "| conv2d | op | 4 |"));
  CHECK(contains(md, "## Verdict"));
  CHECK(contains(md, "| 0 | 2 |"));
}
