// The verdict under the profile's table (see verdict.h): shares of the training thread's step time
// per rank, each against its threshold, with the knobs that move it.
#include <ember/profiler/verdict.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

namespace ember::profiler {

namespace {

uint64_t duration(const Span& s) { return s.event.end_ns - s.event.start_ns; }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// conv2d, matmul (and linear, addmm, bmm, mm when a program records them) and their backward
// nodes (Conv2dBackward, MatmulBackward): the arithmetic of a network.
bool is_compute(const Span& s) {
  if (s.event.category != Category::op && s.event.category != Category::backward) return false;
  std::string n = s.event.name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return starts_with(n, "conv") || starts_with(n, "matmul") || starts_with(n, "linear") || starts_with(n, "addmm") ||
         starts_with(n, "bmm") || starts_with(n, "mm");
}

// The thread that ran the steps: the most step time; else the one named "main"; else the one with
// the most time in outermost spans.
uint32_t training_thread(const RankProfile& r) {
  std::map<uint32_t, uint64_t> step_time, top_time;
  for (const Span& s : r.spans) {
    if (s.event.category == Category::step) step_time[s.event.thread] += duration(s);
    if (s.event.depth == 0) top_time[s.event.thread] += duration(s);
  }
  const auto busiest = [](const std::map<uint32_t, uint64_t>& m) {
    return std::max_element(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  };
  if (!step_time.empty()) return busiest(step_time);
  for (uint32_t t = 0; t < r.thread_names.size(); ++t)
    if (r.thread_names[t] == "main" && top_time.count(t)) return t;
  return top_time.empty() ? 0 : busiest(top_time);
}

// Time intervals [start, end) in ns: merged (sorted, disjoint) they measure a union.
using Interval = std::pair<uint64_t, uint64_t>;

std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second) out.back().second = std::max(out.back().second, i.second);
    else out.push_back(i);
  }
  return out;
}

uint64_t length(const std::vector<Interval>& m) {
  uint64_t n = 0;
  for (const Interval& i : m) n += i.second - i.first;
  return n;
}

// The length of the intersection of two merged sets.
uint64_t overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  uint64_t n = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const uint64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return n;
}

bool has_gpu_time(const Span& s) { return s.event.gpu_device >= 0 && s.event.gpu_end_ns > s.event.gpu_start_ns; }

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", share * 100);
  return buf;
}

std::string on_rank(const Verdict& v, int rank) {
  return v.ranks.size() > 1 ? " on rank " + std::to_string(rank) : std::string();
}

}  // namespace

RankProfile rank_profile(const Profile& p, int rank, bool cuda) {
  return {.rank = rank, .spans = p.spans(), .thread_names = thread_names(), .cuda = cuda, .counters = p.counters()};
}

