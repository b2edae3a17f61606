// DataParallel: replicate, scatter, run the replicas on threads, gather (see data_parallel.h).
//
// Replicas are built once with Module::clone() and kept. Each forward binds their parameters to
// fresh Broadcast outputs in place (Module::bind_parameters_for_replica), which overwrites what
// the previous forward's graph captured. So a replica set is reused only when no graph still
// holds its parameters or buffers: every TensorImpl's use count is back at what it was when the
// replica was built (backward drops the captures as it runs). Otherwise (a graph kept for
// retain_graph, two forwards before one backward) a fresh set is cloned and the old graph keeps
// the values it was recorded with. Between steps the replicas hold the last broadcast copies.
//
// CUDA ordering: each replica runs on a stream of its own. Before the replicas start, every
// replica stream waits for an event recorded on the caller's current stream of its device (the
// broadcast, scatter and buffer copies, and the previous step's backward and optimizer step, were
// queued there); after they finish, the caller's streams wait for each replica's event before the
// gather. Memory a replica allocated returns to that replica stream's pool when backward frees it
// on the caller's stream; the stream reuses it only after the next forward's wait, which comes
// after that backward's work.
#include <ember/parallel/data_parallel.h>

#include <cstddef>
#include <exception>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include <ember/autograd/autocast.h>
#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>
#include <ember/parallel/comm_ops.h>

namespace ember::parallel {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

// Use counts of m's parameter and buffer TensorImpls, in a fixed order.
std::vector<long> use_counts(const layers::Module& m) {
  std::vector<long> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(t.impl_ptr().use_count());
  for (const auto& [n, t] : m.named_buffers()) out.push_back(t.impl_ptr().use_count());
  return out;
}

// The wrapped module's parameter and buffer TensorImpls and dtypes: replicas are rebuilt when
// these change (a parameter added or replaced, a cast with Module::to(DType)).
std::vector<std::pair<const TensorImpl*, DType>> state_impls(const layers::Module& m) {
  std::vector<std::pair<const TensorImpl*, DType>> out;
  for (const auto& [n, t] : m.named_parameters()) out.emplace_back(t.impl(), t.dtype());
  for (const auto& [n, t] : m.named_buffers()) out.emplace_back(t.impl(), t.dtype());
  return out;
}

void copy_values(const Named& from, const Named& to) {
  EMBER_ASSERT(from.size() == to.size(), "DataParallel: ", from.size(), " buffers to copy into ", to.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < from.size(); ++i) {
    Tensor dst = to[i].second;
    dst.copy_(from[i].second);
  }
}

// Rethrows replica i's exception as an ember::Error naming the replica and its device.
[[noreturn]] void rethrow_from_replica(const std::exception_ptr& error, size_t i, Device device) {
  std::ostringstream where;
  where << "DataParallel: replica " << i << " on " << device.str() << ": ";
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.file().empty()) throw Error(where.str() + e.message());
    throw Error(where.str() + e.message(), e.file(), e.line());
  } catch (const std::exception& e) {
    throw Error(where.str() + e.what());
  }
}

}  // namespace

DataParallel::DataParallel(layers::ModulePtr module, std::vector<Device> devices, std::optional<Device> output_device)
    : module_(std::move(module)), devices_(std::move(devices)) {
  EMBER_CHECK(module_ != nullptr, "DataParallel: got a null module");
  if (devices_.empty()) {
    const int n = cuda_device_count();
    EMBER_CHECK(n > 0, "DataParallel: no devices were given and no GPU is usable here (", cuda_unavailable_reason(),
                "); pass the devices, e.g. {Device::cpu(), Device::cpu()}");
    for (int i = 0; i < n; ++i) devices_.push_back(Device::cuda(i));
  }
  for (const Device& d : devices_)
    EMBER_CHECK(d.type() == devices_[0].type(), "DataParallel: the devices must all be of one kind, got ",
                devices_str(devices_));
  for (const Device& d : devices_) d.validate();
  output_device_ = output_device.value_or(devices_[0]);
  output_device_.validate();
  register_module("module", module_);
  for (const Device& d : devices_) streams_.push_back(new_stream(d));  // the CPU's null stream on the CPU
  if (devices_.size() > 1) replicas();  // now, so a module without clone_structure() fails here
}

