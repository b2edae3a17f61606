// The recording hook (see record.h): a buffer per thread, registered once, each with its own
// mutex so that take_events() from another thread never races a thread that is recording.
#include <ember/core/record.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/core/stream.h>
#include <ember/core/tensor.h>

namespace ember::profiler {

namespace detail {
std::atomic<uint32_t> g_scope_flags{0};
std::atomic<bool> g_recording_shapes{false};
std::atomic<bool> g_recording_gpu{false};
}  // namespace detail

namespace {
std::atomic<bool> g_recording_memory{true};
}

namespace {

struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;
  std::vector<Event> open;  // begun, not ended (innermost last)
  uint32_t index = 0;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::vector<std::string> names;
  bool main_named = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: threads may record during exit
  return *r;
}

/// A vector of T behind a mutex, one per T, never destroyed (as the registry): the counter samples
/// and the devices' GPU clocks.
template <typename T> struct Guarded {
  std::mutex mu;
  std::vector<T> items;
};
template <typename T> Guarded<T>& guarded() {
  static Guarded<T>* g = new Guarded<T>();
  return *g;
}

ThreadBuffer& this_thread() {
  thread_local std::shared_ptr<ThreadBuffer> buf = [] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    b->index = static_cast<uint32_t>(r.buffers.size());
    r.buffers.push_back(b);
    r.names.push_back("thread " + std::to_string(b->index));
    return b;
  }();
  return *buf;
}

void push(std::string name, Category category) {
  ThreadBuffer& b = this_thread();
  std::lock_guard<std::mutex> lock(b.mu);
  Event e;
  e.name = std::move(name);
  e.category = category;
  e.thread = b.index;
  e.depth = static_cast<uint32_t>(b.open.size());
  e.start_ns = now_ns();
  e.nvtx = detail::g_recording_gpu.load(std::memory_order_relaxed);
  b.open.push_back(std::move(e));
  if (b.open.back().nvtx) ember::detail::nvtx_push(b.open.back().name.c_str());
}

// Each device's reference event while GPU time is on (set_recording_gpu), in guarded<GpuClock>()
// by device index.
struct GpuClock {
  void* ref = nullptr;  // recorded and completed
  uint64_t ref_ns = 0;  // now_ns() when it had completed
};

// Records `device`'s reference event on `stream` unless it has one: the stream's work so far is
// waited for, so the event has completed when now_ns() is read (within the wake-up's latency).
void ensure_gpu_clock(int device, void* stream) {
  Guarded<GpuClock>& clocks = guarded<GpuClock>();
  std::lock_guard<std::mutex> lock(clocks.mu);
  const auto d = static_cast<size_t>(device);
  if (clocks.items.size() <= d) clocks.items.resize(d + 1);
  GpuClock& c = clocks.items[d];
  if (c.ref != nullptr) return;
  void* ref = ember::detail::cuda_event_create(device);
  try {
    ember::detail::cuda_event_record(device, ref, stream);
    ember::detail::cuda_event_synchronize(ref);
  } catch (...) {
    ember::detail::cuda_event_destroy(device, ref);
    throw;
  }
  c = {ref, now_ns()};
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::user:
      return "user";
    case Category::op:
      return "op";
    case Category::backward:
      return "backward";
    case Category::data:
      return "data";
    case Category::optimizer:
      return "optimizer";
    case Category::comm:
      return "comm";
    case Category::step:
      return "step";
  }
  return "?";
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

namespace detail {

void begin(const char* name, Category category) { push(std::string(name), category); }
void begin(std::string name, Category category) { push(std::move(name), category); }

void end() {
  ThreadBuffer& b = this_thread();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.open.empty()) return;
  Event e = std::move(b.open.back());
  b.open.pop_back();
  if (e.nvtx) ember::detail::nvtx_pop();
  if (e.gpu_events[0] != nullptr) {  // after the op's kernels were queued on the device's stream
    try {
      e.gpu_events[1] = ember::detail::cuda_event_create(e.gpu_device);
      ember::detail::cuda_event_record(e.gpu_device, e.gpu_events[1],
                                       current_stream(Device::cuda(e.gpu_device)).handle());
    } catch (...) {
      release_gpu_events(e);
      throw;
    }
  }
  e.end_ns = now_ns();
  b.events.push_back(std::move(e));
}