RankShares rank_shares(const RankProfile& r) {
  RankShares out;
  out.rank = r.rank;
  out.thread = training_thread(r);
  uint64_t first = UINT64_MAX, last = 0, steps_ns = 0, input = 0, comm = 0, compute = 0, optimizer = 0;
  uint64_t optimizer_end = 0;  // an optimizer span inside another is not counted twice
  struct OpTotal {
    int64_t calls = 0, gpu_calls = 0;
    uint64_t self_ns = 0, gpu_ns = 0;
    bool compute = false;  // is_compute
  };
  // The kept steps on the training thread (or its recorded time), the waits that explain an idle
  // GPU, and the GPU's intervals (every op with GPU time, any thread: all of them run this
  // rank's kernels).
  std::vector<Interval> windows, waits, gpu, gpu_compute;
  std::map<std::string, OpTotal> ops;
  std::vector<const Span*> mine;
  for (const Span& s : r.spans)
    if (s.event.thread == out.thread) mine.push_back(&s);
  std::stable_sort(mine.begin(), mine.end(),
                   [](const Span* a, const Span* b) { return a->event.start_ns < b->event.start_ns; });
  for (const Span* sp : mine) {
    const Span& s = *sp;
    first = std::min(first, s.event.start_ns);
    last = std::max(last, s.event.end_ns);
    switch (s.event.category) {
      case Category::step:
        ++out.steps;
        steps_ns += duration(s);
        windows.emplace_back(s.event.start_ns, s.event.end_ns);
        break;
      case Category::data:
        // Waiting for a worker's batch, or (data.workers 0) collating it on this thread.
        if (s.event.name == "wait for batch" || s.event.name == "collate batch") {
          input += duration(s);
          waits.emplace_back(s.event.start_ns, s.event.end_ns);
        }
        break;
      case Category::comm:
        if (s.event.name == "wait for gradient all-reduce") {
          comm += duration(s);
          waits.emplace_back(s.event.start_ns, s.event.end_ns);
        }
        break;
      case Category::optimizer:
        if (s.event.start_ns >= optimizer_end) {
          optimizer += duration(s);
          optimizer_end = s.event.end_ns;
        }
        break;
      case Category::op:
      case Category::backward: {
        if (is_compute(s)) compute += s.self_ns;
        OpTotal& t = ops[s.event.name];
        t.compute = is_compute(s);
        ++t.calls;
        t.self_ns += s.self_ns;
        if (has_gpu_time(s)) {
          ++t.gpu_calls;
          t.gpu_ns += s.event.gpu_end_ns - s.event.gpu_start_ns;
        }
        break;
      }
      case Category::user:
        break;
    }
  }
  for (const Span& s : r.spans)
    if (has_gpu_time(s)) {
      gpu.emplace_back(s.event.gpu_start_ns, s.event.gpu_end_ns);
      if (is_compute(s)) gpu_compute.emplace_back(s.event.gpu_start_ns, s.event.gpu_end_ns);
    }
  out.step_ns = out.steps > 0 ? steps_ns : (last > first ? last - first : 0);
  if (out.step_ns == 0) return out;
  const double total = static_cast<double>(out.step_ns);
  out.input = static_cast<double>(input) / total;
  out.comm = static_cast<double>(comm) / total;
  out.compute = static_cast<double>(compute) / total;
  out.optimizer = static_cast<double>(optimizer) / total;
  const bool on_gpu = !gpu.empty();
  if (on_gpu) {
    if (out.steps == 0) windows = {{first, last}};
    const std::vector<Interval> steps = merged(windows), busy = merged(gpu);
    out.gpu_busy = static_cast<double>(overlap(steps, busy)) / total;
    out.compute = static_cast<double>(overlap(steps, merged(gpu_compute))) / total;
    // Idle and not explained by a wait: the host is behind, queueing kernels.
    std::vector<Interval> explained = busy;
    explained.insert(explained.end(), waits.begin(), waits.end());
    out.launch = static_cast<double>(length(steps) - overlap(steps, merged(explained))) / total;
  }
  std::vector<std::pair<std::string, OpTotal>> tiny;
  uint64_t tiny_ns = 0;
  for (const auto& [name, t] : ops) {
    const bool is_tiny = on_gpu ? t.gpu_calls > 0 && t.gpu_ns < kTinyKernelNs * static_cast<uint64_t>(t.gpu_calls)
                                : t.self_ns < kTinyOpSelfNs * static_cast<uint64_t>(t.calls);
    if (is_tiny) {
      tiny.emplace_back(name, t);
      tiny_ns += t.self_ns;
    }
  }
  if (!on_gpu) {
    out.launch = static_cast<double>(tiny_ns) / total;
    // A conv or matmul too small to be more than its call's overhead counts there, not also as
    // compute: the shares stay parts of one step.
    uint64_t tiny_compute_ns = 0;
    for (const auto& [name, t] : tiny)
      if (t.compute) tiny_compute_ns += t.self_ns;
    out.compute = static_cast<double>(compute - tiny_compute_ns) / total;
  }
  std::stable_sort(tiny.begin(), tiny.end(),
                   [](const auto& a, const auto& b) { return a.second.self_ns > b.second.self_ns; });
  for (const auto& [name, t] : tiny) {
    char buf[64];
    if (on_gpu)
      std::snprintf(buf, sizeof buf, " (%lld calls, %.1f us on the GPU)", static_cast<long long>(t.gpu_calls),
                    static_cast<double>(t.gpu_ns) / 1e3 / static_cast<double>(t.gpu_calls));
    else
      std::snprintf(buf, sizeof buf, " (%lld calls, %.1f us)", static_cast<long long>(t.calls),
                    static_cast<double>(t.self_ns) / 1e3 / static_cast<double>(t.calls));
    out.tiny_ops.push_back("`" + name + "`" + buf);
  }
  return out;
}

