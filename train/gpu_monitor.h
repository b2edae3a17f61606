#pragma once
// GPU utilisation, memory and power over each epoch, from NVML (the driver's libnvidia-ml.so.1,
// opened at run time with dlopen: a CPU-only build and a machine without the driver need nothing,
// and then no gpu_* field appears in metrics.jsonl rather than a 0 that looks measured).
//
//   std::string why;
//   auto source = train::nvml_source(Device("cuda:0"), &why);   // nullptr (and why) without NVML
//   train::GpuMonitor monitor(std::move(source));                // samples at 10 Hz on a thread
//   ... train an epoch ...
//   std::optional<train::GpuStats> s = monitor.take();           // the epoch's, then starts over
//
// Utilisation is NVML's "percent of time over the past sample period during which one or more
// kernels was executing", for the whole device (other processes' kernels count too).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <ember/core/device.h>
#include <ember/train/metrics.h>
#include <ember/train/phase_timer.h>

namespace ember::train {

/// One reading of the device: each field unset where its own reading failed (power: also where
/// the device does not report it).
struct GpuSample {
  std::optional<double> util_percent;
  std::optional<double> memory_used_bytes;
  std::optional<double> power_watts;
};

/// Where readings come from: NVML, or a test's fake.
class GpuSource {
 public:
  virtual ~GpuSource() = default;
  /// A reading, or nothing when all of it failed (a field that failed is left out of its mean).
  virtual std::optional<GpuSample> sample() = 0;
  /// "NVML, PCI 00000000:3B:00.0 (NVIDIA H200)".
  virtual std::string describe() const = 0;
};

/// NVML's reading of the GPU behind `device` (cuda:N: the N-th device CUDA sees, found in NVML by
/// its PCI bus id; where that cannot be had, mapped through CUDA_VISIBLE_DEVICES when it lists
/// indices or UUIDs, or else taken as NVML's index N). nullptr, with the reason in *why_not,
/// when `device` is no GPU or NVML cannot be loaded or initialised (EMBER_NVML_LIBRARY names
/// another library file to load, for tests).
std::unique_ptr<GpuSource> nvml_source(Device device, std::string* why_not = nullptr);

/// An epoch's aggregate: mean utilisation, most memory used, mean power (each unset when no
/// reading had it).
struct GpuStats {
  std::optional<double> util_percent, memory_used_mb, power_watts;
  int64_t samples = 0;  // readings (each with at least one field)
};

/// The mean of the utilisation readings, the largest memory (in MB, 1e6 bytes), the mean of the
/// power readings.
class GpuAggregate {
 public:
  void add(const GpuSample& s);
  /// The readings so far (nothing when there were none); then starts over.
  std::optional<GpuStats> take();

 private:
  double util_sum_ = 0, power_sum_ = 0;
  std::optional<double> memory_max_;
  int64_t n_ = 0, util_n_ = 0, power_n_ = 0;
};

/// Samples a GpuSource on a background thread every 1/hz seconds (hz 0: no thread; the caller
/// samples with sample_now(), as the tests do). A null source (nvml_source without NVML) samples
/// nothing: no thread, take() gives nothing and describe() "none".
class GpuMonitor {
 public:
  explicit GpuMonitor(std::unique_ptr<GpuSource> source, double hz = 10);
  ~GpuMonitor();  // stops and joins the thread
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  /// Takes one reading now.
  void sample_now();
  /// The readings since the last take() (or the start); nothing when there were none.
  std::optional<GpuStats> take();
  std::string describe() const;

 private:
  std::unique_ptr<GpuSource> source_;
  std::mutex mu_;
  GpuAggregate agg_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// Sets m's gpu_* fields from `s` (nothing set when `s` is empty).
void set_gpu_fields(EpochMetrics& m, const std::optional<GpuStats>& s);

/// The phase timers' verdict with the GPU's utilisation in front: under 80% busy, "GPU busy 34% of
/// the epoch: input-bound: data wait is 40% of the step; raise data.workers or set data.resident"
/// or, when the data wait is small, "...: the GPU waits on the host (kernel launches,
/// synchronisation, small batches); try a larger data.batch_size, or profile.enabled=true for
/// where"; at 80% or more, the phases' verdict after "GPU busy 92% of the epoch; " ("" when it has none).
std::string gpu_verdict(double util_percent, const PhaseTotals& phases);

}  // namespace ember::train