void op_inputs(std::initializer_list<const Tensor*> inputs) {
  std::string shapes = recording_shapes() ? format_input_shapes(inputs) : std::string();
  // GPU time: a timing event on the first defined input's device, before the op queues kernels.
  const Tensor* first = nullptr;
  if (g_recording_gpu.load(std::memory_order_relaxed))
    for (const Tensor* t : inputs)
      if (t != nullptr && t->defined()) {
        first = t;
        break;
      }
  const int device = first != nullptr && first->device().is_cuda() ? first->device().index() : -1;
  void* start = nullptr;
  if (device >= 0) {
    void* stream = current_stream(first->device()).handle();
    ensure_gpu_clock(device, stream);
    start = ember::detail::cuda_event_create(device);
    ember::detail::cuda_event_record(device, start, stream);
  }
  ThreadBuffer& b = this_thread();
  std::unique_lock<std::mutex> lock(b.mu);
  if (!b.open.empty()) {
    Event& e = b.open.back();
    if (!shapes.empty()) e.input_shapes = std::move(shapes);
    if (start != nullptr && e.gpu_events[0] == nullptr) {
      e.gpu_device = device;
      e.gpu_events[0] = start;
      start = nullptr;
    }
  }
  lock.unlock();
  if (start != nullptr) ember::detail::cuda_event_destroy(device, start);  // no span took it
}

namespace {
// The names of the scopes this thread opened while a capture was active, innermost last.
thread_local std::vector<std::string> t_capture_scopes;
}  // namespace

void scope_begin(const char* name, Category category, uint32_t flags) {
  if ((flags & kRecording) != 0) begin(name, category);
  if ((flags & kCapturing) != 0) t_capture_scopes.emplace_back(name);
}

void scope_begin(const std::string& name, Category category, uint32_t flags) {
  if ((flags & kRecording) != 0) begin(name, category);
  if ((flags & kCapturing) != 0) t_capture_scopes.push_back(name);
}

void scope_end(uint32_t flags) noexcept {
  if ((flags & kCapturing) != 0 && !t_capture_scopes.empty()) t_capture_scopes.pop_back();
  if ((flags & kRecording) != 0) {
    try {
      end();
    } catch (...) {  // a span's end event could not be recorded: the span is lost, nothing else
    }
  }
}

void set_capturing_flag(bool on) {
  if (on) g_scope_flags.fetch_or(kCapturing, std::memory_order_relaxed);
  else g_scope_flags.fetch_and(~kCapturing, std::memory_order_relaxed);
}

std::string innermost_capture_scope() { return t_capture_scopes.empty() ? std::string() : t_capture_scopes.back(); }

bool innermost_open(std::string& name, Category& category) {
  ThreadBuffer& b = this_thread();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.open.empty()) return false;
  name = b.open.back().name;
  category = b.open.back().category;
  return true;
}

}  // namespace detail

std::string format_input_shapes(std::initializer_list<const Tensor*> inputs) {
  std::string out;
  for (const Tensor* t : inputs) {
    if (!out.empty()) out += ", ";
    if (t == nullptr || !t->defined()) {
      out += "none";
      continue;
    }
    out += '[';
    const Shape& sizes = t->sizes();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (i > 0) out += ", ";
      out += std::to_string(sizes[i]);
    }
    out += "] ";
    out += dtype_name(t->dtype());
  }
  return out;
}

