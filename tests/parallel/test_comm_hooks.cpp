// DDP communication hooks (parallel/comm_hooks.h) on 2 and 3 CPU processes over the tcp backend:
// fp16_compress_hook and bf16_compress_hook average each bucket within the rounding that the
// dtype allows (derived below), keep the ranks identical, follow the no-hook run within that
// rounding carried through the optimizer, and hand half the bytes to the all-reduce; the empty
// hook, allreduce_hook and a user's hook give today's gradients (one all_reduce(avg) per bucket)
// bit for bit, the user's hook called once per bucket in launch order; fp16 divides by the world
// size before the sum, so values that would overflow f16 when summed do not. Plus, on a group of
// one: hook names, a hook returning no Work, register_comm_hook, and the ember-train config key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/parallel/comm_hooks.h>
#include <ember/parallel/ddp.h>
#include <ember/train/config.h>

#include "parallel/ddp_check.h"
#include "parallel/multiproc.h"
#include "support/error_of.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::error_of;
using namespace ember::testing;  // ddp_check.h: small_cnn, global_batch, child_group, ...

namespace {

constexpr double kLr = 0.05, kMomentum = 0.9;
const DdpOptions kSmallBuckets{.bucket_cap_mb = 0.0005};  // several buckets: launch order matters

// What one compressed all-reduce may change, per gradient element. Let u be the dtype's unit
// roundoff (round to nearest: f16 2^-11, bf16 2^-8) and eta half its smallest subnormal (f16
// 2^-25, bf16 2^-134): a rounding changes x by at most u|x| + eta. On its way to the average, rank
// r's gradient g_r goes through W + 1 roundings at most: the cast to the dtype, the division by the
// world size W, and the W - 1 additions of the ring's chain of partial sums (the copy back into the
// f32 bucket is exact). So
//   |result - sum_r g_r / W| <= ((1 + u)^(W + 1) - 1) * sum_r |g_r| / W + 2 (W + 1) eta
// (the factor 2 >= (1 + u)^W covers the later roundings of an absolute error).
struct Rounding {
  double u, eta;
};
Rounding rounding_of(DType dt) {
  return dt == DType::f16 ? Rounding{std::ldexp(1.0, -11), std::ldexp(1.0, -25)}
                          : Rounding{std::ldexp(1.0, -8), std::ldexp(1.0, -134)};
}
double allowed_error(DType dt, int world, double mean_abs) {
  const Rounding r = rounding_of(dt);
  return (std::pow(1 + r.u, world + 1) - 1) * mean_abs + 2 * (world + 1) * r.eta;
}

// Every element of the f32 tensor `t` is a value of `dt` (casting there and back changes nothing).
bool all_representable(const Tensor& t, DType dt) {
  return t.to(dt).to(DType::f32).to_vector<double>() == t.to_vector<double>();
}

bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].to_vector<double>() != b[i].to_vector<double>()) return false;
  return true;
}

std::vector<Tensor> grads_of(layers::Module& m) {
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad());
  return g;
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]));
  }
  return worst;
}

// Over the ranks, in f64: (sum_r g_r, sum_r |g_r|) of this rank's bucket input `g`.
std::pair<std::vector<double>, std::vector<double>> sums_over_ranks(ProcessGroup& pg, const std::vector<double>& g) {
  std::vector<double> abs_g(g.size());
  std::transform(g.begin(), g.end(), abs_g.begin(), [](double x) { return std::abs(x); });
  const auto n = static_cast<int64_t>(g.size());
  Tensor sum = from_vector(g, {n}), sum_abs = from_vector(abs_g, {n});
  pg.all_reduce(sum, ReduceOp::sum)->wait();
  pg.all_reduce(sum_abs, ReduceOp::sum)->wait();
  return {sum.to_vector<double>(), sum_abs.to_vector<double>()};
}

