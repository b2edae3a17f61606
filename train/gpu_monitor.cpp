// GPU monitor (train/gpu_monitor.h): NVML through dlopen, the epoch aggregate, the sampling thread.
// NVML's C API is declared here with the few types it needs (nvml.h is not needed to build).
#include <ember/train/gpu_monitor.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ember::train {

namespace {

// nvml.h's types, as far as they are used.
using nvmlReturn_t = int;  // 0: NVML_SUCCESS
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};

struct NvmlApi {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;

  std::string error(nvmlReturn_t rc) const {
    return error_string ? std::string(error_string(rc)) : "NVML error " + std::to_string(rc);
  }
};

template <typename F> bool load(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

class NvmlSource final : public GpuSource {
 public:
  NvmlSource(NvmlApi api, nvmlDevice_t dev, std::string text) : api_(api), dev_(dev), text_(std::move(text)) {}
  ~NvmlSource() override {
    api_.shutdown();
    ::dlclose(api_.lib);
  }
  std::optional<GpuSample> sample() override {
    nvmlUtilization_t u{};
    nvmlMemory_t m{};
    if (api_.utilization(dev_, &u) != 0 || api_.memory(dev_, &m) != 0) return std::nullopt;
    GpuSample s{.util_percent = static_cast<double>(u.gpu),
                .memory_used_bytes = static_cast<double>(m.used),
                .power_watts = std::nullopt};
    unsigned int mw = 0;
    if (api_.power != nullptr && api_.power(dev_, &mw) == 0) s.power_watts = static_cast<double>(mw) / 1000.0;
    return s;
  }
  std::string describe() const override { return text_; }

 private:
  NvmlApi api_;
  nvmlDevice_t dev_;
  std::string text_;
};

// The N-th entry of CUDA_VISIBLE_DEVICES ("2,3" or "GPU-<uuid>,..."), or "" when it is unset.
std::string visible_entry(int n) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr || *v == '\0') return "";
  std::string s = v;
  size_t start = 0;
  for (int i = 0;; ++i) {
    const size_t comma = s.find(',', start);
    if (i == n) return s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (comma == std::string::npos) return "";
    start = comma + 1;
  }
}

}  // namespace

std::unique_ptr<GpuSource> nvml_source(Device device, std::string* why_not) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<GpuSource> {
    if (why_not) *why_not = why;
    return nullptr;
  };
  if (!device.is_cuda()) return fail(device.str() + " is not a GPU");
  const char* env = std::getenv("EMBER_NVML_LIBRARY");
  const std::string file = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  NvmlApi api;
  api.lib = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.lib == nullptr) {
    const char* e = ::dlerror();
    return fail("cannot load " + file + (e ? std::string(": ") + e : std::string()));
  }
  bool ok = load(api.lib, "nvmlInit_v2", api.init) && load(api.lib, "nvmlShutdown", api.shutdown) &&
            load(api.lib, "nvmlDeviceGetHandleByIndex_v2", api.by_index) &&
            load(api.lib, "nvmlDeviceGetHandleByUUID", api.by_uuid) &&
            load(api.lib, "nvmlDeviceGetUtilizationRates", api.utilization) &&
            load(api.lib, "nvmlDeviceGetMemoryInfo", api.memory);
  load(api.lib, "nvmlErrorString", api.error_string);
  load(api.lib, "nvmlDeviceGetName", api.name);
  load(api.lib, "nvmlDeviceGetPowerUsage", api.power);
  if (!ok) {
    ::dlclose(api.lib);
    return fail(file + " lacks the NVML functions ember calls");
  }
  if (const nvmlReturn_t rc = api.init(); rc != 0) {
    const std::string why = "nvmlInit: " + api.error(rc);
    ::dlclose(api.lib);
    return fail(why);
  }
  // CUDA numbers the visible devices; NVML numbers all of them.
  nvmlDevice_t dev = nullptr;
  const int cuda_index = std::max(0, device.index());
  const std::string entry = visible_entry(cuda_index);
  nvmlReturn_t rc = 0;
  std::string which;
  if (!entry.empty() && entry.find_first_not_of("0123456789") != std::string::npos) {
    which = entry;
    rc = api.by_uuid(entry.c_str(), &dev);
  } else {
    const unsigned int index =
        entry.empty() ? static_cast<unsigned int>(cuda_index) : static_cast<unsigned int>(std::stoul(entry));
    which = "device " + std::to_string(index);
    rc = api.by_index(index, &dev);
  }
  if (rc != 0) {
    const std::string why = "NVML " + which + ": " + api.error(rc);
    api.shutdown();
    ::dlclose(api.lib);
    return fail(why);
  }
  std::string text = "NVML, " + which;
  char name[96] = {};
  if (api.name != nullptr && api.name(dev, name, sizeof name) == 0) text += std::string(" (") + name + ")";
  return std::make_unique<NvmlSource>(api, dev, text);
}

void GpuAggregate::add(const GpuSample& s) {
  util_sum_ += s.util_percent;
  memory_max_ = std::max(memory_max_, s.memory_used_bytes);
  ++n_;
  if (s.power_watts) {
    power_sum_ += *s.power_watts;
    ++power_n_;
  }
}

std::optional<GpuStats> GpuAggregate::take() {
  std::optional<GpuStats> out;
  if (n_ > 0) {
    out = GpuStats{.util_percent = util_sum_ / static_cast<double>(n_),
                   .memory_used_mb = memory_max_ / 1e6,
                   .power_watts = std::nullopt,
                   .samples = n_};
    if (power_n_ > 0) out->power_watts = power_sum_ / static_cast<double>(power_n_);
  }
  *this = GpuAggregate{};
  return out;
}

GpuMonitor::GpuMonitor(std::unique_ptr<GpuSource> source, double hz) : source_(std::move(source)) {
  if (hz <= 0) return;
  const auto period = std::chrono::duration<double>(1.0 / hz);
  thread_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      const std::optional<GpuSample> s = source_->sample();  // NVML calls outside the lock
      lock.lock();
      if (s) agg_.add(*s);
      cv_.wait_for(lock, period, [this] { return stop_; });
    }
  });
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::sample_now() {
  const std::optional<GpuSample> s = source_->sample();
  std::lock_guard<std::mutex> lock(mu_);
  if (s) agg_.add(*s);
}

std::optional<GpuStats> GpuMonitor::take() {
  std::lock_guard<std::mutex> lock(mu_);
  return agg_.take();
}

void set_gpu_fields(EpochMetrics& m, const std::optional<GpuStats>& s) {
  if (!s) return;
  m.gpu_util_percent = s->util_percent;
  m.gpu_memory_used_mb = s->memory_used_mb;
  m.gpu_power_watts = s->power_watts;
}

std::string gpu_verdict(double util_percent, const PhaseTotals& phases) {
  char head[64];
  std::snprintf(head, sizeof head, "GPU busy %.0f%% of the epoch", util_percent);
  if (util_percent >= 80) {
    const std::string v = phases.verdict();
    return v.empty() ? "" : std::string(head) + "; " + v;
  }
  if (phases.input_bound()) return std::string(head) + ": " + phases.verdict();
  return std::string(head) +
         ": the GPU waits on the host (kernel launches, synchronisation, small batches); try a larger "
         "data.batch_size, or profile.enabled=true for where";
}

}  // namespace ember::train