Verdict verdict(const std::vector<RankProfile>& ranks) {
  Verdict v;
  for (const RankProfile& r : ranks) v.ranks.push_back(rank_shares(r));
  const bool cuda = std::any_of(ranks.begin(), ranks.end(), [](const RankProfile& r) { return r.cuda; });
  // The rank with the largest share of a kind.
  const auto worst = [&](double RankShares::*share) {
    const RankShares* w = nullptr;
    for (const RankShares& r : v.ranks)
      if (r.step_ns > 0 && (w == nullptr || r.*share > w->*share)) w = &r;
    return w;
  };
  const auto consider = [&](const char* kind, double RankShares::*share, double threshold, auto text_of) {
    const RankShares* w = worst(share);
    if (w == nullptr || !(w->*share > threshold)) return;
    v.findings.push_back({kind, w->rank, w->*share, threshold, text_of(*w)});
  };
  consider("input-bound", &RankShares::input, kInputBoundShare, [&](const RankShares& r) {
    return "**input-bound**: the training thread waits for batches (`wait for batch`) " + percent(r.input) +
           " of step time" + on_rank(v, r.rank) + " (threshold " + percent(kInputBoundShare) +
           "). Knobs: `data.workers` (more loader threads collating batches ahead), `data.resident` true (the "
           "dataset held on the device, batches gathered there).";
  });
  consider("communication-bound", &RankShares::comm, kCommBoundShare, [&](const RankShares& r) {
    return "**communication-bound**: the gradient all-reduce that backward did not hide (`wait for gradient "
           "all-reduce`) is " +
           percent(r.comm) + " of step time" + on_rank(v, r.rank) + " (threshold " + percent(kCommBoundShare) +
           "). Knobs: `parallel.bucket_cap_mb` (smaller buckets start all-reducing earlier in backward), a larger "
           "`data.batch_size` (more compute per byte sent), `parallel.comm_hook` fp16 or bf16 (half the bytes).";
  });
  consider("compute-bound", &RankShares::compute, kComputeBoundShare, [&](const RankShares& r) {
    const char* what = r.gpu_busy >= 0 ? "the GPU runs the kernels of convolutions and matrix products (`conv2d`, "
                                         "`matmul`) "
                                       : "convolutions and matrix products (`conv2d`, `matmul` and their backward "
                                         "nodes, their own time) are ";
    const std::string t = "**compute-bound**: " + std::string(what) + percent(r.compute) + " of step time" +
                          on_rank(v, r.rank) + " (threshold " + percent(kComputeBoundShare) + "). ";
    if (cuda)
      return t +
             "Knobs: `precision` bf16 or fp16 (tensor cores), `memory_format` channels_last (what tensor-core "
             "convolutions prefer), a larger `data.batch_size` (fuller kernels).";
    return t +
           "On a CPU this is the arithmetic itself: a GPU (`device`) is the big step; a larger `data.batch_size` "
           "amortises per-call costs; `precision` bf16/fp16 and `memory_format` channels_last pay on GPUs.";
  });
  consider("launch-bound", &RankShares::launch, kLaunchBoundShare, [&](const RankShares& r) {
    std::string which;
    for (size_t i = 0; i < r.tiny_ops.size() && i < 6; ++i) which += (i ? ", " : "") + r.tiny_ops[i];
    if (r.tiny_ops.size() > 6) which += " and " + std::to_string(r.tiny_ops.size() - 6) + " more";
    char us[32];
    std::snprintf(us, sizeof us, "%.0f us", static_cast<double>(kTinyOpSelfNs) / 1e3);
    if (r.gpu_busy >= 0) {
      char kernel_us[32];
      std::snprintf(kernel_us, sizeof kernel_us, "%.0f us", static_cast<double>(kTinyKernelNs) / 1e3);
      return "**launch-bound**: the GPU is idle " + percent(r.launch) + " of step time" + on_rank(v, r.rank) +
             " (threshold " + percent(kLaunchBoundShare) +
             ") while the training thread waits neither for a batch nor for the all-reduce: it waits for the "
             "host to queue kernels (GPU busy " +
             percent(r.gpu_busy) + "). " +
             (which.empty() ? std::string("No op's kernels average under ") + kernel_us + " a call"
                            : "Ops whose kernels average under " + std::string(kernel_us) + " a call: " + which) +
             ". Knobs: `train.cuda_graphs` true (the step replayed as one graph, no launch per op), a larger "
             "`data.batch_size` (the same launches do more work each); fewer, larger ops.";
    }
    if (cuda)
      return "**launch-bound**: ops whose host time averages under " + std::string(us) +
             " a call (little more than a kernel launch each) take " + percent(r.launch) + " of step time" +
             on_rank(v, r.rank) + " (threshold " + percent(kLaunchBoundShare) + "): " + which +
             ". Knobs: a larger `data.batch_size` (the same launches do more work each); fewer, larger ops.";
    return "**launch-bound (per-op overhead)**: ops averaging under " + std::string(us) +
           " of their own time a call take " + percent(r.launch) + " of step time" + on_rank(v, r.rank) +
           " (threshold " + percent(kLaunchBoundShare) + "): " + which +
           ". Each call's fixed cost (dispatch, autograd bookkeeping, allocation) outweighs its arithmetic. Knobs: a "
           "larger `data.batch_size` (the same calls do more work each); fewer, larger ops.";
  });
  consider("optimizer", &RankShares::optimizer, kOptimizerShare, [&](const RankShares& r) {
    return "**optimizer**: the optimizer step is " + percent(r.optimizer) + " of step time" + on_rank(v, r.rank) +
           " (threshold " + percent(kOptimizerShare) +
           "). Knobs: `train.accumulation_steps` (one optimizer step per N batches), a larger `data.batch_size` "
           "(fewer steps per epoch).";
  });
  std::stable_sort(v.findings.begin(), v.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.share > b.share; });
  return v;
}

