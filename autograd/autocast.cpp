// Autocast state (per thread, per device type) and the one cast helper every autocast hook uses.
#include <ember/autograd/autocast.h>

#include <map>
#include <tuple>

#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>

namespace ember::amp {

namespace {

struct CacheEntry {
  Tensor source;  // keeps the parameter alive, so its TensorImpl* cannot be reused by another tensor
  Tensor cast;
};

// Cache key: the parameter, the dtype it was cast to (nested guards may differ), and whether the
// cast recorded a graph (a cast made under NoGradGuard must not serve a forward that needs one).
using CacheKey = std::tuple<const TensorImpl*, DType, bool>;

struct AutocastState {
  bool enabled[kNumDeviceTypes] = {false, false};
  DType dtype[kNumDeviceTypes] = {DType::bf16, DType::f16};  // PyTorch's defaults: cpu bf16, cuda f16
  int depth = 0;  // live guards on this thread
  std::map<CacheKey, CacheEntry> cache;
};

thread_local AutocastState t_state;

size_t idx(DeviceType t) { return static_cast<size_t>(t); }

bool is_low(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace

Autocast::Autocast(DeviceType device_type, DType dtype, bool enabled)
    : device_type_(device_type),
      prev_enabled_(t_state.enabled[idx(device_type)]),
      prev_dtype_(t_state.dtype[idx(device_type)]) {
  EMBER_CHECK(is_low(dtype), "amp::Autocast: expected a low-precision dtype (f16 or bf16), got ", dtype_name(dtype));
  t_state.enabled[idx(device_type)] = enabled;
  t_state.dtype[idx(device_type)] = dtype;
  ++t_state.depth;
}

Autocast::~Autocast() {
  t_state.enabled[idx(device_type_)] = prev_enabled_;
  t_state.dtype[idx(device_type_)] = prev_dtype_;
  if (--t_state.depth == 0) t_state.cache.clear();  // casts live as long as the outermost guard
}

bool autocast_enabled(DeviceType device_type) { return t_state.enabled[idx(device_type)]; }
DType autocast_dtype(DeviceType device_type) { return t_state.dtype[idx(device_type)]; }

Tensor cast_for(OpClass cls, const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::f64) return t;
  const size_t dev = idx(t.device().type());
  if (!t_state.enabled[dev]) return t;
  if (cls == OpClass::Float32) return is_low(t.dtype()) ? t.to(DType::f32) : t;
  const DType low = t_state.dtype[dev];
  if (t.dtype() == low) return t;
  // A master weight (f32 leaf that requires grad) is cast once per guard and reused.
  if (t.dtype() != DType::f32 || !t.is_leaf() || !t.requires_grad()) return t.to(low);
  const CacheKey key{t.impl(), low, GradMode::is_enabled()};
  auto it = t_state.cache.find(key);
  if (it == t_state.cache.end()) it = t_state.cache.emplace(key, CacheEntry{t, t.to(low)}).first;
  return it->second.cast;
}

size_t autocast_cache_size() { return t_state.cache.size(); }

}  // namespace ember::amp
