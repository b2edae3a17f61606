// Front functions of the fused optimizer kernels: argument checks (errors name the slot, shapes,
// dtypes and devices), contiguous staging of strided operands, grouping by device and dtype pair,
// and dispatch to kernels/cpu/optim.cpp or kernels/cuda/optim.cu.
#include <ember/kernels/optim.h>

#include <map>
#include <tuple>
#include <utility>

#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember::kernels {

DispatchTable<SgdStepFn> sgd_step_table("sgd_step");
DispatchTable<AdamStepFn> adam_step_table("adam_step");
DispatchTable<GlobalNormFn> global_norm_table("global_norm");
DispatchTable<ClipByNormFn> clip_by_norm_table("clip_by_norm");

namespace {

void check_param_grad(const char* op, size_t i, const Tensor& p, const Tensor& g) {
  EMBER_CHECK(p.defined(), op, ": slot ", i, ": the parameter is undefined");
  EMBER_CHECK(g.defined(), op, ": slot ", i, ": the gradient is undefined (parameter of shape ", p.shape_str(), ")");
  EMBER_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, op, ": slot ", i,
              ": parameters must be f32 or f64, got ", dtype_name(p.dtype()), " (shape ", p.shape_str(), ")");
  const bool grad_ok =
      g.dtype() == p.dtype() || (p.dtype() == DType::f32 && (g.dtype() == DType::f16 || g.dtype() == DType::bf16));
  EMBER_CHECK(grad_ok, op, ": slot ", i, ": gradient of dtype ", dtype_name(g.dtype()), " for a parameter of dtype ",
              dtype_name(p.dtype()), " (expected the parameter's dtype, or f16/bf16 for an f32 parameter)");
  EMBER_CHECK(g.sizes() == p.sizes(), op, ": slot ", i, ": gradient of shape ", g.shape_str(),
              " for a parameter of shape ", p.shape_str());
  EMBER_CHECK(g.device() == p.device(), op, ": slot ", i, ": gradient on ", g.device().str(), " for a parameter on ",
              p.device().str());
}

void check_state(const char* op, size_t i, const char* name, const Tensor& p, const Tensor& s) {
  EMBER_CHECK(s.defined(), op, ": slot ", i, ": ", name, " is undefined");
  EMBER_CHECK(s.sizes() == p.sizes(), op, ": slot ", i, ": ", name, " of shape ", s.shape_str(),
              " for a parameter of shape ", p.shape_str());
  EMBER_CHECK(s.dtype() == p.dtype(), op, ": slot ", i, ": ", name, " of dtype ", dtype_name(s.dtype()),
              " for a parameter of dtype ", dtype_name(p.dtype()));
  EMBER_CHECK(s.device() == p.device(), op, ": slot ", i, ": ", name, " on ", s.device().str(), " for a parameter on ",
              p.device().str());
}

// The fused kernels walk each operand as a flat array, so every operand of a slot must lay its
// elements out as the slot's parameter does: row-major, or channels-last for a channels-last
// parameter (Module::to(MemoryFormat::channels_last)). An operand that does not is staged.

/// Stand-in for a tensor updated in place, laid out as `format`; `writeback` collects (original,
/// stand-in) pairs to copy back after the kernel.
Tensor inplace_operand(const Tensor& t, MemoryFormat format, std::vector<std::pair<Tensor, Tensor>>& writeback) {
  if (!t.defined() || t.is_contiguous(format)) return t;
  Tensor c = copy_in_layout(t, format);
  writeback.emplace_back(t, c);
  return c;
}
Tensor read_operand(const Tensor& t, MemoryFormat format) {
  return t.is_contiguous(format) ? t : copy_in_layout(t, format);
}

/// Key grouping slots that one implementation call can take together.
using GroupKey = std::tuple<int, int, uint8_t, uint8_t>;  // device type, index, param dtype, grad dtype
GroupKey key_of(const Tensor& p, const Tensor& g) {
  return {static_cast<int>(p.device().type()), p.device().index(), static_cast<uint8_t>(p.dtype()),
          static_cast<uint8_t>(g.dtype())};
}

Device device_of_key(const GroupKey& k) { return Device(static_cast<DeviceType>(std::get<0>(k)), std::get<1>(k)); }

}  // namespace

