#pragma once
// The verdict under a profile's table: what bounds a training step, from the spans of one or
// several ranks, with the measured share of step time and the config keys that move it
// (docs/profiling.md, "The verdict"). Each share is measured on the thread that ran the steps
// (the one with the `step N` spans; else the one named "main"; else the busiest) over its kept
// steps' time:
//
//   input-bound          `wait for batch` (the training thread waiting for the loader)  > 20%
//   communication-bound  `wait for gradient all-reduce` (DDP's exposed all-reduce)      > 20%
//   compute-bound        self time of conv / matmul ops and their backward nodes        > 50%
//   launch-bound         self time of ops and backward nodes averaging < 20 us a call   > 30%
//                        (on a CPU: per-op overhead)
//   optimizer            the optimizer step                                              > 15%
//
// Where the ops carry GPU time (a profile on a GPU with ProfileOptions::gpu_time), an op's host
// span is only its launches, so two shares are read from the GPU's side instead:
//
//   compute-bound        the GPU running conv / matmul ops' kernels                      > 50%
//   launch-bound         the GPU idle while the training thread waits neither for a batch
//                        nor for the all-reduce: it waits for the host to queue kernels  > 30%
//                        (the ops named are those whose kernels average < 10 us a call)
//
// Several ranks: each share is the largest over the ranks (the slowest rank sets the pace), and
// the finding names that rank.
#include <cstdint>
#include <string>
#include <vector>

#include <ember/profiler/profile.h>

namespace ember::profiler {

inline constexpr double kInputBoundShare = 0.20;
inline constexpr double kCommBoundShare = 0.20;
inline constexpr double kComputeBoundShare = 0.50;
inline constexpr double kLaunchBoundShare = 0.30;
inline constexpr double kOptimizerShare = 0.15;
/// An op (or backward node) is tiny when its mean self time per call is under this.
inline constexpr uint64_t kTinyOpSelfNs = 20'000;
/// With GPU time: an op's kernels are tiny when they average under this a call (a launch costs
/// about 5 us of host time, so such an op cannot keep the GPU busy by itself).
inline constexpr uint64_t kTinyKernelNs = 10'000;

/// The spans of one rank (one process: one pid of a trace).
struct RankProfile {
  int rank = 0;
  std::vector<Span> spans;  // with self times (compute_self_times)
  std::vector<std::string> thread_names;  // by Event::thread; may be shorter (unnamed)
  /// The ops ran on a GPU: their host spans are launches (the launch-bound finding says so).
  bool cuda = false;
  std::vector<CounterSample> counters;  // the allocators' bytes in use (the trace's "C" events)
};

/// One rank's spans: p.spans() with thread_names() and p.counters().
RankProfile rank_profile(const Profile& p, int rank, bool cuda);

/// One rank's shares of step time.
struct RankShares {
  int rank = 0;
  uint32_t thread = 0;  // the training thread
  int64_t steps = 0;  // `step N` spans on it; 0: the shares are of its recorded time
  uint64_t step_ns = 0;  // the steps' total (or the recorded time from first start to last end)
  double input = 0, comm = 0, compute = 0, launch = 0, optimizer = 0;
  /// The share of step time in which the GPU ran any of this rank's ops' kernels (the union of
  /// their GPU intervals within the steps); -1 when no op carries GPU time. When measured,
  /// `compute` and `launch` are the GPU-side shares of the header's second table.
  double gpu_busy = -1;
  /// The tiny ops, by their total self time, descending: "add (312 calls, 6.1 us)"; with GPU
  /// time, those with tiny kernels: "add (312 calls, 3.2 us on the GPU)".
  std::vector<std::string> tiny_ops;
};

/// A share past its threshold.
struct Finding {
  std::string kind;  // "input-bound", "communication-bound", "compute-bound", "launch-bound", "optimizer"
  int rank = 0;  // the rank with the largest share
  double share = 0, threshold = 0;
  std::string text;  // one Markdown bullet's text: the measure and the knobs
};

struct Verdict {
  std::vector<RankShares> ranks;
  std::vector<Finding> findings;  // by share, descending; empty: no bottleneck found
  /// "## Verdict", a table of the shares per rank, then one bullet per finding (or "No
  /// bottleneck found: ...").
  std::string markdown() const;
};

RankShares rank_shares(const RankProfile& rank);
Verdict verdict(const std::vector<RankProfile>& ranks);

/// The body of ember-train's profile/ops.md: the table of every rank's spans together (the top
/// `top` rows by total time) and the verdict under it.
std::string ops_markdown(const std::vector<RankProfile>& ranks, size_t top = 40);

}  // namespace ember::profiler