// DDP with the `dt` compression hook beside DDP without a hook, in lockstep on the same batches.
// After each backward, every bucket of the hook run holds values of `dt` within allowed_error of
// the exact average of the ranks' gradients (those the hook was handed, summed here in f64);
// after each step the parameters are the same on every rank and within the propagated bound of
// the no-hook run's. The hook hands the all-reduce half the bytes.
void compress_child(DType dt) {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  const CommHook compress = dt == DType::f16 ? fp16_compress_hook : bf16_compress_hook;
  layers::ModulePtr plain = small_cnn(100 + static_cast<uint64_t>(rank), false);
  layers::ModulePtr packed = small_cnn(100 + static_cast<uint64_t>(rank), false);
  DistributedDataParallel ref(plain, pg, kSmallBuckets);
  std::vector<std::vector<double>> inputs;  // this rank's gradients, per bucket, as handed to the hook
  std::vector<Tensor> buffers;  // the buckets themselves
  DdpOptions opts = kSmallBuckets;
  opts.comm_hook = [&](GradBucket& b) {
    inputs.push_back(b.buffer().to_vector<double>());
    buffers.push_back(b.buffer());
    return compress(b);
  };
  DistributedDataParallel ddp(packed, pg, opts);
  REQUIRE(ddp.buckets().size() > 1);
  optim::SGD opt(ddp.parameters(), {.lr = kLr, .momentum = kMomentum});
  optim::SGD ref_opt(ref.parameters(), {.lr = kLr, .momentum = kMomentum});

  // The parameters' bound, first order: with SGD momentum (v_k = mu v_{k-1} + g_k, p_k = p_{k-1} -
  // lr v_k) a gradient error of at most E_k per element at step k moves the momentum buffer by at
  // most dv_k = mu dv_{k-1} + E_k and the parameters by dp_k = dp_{k-1} + lr dv_k, E_k being the
  // largest allowed_error of step k. This ignores that the hook run's gradients are taken at
  // parameters already up to dp_{k-1} away (a further gradient change of |H| dp_{k-1}, H the loss's
  // Hessian); the factor 2 leaves room for it. Measured: the parameters differ by at most 0.28 of
  // the first-order bound dp (f16 and bf16, 2 and 3 ranks; rank 0 prints the ratio).
  double dv = 0, dp = 0, worst_ratio = 0;
  for (int step = 0; step < kSteps; ++step) {
    INFO("rank " << rank << " of " << world << ", " << dtype_name(dt) << ", step " << step);
    const Batch mine = global_batch(step, world * kBatch).rows(rank * kBatch, kBatch);
    inputs.clear();
    buffers.clear();
    train_step(ref_opt, ref, mine);
    // The exact averages are not all values of the dtype, so the check below has teeth.
    if (step == 0)
      for (const Tensor& g : grads_of(*plain)) CHECK_FALSE(all_representable(g, dt));

    opt.zero_grad();
    layers::cross_entropy(ddp(mine.x), mine.y).backward();
    REQUIRE(buffers.size() == ddp.buckets().size());
    double worst = 0, e_step = 0;  // worst |error| / allowed, largest allowed
    for (size_t i = 0; i < buffers.size(); ++i) {
      const auto [sum, sum_abs] = sums_over_ranks(*pg, inputs[i]);
      const std::vector<double> got = buffers[i].to_vector<double>();
      for (size_t k = 0; k < got.size(); ++k) {
        const double allowed = allowed_error(dt, world, sum_abs[k] / world);
        worst = std::max(worst, std::abs(got[k] - sum[k] / world) / allowed);
        e_step = std::max(e_step, allowed);
      }
      CHECK(all_representable(buffers[i], dt));  // what came back travelled as dt
    }
    CHECK(worst <= 1);
    opt.step();

    dv = kMomentum * dv + e_step;
    dp += kLr * dv;
    for (const Tensor& p : packed->parameters()) CHECK(same_on_all_ranks(*pg, p));
    const double diff = max_abs_diff(packed->parameters(), plain->parameters());
    CHECK(diff <= 2 * dp);
    worst_ratio = std::max(worst_ratio, diff / dp);
  }
  if (rank == 0)
    std::printf(
        "comm_hook %s on %d ranks: parameters differ from the no-hook run by at most %.3g of the "
        "first-order bound\n",
        dtype_name(dt), world, worst_ratio);

  const CommStats plain_stats = ref.take_comm_stats(), hook_stats = ddp.take_comm_stats();
  CHECK(plain_stats.bytes_reduced == plain_stats.bytes);
  CHECK(hook_stats.bytes == plain_stats.bytes);  // the same f32 buckets ...
  CHECK(2 * hook_stats.bytes_reduced == plain_stats.bytes_reduced);  // ... travelled in half the bytes
  CHECK(hook_stats.all_reduces == kSteps * static_cast<int64_t>(ddp.buckets().size()));
  CHECK(hook_stats.syncs == kSteps);
  CHECK(hook_stats.comm_seconds > 0);
}

// Today's reduction written out: each bucket's gradients (ddp.buckets() names them in slot order)
// packed into one flat tensor, one all_reduce(avg) of it, unpacked.
void reduce_like_today(ProcessGroup& pg, const std::vector<BucketInfo>& buckets, layers::Module& m) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, p] : m.named_parameters()) by_name[name] = p;
  for (const BucketInfo& b : buckets) {
    Tensor flat = empty({b.numel}, {.dtype = b.dtype});
    int64_t off = 0;
    for (const std::string& name : b.names) {
      const Tensor g = by_name.at(name).grad();
      flat.narrow(0, off, g.numel()).view(g.shape()).copy_(g);
      off += g.numel();
    }
    pg.all_reduce(flat, ReduceOp::avg)->wait();
    off = 0;
    for (const std::string& name : b.names) {
      Tensor g = by_name.at(name).grad();
      g.copy_(flat.narrow(0, off, g.numel()).view(g.shape()));
      off += g.numel();
    }
  }
}