std::string Verdict::markdown() const {
  std::string out = "## Verdict\n\n";
  if (ranks.empty() || std::all_of(ranks.begin(), ranks.end(), [](const RankShares& r) { return r.step_ns == 0; }))
    return out + "No spans to judge.\n";
  // With GPU time: conv/matmul and the launch share are the GPU's (verdict.h), and a GPU column.
  const bool gpu = std::any_of(ranks.begin(), ranks.end(), [](const RankShares& r) { return r.gpu_busy >= 0; });
  const char* launch_name = gpu ? "GPU waiting for launches" : "tiny ops";
  out += gpu ? "Shares of step time on the thread that ran the steps, and on its GPU"
             : "Shares of step time on the thread that ran the steps";
  out += " (thresholds: wait for batch " + percent(kInputBoundShare) + ", exposed all-reduce " +
         percent(kCommBoundShare) + ", conv/matmul " + percent(kComputeBoundShare) + ", " + launch_name + " " +
         percent(kLaunchBoundShare) + ", optimizer " + percent(kOptimizerShare) + "):\n\n";
  out += gpu ? "| rank | steps | step (ms) | wait for batch | exposed all-reduce | GPU busy | GPU on conv/matmul | GPU "
               "waiting for launches | optimizer |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"
             : "| rank | steps | step (ms) | wait for batch | exposed all-reduce | conv/matmul | tiny ops | optimizer "
               "|\n|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const RankShares& r : ranks) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f",
                  static_cast<double>(r.step_ns) / 1e6 / static_cast<double>(std::max<int64_t>(r.steps, 1)));
    out += "| " + std::to_string(r.rank) + " | " + std::to_string(r.steps) + " | " + ms + " | " + percent(r.input) +
           " | " + percent(r.comm) + " | ";
    if (gpu) out += (r.gpu_busy >= 0 ? percent(r.gpu_busy) : std::string("-")) + " | ";
    out += percent(r.compute) + " | " + percent(r.launch) + " | " + percent(r.optimizer) + " |\n";
  }
  out += "\n";
  if (findings.empty()) {
    // The largest share, to say how far from a finding the run is.
    const char* names[] = {"wait for batch", "exposed all-reduce", "conv/matmul", launch_name, "optimizer"};
    double RankShares::*members[] = {&RankShares::input, &RankShares::comm, &RankShares::compute, &RankShares::launch,
                                     &RankShares::optimizer};
    const double thresholds[] = {kInputBoundShare, kCommBoundShare, kComputeBoundShare, kLaunchBoundShare,
                                 kOptimizerShare};
    double best = -1;
    std::string what;
    for (const RankShares& r : ranks)
      for (size_t k = 0; k < 5; ++k)
        if (r.*members[k] / thresholds[k] > best) {
          best = r.*members[k] / thresholds[k];
          what = std::string(names[k]) + " at " + percent(r.*members[k]) +
                 (ranks.size() > 1 ? " on rank " + std::to_string(r.rank) : std::string()) + " (threshold " +
                 percent(thresholds[k]) + ")";
        }
    return out + "No bottleneck found: no share passes its threshold; the closest is " + what + ".\n";
  }
  for (const Finding& f : findings) out += "- " + f.text + "\n";
  return out;
}

std::string ops_markdown(const std::vector<RankProfile>& ranks, size_t top) {
  std::vector<Span> all;
  for (const RankProfile& r : ranks) all.insert(all.end(), r.spans.begin(), r.spans.end());
  std::string out;
  if (ranks.size() > 1)
    out += "Every op and span of the kept steps of " + std::to_string(ranks.size()) +
           " ranks together, by total time (ms); self time leaves out the spans inside.\n\n";
  else out += "Every op and span of the kept steps, by total time (ms); self time leaves out the spans inside.\n\n";
  out += table(all, {.top = top});
  out += "\n" + verdict(ranks).markdown();
  return out;
}

}  // namespace ember::profiler
