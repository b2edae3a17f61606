#pragma once
// Profile: a profiling session over the recording hook of core/record.h (PyTorch's
// torch.profiler.profile), with torch.profiler.schedule's wait / warmup / active / repeat steps.
//
//   profiler::Profile p({.schedule = {.wait = 1, .warmup = 1, .active = 3}});
//   for (...) { train_step(); p.step(); }      // steps 2-4 (0-based) are kept
//   p.stop();
//   std::puts(p.table().c_str());              // per span name: calls, total and self time
//   std::puts(p.table({.sort = SortBy::self, .top = 10}).c_str());
//   p.write_chrome_trace("trace.json");        // Perfetto, chrome://tracing
//
// Without a schedule (active 0) everything from construction to stop() is kept. Under a schedule
// each recorded step is itself a span ("step N", category step) on the thread that started the
// profile, around what that thread records in it. Self time: a span's total less the totals of
// the spans directly inside it on the same thread.
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/record.h>

namespace ember::profiler {

struct Schedule {
  int64_t wait = 0;  // steps not recorded at the start of each cycle
  int64_t warmup = 0;  // steps recorded and thrown away (first-call costs)
  int64_t active = 0;  // steps kept; 0: no schedule, keep everything until stop()
  int64_t repeat = 1;  // cycles of wait + warmup + active; 0: until stop()
};

struct ProfileOptions {
  Schedule schedule = {};
  /// Ops' spans carry their inputs' shapes and dtypes (Event::input_shapes; the trace's "Input
  /// Dims"; the table can group by them). Off: the ops format nothing.
  bool record_shapes = false;
  /// The allocators' bytes-in-use counters (counters(), the trace's "ph": "C" events).
  bool memory = true;
  /// Where a GPU is usable: each op on a GPU gets its kernels' time (CUDA events on its stream)
  /// and every span is an NVTX range. No effect without a GPU.
  bool gpu_time = true;
};

/// The trace's thread id of GPU cuda:N's row is kGpuRowTid + N.
inline constexpr int kGpuRowTid = 1000000;

/// One span kept by a Profile.
struct Span {
  Event event;
  int64_t step = 0;  // the step it ended in (0-based)
  uint64_t self_ns = 0;
};

/// Per span name: what key_averages() gives.
struct SpanStats {
  std::string name;
  Category category = Category::user;
  int64_t calls = 0;
  uint64_t total_ns = 0, self_ns = 0;
  uint64_t gpu_ns = 0;  // its ops' GPU time (ProfileOptions::gpu_time), 0 on the CPU
  std::string input_shapes;  // with TableOptions::group_by_shapes: this row's (may be "")
};

/// The column key_averages() and the table sort by, descending (ties: by name).
enum class SortBy { total, self, calls };

/// What the table shows.
struct TableOptions {
  SortBy sort = SortBy::total;
  size_t top = 0;  // the first `top` rows; 0: all
  /// One row per span name and input shapes (record_shapes), with an "input shapes" column.
  bool group_by_shapes = false;
};

/// Per span name (and category; and input shapes when grouped by them), sorted by options.sort.
/// options.top is not applied (the table applies it).
std::vector<SpanStats> key_averages(const std::vector<Span>& spans, const TableOptions& options = {});
/// key_averages() as a Markdown table: span, category, [input shapes,] calls, total (ms), self
/// (ms), self per call (us); the first options.top rows.
std::string table(const std::vector<Span>& spans, const TableOptions& options = {});
/// Sets each span's self_ns from the spans directly inside it on its thread (spans of one thread
/// nest; Event::depth tells a child from a sibling that starts at the same time) and sorts them by
/// start. Profile::stop() and the trace reader call it.
void compute_self_times(std::vector<Span>& spans);

class Profile {
 public:
  /// Starts the session (recording at once unless the schedule begins with wait steps). One
  /// Profile records at a time.
  explicit Profile(ProfileOptions options = {});
  /// Stops it if running.
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  /// Ends step N (0-based) and begins step N + 1, moving through the schedule.
  void step();
  /// Ends the session: recording off, the last active step's spans kept.
  void stop();

  /// The kept spans, in order of their start, with self times.
  const std::vector<Span>& spans() const { return spans_; }
  /// The kept counter samples (bytes in use per allocator), in order.
  const std::vector<CounterSample>& counters() const { return counters_; }
  /// Per span name (and category), sorted and grouped as `options` say (by default: by total
  /// time, descending; profiler::key_averages over spans()).
  std::vector<SpanStats> key_averages(const TableOptions& options = {}) const;
  /// key_averages() as a Markdown table, the top `top` rows (0: all).
  std::string table(size_t top = 0) const;
  /// The table as `options` say: sort column, top rows, grouped by input shapes.
  std::string table(const TableOptions& options) const;
  const ProfileOptions& options() const { return options_; }
  /// The spans in Trace Event Format (complete "X" events, "M" thread names; ts and dur in
  /// microseconds from the session's start; pid `pid`; an op recorded with shapes has them in
  /// its "args" as "Input Dims"; an op's GPU time is a span of the same name on the row
  /// "GPU cuda:N", tid kGpuRowTid + N).
  std::string chrome_trace_json(int pid = 0) const;
  /// Writes chrome_trace_json() to `path` (an error naming it when that fails).
  void write_chrome_trace(const std::string& path, int pid = 0) const;
  /// When the session started, on now_ns()'s clock: the trace's time 0.
  uint64_t origin_ns() const { return origin_ns_; }

 private:
  enum class Phase { wait, warmup, active, done };
  Phase phase_at(int64_t step) const;
  void enter(Phase phase);
  /// Ends the open step's span; an error naming the span when another is innermost (`caller`:
  /// "step" or "stop").
  void end_step_span(const char* caller);
  void keep(std::vector<Event> events, bool discard);

  ProfileOptions options_;
  int64_t step_ = 0;
  Phase phase_ = Phase::done;
  bool running_ = false;
  uint64_t origin_ns_ = 0;
  bool step_open_ = false;  // this step's span is open on the thread that started the profile
  std::vector<Span> spans_;
  std::vector<CounterSample> counters_;
};

}  // namespace ember::profiler