void sgd_step(const std::vector<SgdSlot>& slots, const SgdHyper& h) {
  const bool momentum = h.momentum != 0.0;
  std::vector<std::pair<Tensor, Tensor>> writeback;
  std::map<GroupKey, std::vector<SgdSlot>> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    const SgdSlot& s = slots[i];
    check_param_grad("sgd_step", i, s.param, s.grad);
    if (momentum) check_state("sgd_step", i, "momentum_buffer", s.param, s.momentum_buffer);
    else
      EMBER_CHECK(!s.momentum_buffer.defined(), "sgd_step: slot ", i, ": a momentum buffer was given with momentum 0");
    if (s.param.numel() == 0) continue;
    const MemoryFormat f = s.param.suggest_memory_format();
    SgdSlot w{inplace_operand(s.param, f, writeback), read_operand(s.grad, f),
              inplace_operand(s.momentum_buffer, f, writeback), s.init_buffer};
    groups[key_of(s.param, s.grad)].push_back(std::move(w));
  }
  for (auto& [key, list] : groups) sgd_step_table(device_of_key(key), list, h);
  for (auto& [dst, src] : writeback) copy(dst, src);
}

void adam_step(const std::vector<AdamSlot>& slots, const AdamHyper& h) {
  std::vector<std::pair<Tensor, Tensor>> writeback;
  std::map<GroupKey, std::vector<AdamSlot>> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    const AdamSlot& s = slots[i];
    check_param_grad("adam_step", i, s.param, s.grad);
    check_state("adam_step", i, "exp_avg", s.param, s.exp_avg);
    check_state("adam_step", i, "exp_avg_sq", s.param, s.exp_avg_sq);
    EMBER_CHECK(s.step >= 1, "adam_step: slot ", i, ": step count ", s.step, " (expected >= 1, counting this step)");
    if (s.param.numel() == 0) continue;
    const MemoryFormat f = s.param.suggest_memory_format();
    AdamSlot w{inplace_operand(s.param, f, writeback), read_operand(s.grad, f),
               inplace_operand(s.exp_avg, f, writeback), inplace_operand(s.exp_avg_sq, f, writeback), s.step};
    groups[key_of(s.param, s.grad)].push_back(std::move(w));
  }
  for (auto& [key, list] : groups) adam_step_table(device_of_key(key), list, h);
  for (auto& [dst, src] : writeback) copy(dst, src);
}

namespace {
/// Checks that all tensors are defined, floating and on one device; returns that device.
Device common_device(const char* op, const std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    EMBER_CHECK(is_floating(t.dtype()), op, ": tensor ", i, " has dtype ", dtype_name(t.dtype()),
                " (expected a floating dtype)");
    EMBER_CHECK(t.device() == tensors[0].device(), op, ": tensor 0 is on ", tensors[0].device().str(), " but tensor ",
                i, " (shape ", t.shape_str(), ") is on ", t.device().str(), "; all tensors must share one device");
  }
  return tensors.empty() ? Device::cpu() : tensors[0].device();
}
}  // namespace

Tensor global_norm(const std::vector<Tensor>& tensors) {
  const Device dev = common_device("global_norm", tensors);
  bool all_f64 = !tensors.empty();
  std::vector<Tensor> work;
  work.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    all_f64 = all_f64 && t.dtype() == DType::f64;
    if (t.numel() > 0) work.push_back(read_operand(t, t.suggest_memory_format()));  // any dense layout
  }
  Tensor out = empty({}, {.dtype = all_f64 ? DType::f64 : DType::f32, .device = dev});
  if (work.empty()) {
    fill(out, 0.0);
    return out;
  }
  global_norm_table(dev, work, out);
  return out;
}

void clip_by_norm_(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm, double eps) {
  const Device dev = common_device("clip_by_norm_", tensors);
  if (tensors.empty()) return;
  EMBER_CHECK(total_norm.defined() && total_norm.numel() == 1 &&
                  (total_norm.dtype() == DType::f32 || total_norm.dtype() == DType::f64),
              "clip_by_norm_: total_norm must be a one-element f32/f64 tensor, got ",
              total_norm.defined() ? total_norm.shape_str() + " " + dtype_name(total_norm.dtype()) : "undefined");
  EMBER_CHECK(total_norm.device() == dev, "clip_by_norm_: total_norm is on ", total_norm.device().str(),
              " but the tensors are on ", dev.str());
  std::vector<std::pair<Tensor, Tensor>> writeback;
  std::vector<Tensor> work;
  for (const Tensor& t : tensors)
    if (t.numel() > 0) work.push_back(inplace_operand(t, t.suggest_memory_format(), writeback));
  if (!work.empty()) clip_by_norm_table(dev, work, read_operand(total_norm, MemoryFormat::contiguous), max_norm, eps);
  for (auto& [dst, src] : writeback) copy(dst, src);
}

}  // namespace ember::kernels
