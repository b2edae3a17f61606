#pragma once
// The profiler's recording hook (profiler/ builds sessions, schedules and outputs on it). Code
// anywhere in the library or a user's program marks a span with
//
//   EMBER_PROFILE_SCOPE("my block");                 // until the end of the enclosing block
//   profiler::RecordScope scope("conv2d", profiler::Category::op);
//
// When no profile is recording and no CUDA graph is being captured, a scope costs one relaxed
// atomic load and a predictable branch, and allocates nothing (PyTorch's RecordFunction works the
// same way). When one is, each scope appends one Event to its thread's buffer: name, category,
// start and end on one steady clock, and its nesting depth on that thread. An op's scope may also
// carry its inputs' shapes and dtypes (scope.inputs(x, w)), formatted only while a profile records
// with shapes (record_shapes). Profiling where a GPU is usable, an op whose first input is on a GPU
// also gets that GPU's time: a timing event recorded on the device's current stream when the op is
// handed its inputs and another when its scope ends, resolved when the profile keeps the step
// (docs/profiling.md says why events and not CUPTI); and every span is an NVTX range too, so
// Nsight Systems shows the same names.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ember {
class Tensor;
}

namespace ember::profiler {

/// What a span is, for the trace's colours and the table's grouping.
enum class Category : uint8_t { user, op, backward, data, optimizer, comm, step };
/// "user", "op", "backward", "data", "optimizer", "comm", "step".
const char* category_name(Category c);

/// One closed span of one thread.
struct Event {
  std::string name;
  Category category = Category::user;
  uint64_t start_ns = 0, end_ns = 0;  // steady clock (now_ns)
  uint32_t thread = 0;  // the recording thread's index (thread_names())
  uint32_t depth = 0;  // open spans of that thread around it when it began
  /// An op's inputs when recorded with shapes: "[32, 1, 28, 28] f32, [16, 1, 3, 3] f32" (an
  /// undefined tensor is "none"); "" otherwise.
  std::string input_shapes;
  /// An op on a GPU: the device and its kernels' time, from the timing event recorded before they
  /// were queued to the one after, on the steady clock (aligned with the device by a reference
  /// event, see set_recording_gpu); gpu_device -1 otherwise.
  int gpu_device = -1;
  uint64_t gpu_start_ns = 0, gpu_end_ns = 0;
  /// Internal: the two CUDA events until the profile resolves them (then null).
  void* gpu_events[2] = {nullptr, nullptr};
  /// Internal: the span pushed an NVTX range, which its end pops.
  bool nvtx = false;
};

namespace detail {
/// The scopes' one flag word: kRecording while a profile records, kCapturing while any thread
/// captures a CUDA graph (core/cuda_graph.h), so that a scope off costs one relaxed load of it.
inline constexpr uint32_t kRecording = 1u, kCapturing = 2u;
extern std::atomic<uint32_t> g_scope_flags;
extern std::atomic<bool> g_recording_shapes;
void begin(const char* name, Category category);
void begin(std::string name, Category category);
void end();
/// An op's inputs (RecordScope::inputs while recording): their shapes when recording shapes, and
/// the start of its GPU time when recording GPU time and the first defined input is on a GPU. The
/// first op on a device while GPU time is on also records that device's reference event (see
/// set_recording_gpu), which waits once for the device's current stream.
void op_inputs(std::initializer_list<const Tensor*> inputs);
extern std::atomic<bool> g_recording_gpu;
/// The calling thread's innermost open span, if any (Profile::step checks it is the step's own).
bool innermost_open(std::string& name, Category& category);
/// A scope's slow path: `flags` is what the flag word held at its start (recording: a span;
/// capturing: its name on this thread's capture stack, for errors that name the op).
void scope_begin(const char* name, Category category, uint32_t flags);
void scope_begin(const std::string& name, Category category, uint32_t flags);
void scope_end(uint32_t flags) noexcept;
/// Turns kCapturing on or off in the flag word (core/cuda_graph.cpp counts the captures).
void set_capturing_flag(bool on);
/// The innermost scope this thread opened while a capture was active ("" when none).
std::string innermost_capture_scope();
}  // namespace detail

/// Whether a profile is recording now.
inline bool recording() noexcept {
  return (detail::g_scope_flags.load(std::memory_order_relaxed) & detail::kRecording) != 0;
}
/// Whether it records ops' input shapes too (ProfileOptions::record_shapes).
inline bool recording_shapes() noexcept { return detail::g_recording_shapes.load(std::memory_order_relaxed); }
/// "[32, 1, 28, 28] f32, [16, 1, 3, 3] f32": what an op span's input_shapes holds.
std::string format_input_shapes(std::initializer_list<const Tensor*> inputs);

/// A span from construction to destruction, recorded when a profile is recording at its start.
/// While a CUDA graph is being captured, its name is also the op that a forbidden host wait names.
class RecordScope {
 public:
  explicit RecordScope(const char* name, Category category = Category::user)
      : flags_(detail::g_scope_flags.load(std::memory_order_relaxed)) {
    if (flags_ != 0) detail::scope_begin(name, category, flags_);
  }
  RecordScope(const std::string& name, Category category)
      : flags_(detail::g_scope_flags.load(std::memory_order_relaxed)) {
    if (flags_ != 0) detail::scope_begin(name, category, flags_);
  }
  ~RecordScope() {
    if (flags_ != 0) detail::scope_end(flags_);
  }
  /// The op's input tensors, right after construction (before any span inside it begins): their
  /// shapes and dtypes go into the span when the profile records shapes. Not recording, this is a
  /// branch on a member (no load, no string).
  template <class... Tensors> void inputs(const Tensors&... tensors) {
    if ((flags_ & detail::kRecording) != 0 &&
        (recording_shapes() || detail::g_recording_gpu.load(std::memory_order_relaxed)))
      detail::op_inputs({&tensors...});
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  uint32_t flags_;
};

/// One sample of a value over time (bytes in use by an allocator).
struct CounterSample {
  std::string name;  // "memory cpu", "memory cuda:0"
  uint64_t time_ns = 0;
  double value = 0;
};
/// While recording: a sample of counter `name` now (the caching allocators call it with the
/// bytes they have handed out after each allocation and free).
void record_counter(const std::string& name, double value);
/// Takes the samples recorded so far, in order.
std::vector<CounterSample> take_counters();

/// Nanoseconds on the clock events use (std::chrono::steady_clock).
uint64_t now_ns();
/// Names the calling thread's row in traces ("loader worker 0", "comm"); default "thread N", and
/// "main" for the thread that starts recording first.
void set_thread_name(const std::string& name);
/// The row names, by Event::thread.
std::vector<std::string> thread_names();

/// Starts or stops recording (profiler::Profile does this). Spans open when recording stops are
/// closed by their scopes as usual and kept.
void set_recording(bool on);
/// What a recording holds besides spans (profiler::Profile sets them before it records): ops'
/// input shapes (off by default) and the allocators' counter samples (on by default; off,
/// record_counter keeps nothing).
void set_recording_options(bool shapes, bool memory);
/// GPU time of ops and NVTX ranges while recording (profiler::Profile turns it on where a GPU is
/// usable; Profile::gpu_time false leaves it off). Each device's clock is put on the host's by a
/// reference event recorded when the first op on it hands over its inputs, waited for at once,
/// beside now_ns(): devices no op uses are left alone (no context, no synchronisation). Off
/// destroys the reference events.
void set_recording_gpu(bool on);
/// Gives `e` its GPU time once its kernels are done (waits for them), and releases its events
/// (a span without an end event, or on a device without a reference event, gets gpu_device -1).
void resolve_gpu_time(Event& e);
/// Destroys e's CUDA events without reading them, if it has any (for spans thrown away).
void release_gpu_events(Event& e) noexcept;
/// Takes every thread's closed events recorded so far (each thread's in order of their end).
std::vector<Event> take_events();

}  // namespace ember::profiler

#define EMBER_PROFILE_CONCAT_(a, b) a##b
#define EMBER_PROFILE_CONCAT(a, b) EMBER_PROFILE_CONCAT_(a, b)
/// A user span named NAME until the end of the enclosing block.
#define EMBER_PROFILE_SCOPE(name) \
  ::ember::profiler::RecordScope EMBER_PROFILE_CONCAT(ember_profile_scope_, __LINE__)(name)
