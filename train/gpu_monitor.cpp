// GPU monitor (train/gpu_monitor.h): NVML through dlopen, the epoch aggregate, the sampling thread.
// NVML's C API with the few types it needs from train/nvml_abi.h (nvml.h is not needed to build).
#include <ember/train/gpu_monitor.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <ember/core/cuda/runtime.h>
#include <ember/train/nvml_abi.h>

namespace ember::train {

namespace {

struct NvmlApi {
  void* lib = nullptr;
  nvml::Return (*init)() = nullptr;
  nvml::Return (*shutdown)() = nullptr;
  const char* (*error_string)(nvml::Return) = nullptr;
  nvml::Return (*by_index)(unsigned int, nvml::Device*) = nullptr;
  nvml::Return (*by_uuid)(const char*, nvml::Device*) = nullptr;
  nvml::Return (*by_pci_bus_id)(const char*, nvml::Device*) = nullptr;  // optional
  nvml::Return (*name)(nvml::Device, char*, unsigned int) = nullptr;
  nvml::Return (*utilization)(nvml::Device, nvml::Utilization*) = nullptr;
  nvml::Return (*memory)(nvml::Device, nvml::Memory*) = nullptr;
  nvml::Return (*memory_v2)(nvml::Device, nvml::MemoryV2*) = nullptr;  // optional (driver 510 on)
  nvml::Return (*power)(nvml::Device, unsigned int*) = nullptr;

  std::string error(nvml::Return rc) const {
    return error_string ? std::string(error_string(rc)) : "NVML error " + std::to_string(rc);
  }
};

template <typename F> bool load(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

class NvmlSource final : public GpuSource {
 public:
  NvmlSource(NvmlApi api, nvml::Device dev, std::string text) : api_(api), dev_(dev), text_(std::move(text)) {}
  ~NvmlSource() override {
    api_.shutdown();
    ::dlclose(api_.lib);
  }
  // Each field on its own: a GPU in MIG mode reports no utilisation, and still its memory.
  std::optional<GpuSample> sample() override {
    GpuSample s;
    if (nvml::Utilization u{}; api_.utilization(dev_, &u) == 0) s.util_percent = static_cast<double>(u.gpu);
    // v2 where the driver has it (510 on), else v1: their "used" may differ by the memory the driver
    // reserves; the newest the driver offers is read.
    nvml::MemoryV2 m2{};
    m2.version = nvml::kMemoryV2;
    nvml::Memory m1{};
    if (api_.memory_v2 != nullptr && api_.memory_v2(dev_, &m2) == 0) s.memory_used_bytes = static_cast<double>(m2.used);
    else if (api_.memory(dev_, &m1) == 0) s.memory_used_bytes = static_cast<double>(m1.used);
    if (unsigned int mw = 0; api_.power != nullptr && api_.power(dev_, &mw) == 0)
      s.power_watts = static_cast<double>(mw) / 1000.0;
    if (!s.util_percent && !s.memory_used_bytes && !s.power_watts) return std::nullopt;
    return s;
  }
  std::string describe() const override { return text_; }

 private:
  NvmlApi api_;
  nvml::Device dev_;
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
  load(api.lib, "nvmlDeviceGetHandleByPciBusId_v2", api.by_pci_bus_id);
  load(api.lib, "nvmlDeviceGetMemoryInfo_v2", api.memory_v2);
  if (!ok) {
    ::dlclose(api.lib);
    return fail(file + " lacks the NVML functions ember calls");
  }
  if (const nvml::Return rc = api.init(); rc != 0) {
    const std::string why = "nvmlInit: " + api.error(rc);
    ::dlclose(api.lib);
    return fail(why);
  }
  // CUDA numbers the visible devices (fastest first, unless CUDA_DEVICE_ORDER=PCI_BUS_ID); NVML
  // numbers all of them by PCI bus. The bus id names the same device for both; without it (no
  // CUDA, an old driver) CUDA_VISIBLE_DEVICES's entry, or CUDA's index, is taken as NVML's.
  nvml::Device dev = nullptr;
  const int cuda_index = std::max(0, device.index());
  const std::string bus_id = api.by_pci_bus_id != nullptr ? ember::detail::cuda_pci_bus_id(cuda_index) : "";
  const std::string entry = visible_entry(cuda_index);
  nvml::Return rc = 0;
  std::string which;
  if (!bus_id.empty()) {
    which = "PCI " + bus_id;
    rc = api.by_pci_bus_id(bus_id.c_str(), &dev);
  } else if (!entry.empty() && entry.find_first_not_of("0123456789") != std::string::npos) {
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
  ++n_;
  if (s.util_percent) {
    util_sum_ += *s.util_percent;
    ++util_n_;
  }
  if (s.memory_used_bytes) memory_max_ = std::max(memory_max_.value_or(0), *s.memory_used_bytes);
  if (s.power_watts) {
    power_sum_ += *s.power_watts;
    ++power_n_;
  }
}

std::optional<GpuStats> GpuAggregate::take() {
  std::optional<GpuStats> out;
  if (n_ > 0) {
    out.emplace();
    out->samples = n_;
    if (util_n_ > 0) out->util_percent = util_sum_ / static_cast<double>(util_n_);
    if (memory_max_) out->memory_used_mb = *memory_max_ / 1e6;
    if (power_n_ > 0) out->power_watts = power_sum_ / static_cast<double>(power_n_);
  }
  *this = GpuAggregate{};
  return out;
}

GpuMonitor::GpuMonitor(std::unique_ptr<GpuSource> source, double hz) : source_(std::move(source)) {
  if (hz <= 0 || source_ == nullptr) return;
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
  if (source_ == nullptr) return;
  const std::optional<GpuSample> s = source_->sample();
  std::lock_guard<std::mutex> lock(mu_);
  if (s) agg_.add(*s);
}

std::string GpuMonitor::describe() const { return source_ != nullptr ? source_->describe() : "none"; }

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