// No hook, allreduce_hook (registered after construction) and a user's hook that records bucket
// indices and delegates to allreduce_hook, beside a module reduced as above: the same gradients
// and parameters bit for bit at every step; the user's hook ran once per bucket, in index order.
void bitwise_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  auto model = [&] { return small_cnn(100 + static_cast<uint64_t>(rank), false); };
  layers::ModulePtr m_none = model(), m_default = model(), m_user = model();
  layers::ModulePtr m_today = small_cnn(100, false);  // rank 0's start, which DDP broadcasts
  DistributedDataParallel none(m_none, pg, kSmallBuckets), dflt(m_default, pg, kSmallBuckets),
      user(m_user, pg, kSmallBuckets);
  dflt.register_comm_hook(allreduce_hook);
  std::vector<size_t> order;
  user.register_comm_hook([&order](GradBucket& b) {
    order.push_back(b.index());
    return allreduce_hook(b);
  });
  const size_t n_buckets = none.buckets().size();
  REQUIRE(n_buckets > 1);
  std::vector<size_t> launch_order(n_buckets);
  std::iota(launch_order.begin(), launch_order.end(), size_t{0});

  optim::SGD o_none(none.parameters(), {.lr = kLr, .momentum = kMomentum}),
      o_default(dflt.parameters(), {.lr = kLr, .momentum = kMomentum}),
      o_user(user.parameters(), {.lr = kLr, .momentum = kMomentum}),
      o_today(m_today->parameters(), {.lr = kLr, .momentum = kMomentum});
  for (int step = 0; step < kSteps; ++step) {
    INFO("rank " << rank << " of " << world << ", step " << step);
    const Batch mine = global_batch(step, world * kBatch).rows(rank * kBatch, kBatch);
    order.clear();
    for (auto [ddp, opt] : std::vector<std::pair<DistributedDataParallel*, optim::SGD*>>{
             {&none, &o_none}, {&dflt, &o_default}, {&user, &o_user}}) {
      opt->zero_grad();
      layers::cross_entropy((*ddp)(mine.x), mine.y).backward();
    }
    o_today.zero_grad();
    layers::cross_entropy(m_today->forward(mine.x), mine.y).backward();
    reduce_like_today(*pg, none.buckets(), *m_today);

    CHECK(bitwise_equal(grads_of(*m_none), grads_of(*m_today)));
    CHECK(bitwise_equal(grads_of(*m_default), grads_of(*m_none)));
    CHECK(bitwise_equal(grads_of(*m_user), grads_of(*m_none)));
    CHECK(order == launch_order);
    for (optim::Optimizer* o : std::vector<optim::Optimizer*>{&o_none, &o_default, &o_user, &o_today}) o->step();
    CHECK(bitwise_equal(m_none->parameters(), m_today->parameters()));
    CHECK(bitwise_equal(m_user->parameters(), m_none->parameters()));
  }
  const CommStats s = none.take_comm_stats(), u = user.take_comm_stats();
  CHECK(s.bytes_reduced == s.bytes);
  CHECK(u.bytes_reduced == s.bytes);
  CHECK(s.all_reduces == kSteps * static_cast<int64_t>(n_buckets));
}

// Gradients near f16's top: 49152 = 0.75 * 2^16 (a value of f16) on every rank sums to 98304 on
// 2 or 3 ranks, beyond f16's max 65504. Summed first they would be inf (the control below);
// fp16_compress_hook divides by the world size first, so every partial sum stays at most 49152.
void overflow_child() {
  auto pg = child_group();
  const int rank = pg->rank(), world = pg->world_size();
  const double big = 49152;
  const std::vector<float> mine{static_cast<float>(big), static_cast<float>(-big), static_cast<float>(1 + rank)};
  Tensor summed = from_vector(mine, {3}).to(DType::f16);
  pg->all_reduce(summed, ReduceOp::sum)->wait();
  CHECK(std::isinf(summed.to_vector<double>()[0]));  // the control: summing in f16 first overflows

  GradBucket bucket(0, from_vector(mine, {3}), pg);
  fp16_compress_hook(bucket)->wait();
  const std::vector<double> got = bucket.buffer().to_vector<double>();
  const std::vector<double> want{big, -big, 1 + (world - 1) / 2.0};  // the averages
  const std::vector<double> mean_abs{big, big, want[2]};
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("rank " << rank << " of " << world << ", element " << k << ": " << got[k]);
    CHECK(std::isfinite(got[k]));
    CHECK(std::abs(got[k] - want[k]) <= allowed_error(DType::f16, world, mean_abs[k]));
  }
  CHECK(bucket.bytes_reduced() == 3 * 2);
}