void record_counter(const std::string& name, double value) {
  if (!g_recording_memory.load(std::memory_order_relaxed)) return;
  Guarded<CounterSample>& c = guarded<CounterSample>();
  std::lock_guard<std::mutex> lock(c.mu);
  c.items.push_back({name, now_ns(), value});
}

std::vector<CounterSample> take_counters() {
  Guarded<CounterSample>& c = guarded<CounterSample>();
  std::lock_guard<std::mutex> lock(c.mu);
  return std::exchange(c.items, {});
}

void set_thread_name(const std::string& name) {
  const uint32_t index = this_thread().index;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.names[index] = name;
}

std::vector<std::string> thread_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.names;
}

void set_recording(bool on) {
  if (on) {
    const uint32_t index = this_thread().index;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.main_named && r.names[index] == "thread " + std::to_string(index)) r.names[index] = "main";
    r.main_named = true;
  }
  if (on) detail::g_scope_flags.fetch_or(detail::kRecording, std::memory_order_relaxed);
  else detail::g_scope_flags.fetch_and(~detail::kRecording, std::memory_order_relaxed);
}

void set_recording_gpu(bool on) {
  detail::g_recording_gpu.store(on, std::memory_order_relaxed);
  if (on) return;
  Guarded<GpuClock>& clocks = guarded<GpuClock>();
  std::lock_guard<std::mutex> lock(clocks.mu);
  for (size_t d = 0; d < clocks.items.size(); ++d)
    if (clocks.items[d].ref != nullptr) ember::detail::cuda_event_destroy(static_cast<int>(d), clocks.items[d].ref);
  clocks.items.clear();
}

void release_gpu_events(Event& e) noexcept {
  for (void*& ev : e.gpu_events)
    if (ev != nullptr) {
      ember::detail::cuda_event_destroy(e.gpu_device, ev);
      ev = nullptr;
    }
}

void resolve_gpu_time(Event& e) {
  if (e.gpu_events[0] == nullptr) return;
  GpuClock clock;
  {
    Guarded<GpuClock>& clocks = guarded<GpuClock>();
    std::lock_guard<std::mutex> lock(clocks.mu);
    if (static_cast<size_t>(e.gpu_device) < clocks.items.size())
      clock = clocks.items[static_cast<size_t>(e.gpu_device)];
  }
  // Not resolved: the span never ended on its device (recording stopped inside it), or its
  // device's reference event is gone (GPU time was turned off while the op began).
  if (e.gpu_events[1] == nullptr || clock.ref == nullptr) {
    release_gpu_events(e);
    e.gpu_device = -1;
    return;
  }
  try {
    ember::detail::cuda_event_synchronize(e.gpu_events[1]);
    // The start from the reference, the duration from the start event (float milliseconds from a
    // reference seconds earlier would round a short op's duration to 0).
    const double start_ms = ember::detail::cuda_event_elapsed_ms(clock.ref, e.gpu_events[0]);
    const double dur_ms = ember::detail::cuda_event_elapsed_ms(e.gpu_events[0], e.gpu_events[1]);
    e.gpu_start_ns = clock.ref_ns + static_cast<uint64_t>(start_ms > 0 ? start_ms * 1e6 : 0.0);
    e.gpu_end_ns = e.gpu_start_ns + static_cast<uint64_t>(dur_ms > 0 ? dur_ms * 1e6 : 0.0);
  } catch (...) {
    release_gpu_events(e);
    e.gpu_device = -1;
    throw;
  }
  release_gpu_events(e);
}

void set_recording_options(bool shapes, bool memory) {
  detail::g_recording_shapes.store(shapes, std::memory_order_relaxed);
  g_recording_memory.store(memory, std::memory_order_relaxed);
}

std::vector<Event> take_events() {
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    buffers = r.buffers;
  }
  std::vector<Event> out;
  for (const auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mu);
    for (Event& e : b->events) out.push_back(std::move(e));
    b->events.clear();
  }
  return out;
}

}  // namespace ember::profiler
