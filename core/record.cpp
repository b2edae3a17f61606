// The recording hook (see record.h): a buffer per thread, registered once, each with its own
// mutex so that take_events() from another thread never races a thread that is recording.
#include <ember/core/record.h>

#include <algorithm>
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
  if (detail::g_recording_gpu.load(std::memory_order_relaxed)) ember::detail::nvtx_push(e.name.c_str());
  b.open.push_back(std::move(e));
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
  if (e.gpu_events[0] != nullptr) {  // after the op's kernels were queued on the device's stream
    e.gpu_events[1] = ember::detail::cuda_event_create(e.gpu_device);
    ember::detail::cuda_event_record(e.gpu_device, e.gpu_events[1],
                                     current_stream(Device::cuda(e.gpu_device)).handle());
  }
  e.end_ns = now_ns();
  if (detail::g_recording_gpu.load(std::memory_order_relaxed)) ember::detail::nvtx_pop();
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
    start = ember::detail::cuda_event_create(device);
    ember::detail::cuda_event_record(device, start, current_stream(first->device()).handle());
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

namespace {
struct Counters {
  std::mutex mu;
  std::vector<CounterSample> samples;
};
Counters& counters() {
  static Counters* c = new Counters();  // never destroyed, as the registry
  return *c;
}
}  // namespace

void record_counter(const std::string& name, double value) {
  if (!g_recording_memory.load(std::memory_order_relaxed)) return;
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  c.samples.push_back({name, now_ns(), value});
}

std::vector<CounterSample> take_counters() {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  return std::exchange(c.samples, {});
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

void set_recording_gpu(bool on) { detail::g_recording_gpu.store(on, std::memory_order_relaxed); }

void resolve_gpu_time(Event& e, void* ref_event, uint64_t ref_ns) {
  if (e.gpu_events[0] == nullptr) return;
  const int device = e.gpu_device;
  if (e.gpu_events[1] != nullptr) {
    ember::detail::cuda_event_synchronize(e.gpu_events[1]);
    const auto at = [&](void* ev) {
      const double ms = ember::detail::cuda_event_elapsed_ms(ref_event, ev);
      return ref_ns + static_cast<uint64_t>(ms > 0 ? ms * 1e6 : 0.0);
    };
    e.gpu_start_ns = at(e.gpu_events[0]);
    e.gpu_end_ns = std::max(e.gpu_start_ns, at(e.gpu_events[1]));
    ember::detail::cuda_event_destroy(device, e.gpu_events[1]);
  } else {
    e.gpu_device = -1;  // the span never ended on its device (recording stopped inside it)
  }
  ember::detail::cuda_event_destroy(device, e.gpu_events[0]);
  e.gpu_events[0] = e.gpu_events[1] = nullptr;
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