std::string DataParallel::extra_repr() const {
  return "devices=" + devices_str(devices_) + ", output_device=" + output_device_.str();
}

bool DataParallel::in_use(const Replicas& r) const {
  for (size_t i = 0; i < r.modules.size(); ++i)
    if (use_counts(*r.modules[i]) != r.idle_use_counts[i]) return true;
  return false;
}

DataParallel::Replicas& DataParallel::replicas() {
  auto source = state_impls(*module_);
  if (!replicas_.modules.empty() && source == replicas_.source && !in_use(replicas_)) return replicas_;
  Replicas r;
  r.source = std::move(source);
  for (const Device& d : devices_) {
    layers::ModulePtr m = module_->clone();
    m->to(d);
    r.idle_use_counts.push_back(use_counts(*m));
    r.modules.push_back(std::move(m));
  }
  replicas_ = std::move(r);
  return replicas_;
}

std::vector<Tensor> DataParallel::run_replicas(const std::vector<Tensor>& chunks) {
  const size_t n = chunks.size();
  // Thread-local state each replica thread takes from the caller: grad mode, and autocast (on and
  // its dtype) for the devices' type, so the replicas' convolutions and matmuls run as the caller's
  // forward asked (ember-train's parallel.mode=dp with precision bf16/fp16).
  const bool grad_mode = GradMode::is_enabled();
  const DeviceType device_type = devices_[0].type();
  const bool autocast = amp::autocast_enabled(device_type);
  const DType autocast_dtype = amp::autocast_dtype(device_type);
  const bool cuda = devices_[0].is_cuda();
  std::vector<Event> ready(n), done(n);
  if (cuda)
    for (size_t i = 0; i < n; ++i) ready[i].record(current_stream(devices_[i]));
  std::vector<Tensor> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        DeviceGuard device(devices_[i]);
        StreamGuard stream(streams_[i]);
        if (cuda) ready[i].wait(streams_[i]);
        GradMode::set_enabled(grad_mode);
        std::optional<amp::Autocast> autocast_guard;
        if (autocast) autocast_guard.emplace(device_type, autocast_dtype);
        outputs[i] = replicas_.modules[i]->forward(chunks[i]);
        if (cuda) done[i].record(streams_[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < n; ++i)
    if (errors[i]) rethrow_from_replica(errors[i], i, devices_[i]);
  if (cuda) {
    for (size_t i = 0; i < n; ++i) {
      done[i].wait(current_stream(devices_[i]));
      done[i].wait(current_stream(output_device_));
    }
  }
  return outputs;
}

Tensor DataParallel::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() >= 1 && x.size(0) >= 1, "DataParallel: expected an input (N, ...) with N >= 1 ",
              "to split over ", devices_str(devices_), ", got ",
              x.defined() ? "shape " + x.shape_str() : std::string("an undefined tensor"));
  if (devices_.size() == 1) return module_->forward(x.to(devices_[0])).to(output_device_);

  const size_t used = chunk_sizes(x.size(0), static_cast<int64_t>(devices_.size())).size();
  const std::vector<Device> used_devices(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(used));
  Replicas& r = replicas();
  // Replica i's parameters are the Broadcast outputs on devices[i]: its gradients reduce-add
  // onto the wrapped module's parameters in backward.
  std::vector<std::vector<Tensor>> bound(used);
  for (const Tensor& p : module_->parameters()) {
    std::vector<Tensor> copies = broadcast_to(p, used_devices);
    for (size_t i = 0; i < used; ++i) bound[i].push_back(std::move(copies[i]));
  }
  const Named buffers = module_->named_buffers();
  for (size_t i = 0; i < used; ++i) {
    r.modules[i]->bind_parameters_for_replica(bound[i]);
    copy_values(buffers, r.modules[i]->named_buffers());
    layers::copy_training_modes(*module_, *r.modules[i]);
  }
  const std::vector<Tensor> outputs = run_replicas(scatter(x, used_devices, 0));
  Tensor y = gather(outputs, output_device_, 0);
  copy_values(r.modules[0]->named_buffers(), buffers);  // running statistics as replica 0 saw them
  return y;
}

}  // namespace ember::parallel