// The hidden child's `scenario` as a job of each size in `worlds`, each bounded by `limit_s`.
void run_jobs(const std::string& scenario, std::initializer_list<int> worlds, double limit_s) {
  for (int world : worlds) {
    INFO(scenario << " on " << world << " processes");
    testing::Ranks job("[.comm_hook_child]", world, {"EMBER_COMM_HOOK_SCENARIO=" + scenario});
    if (job.wait_all(limit_s)) job.check_all_passed();
  }
}

}  // namespace

TEST_CASE("comm_hook child", "[.comm_hook_child]") {
  testing::run_scenario("EMBER_COMM_HOOK_SCENARIO", {{"fp16", [] { compress_child(DType::f16); }},
                                                     {"bf16", [] { compress_child(DType::bf16); }},
                                                     {"bitwise", bitwise_child},
                                                     {"overflow", overflow_child}});
}

TEST_CASE("comm_hook: fp16 and bf16 compression on 2 and 3 processes: within the dtype's rounding, half the bytes",
          "[multiproc][parallel][ddp][comm_hook]") {
  run_jobs("fp16", {2, 3}, 120);
  run_jobs("bf16", {2, 3}, 120);
}

TEST_CASE("comm_hook: no hook, allreduce_hook and a user's hook reduce as before, bit for bit",
          "[multiproc][parallel][ddp][comm_hook]") {
  run_jobs("bitwise", {2, 3}, 120);
}

TEST_CASE("comm_hook: fp16 divides by the world size before the sum, so large gradients do not overflow",
          "[multiproc][parallel][ddp][comm_hook]") {
  run_jobs("overflow", {2, 3}, 60);
}

TEST_CASE("comm_hook: a group of one - names, a hook without Work, register_comm_hook, the config key",
          "[cpu][parallel][ddp][comm_hook]") {
  CHECK_FALSE(comm_hook_named("none"));
  CHECK(comm_hook_named("fp16"));
  CHECK(comm_hook_named("bf16"));
  CHECK_THAT(error_of([] { comm_hook_named("fp8"); }), Catch::Contains("'fp8'") && Catch::Contains("none, fp16"));

  const InitOptions o = testing::group_of_one_options(10);
  auto pg = init_process_group(o);
  layers::ModulePtr m = small_cnn(3, false), plain = small_cnn(3, false);
  DistributedDataParallel ddp(m, pg, {.comm_hook = [](GradBucket&) { return std::shared_ptr<Work>(); }});
  const Batch b = global_batch(0, kBatch);
  CHECK_THAT(error_of([&] { layers::cross_entropy(ddp(b.x), b.y).backward(); }),
             Catch::Contains("returned no Work for bucket 0"));

  // The reducer recovers; the next pass uses the hook registered now. One rank: the "average" is
  // this rank's gradient rounded to f16 once (division by 1 is exact).
  ddp.register_comm_hook(fp16_compress_hook);
  m->zero_grad();  // the failed pass accumulated its gradients
  layers::cross_entropy(ddp(b.x), b.y).backward();
  layers::cross_entropy(plain->forward(b.x), b.y).backward();
  const std::vector<Tensor> got = grads_of(*m), want = grads_of(*plain);
  double worst = 0;  // |error| / allowed
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(all_representable(got[i], DType::f16));
    CHECK_FALSE(all_representable(want[i], DType::f16));
    const auto g = got[i].to_vector<double>(), w = want[i].to_vector<double>();
    for (size_t k = 0; k < g.size(); ++k)
      worst = std::max(worst, std::abs(g[k] - w[k]) / allowed_error(DType::f16, 1, std::abs(w[k])));
  }
  CHECK(worst <= 1);
  destroy_process_group();

  // ember-train's key: parsed, and checked against its choices.
  CHECK(train::parse_config("{}", {"parallel.comm_hook=fp16"}).parallel.comm_hook == "fp16");
  CHECK(train::parse_config("{}").parallel.comm_hook == "none");
  CHECK_THAT(error_of([] { train::parse_config("{}", {"parallel.comm_hook=fp8"}); }),
             Catch::Contains("parallel.comm_hook") && Catch::Contains("none, fp16, bf16"));
}
