// Module: registration, traversal, mode switching, device/dtype moves and state dicts.
//
// Moving a module (to(Device), to(DType), to(MemoryFormat)) rewrites each parameter's and buffer's TensorImpl in
// place (storage, strides, offset, dtype) instead of swapping in a new handle. The tensor inside the
// module is thereby replaced by the moved one while every handle to it — a layer's `weight_`
// member, an optimizer's parameter list, DDP's hooks — keeps naming the same tensor, which stays a
// leaf that requires grad (PyTorch's `param.data = param.data.to(...)`).
#include <ember/layers/module.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <unordered_set>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/meta.h>
#include <ember/core/error.h>
#include <ember/kernels/copy.h>

namespace ember::layers {
namespace {

// Checks a registration name: non-empty, no '.', unique among this module's entries.
void check_name(const char* what, const std::string& name, bool taken, const std::string& module_name) {
  EMBER_CHECK(!name.empty(), module_name, ": ", what, " name must not be empty");
  EMBER_CHECK(name.find('.') == std::string::npos, module_name, ": ", what, " name '", name,
              "' must not contain '.' (dots separate nesting levels in state dict keys)");
  EMBER_CHECK(!taken, module_name, ": a parameter, buffer or child named '", name, "' is already registered");
}

// Points t's TensorImpl at `moved`'s storage and geometry; autograd state (requires_grad, hooks)
// is kept. Callers move an accumulated .grad() alongside.
void rebind_in_place(Tensor& t, const Tensor& moved) {
  if (moved.is_same(t)) return;
  TensorImpl* impl = t.impl();
  const TensorImpl* src = moved.impl();
  impl->storage = src->storage;
  impl->sizes = src->sizes;
  impl->strides = src->strides;
  impl->offset = src->offset;
  impl->dtype = src->dtype;
}

// True when `name` is already used by a parameter, buffer or child of one module.
template <typename P, typename B, typename C>
bool name_taken(const P& params, const B& buffers, const C& children, const std::string& name) {
  auto match = [&](const auto& e) { return e.first == name; };
  return std::any_of(params.begin(), params.end(), match) || std::any_of(buffers.begin(), buffers.end(), match) ||
         std::any_of(children.begin(), children.end(), match);
}

template <typename F> void for_each_module(const Module& m, const std::string& prefix, F&& fn) {
  fn(prefix, m);
  for (const auto& [name, child] : m.named_children()) for_each_module(*child, prefix + name + ".", fn);
}

}  // namespace

// ---- registration ----

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  EMBER_CHECK(t.defined(), this->name(), ": register_parameter('", name, "') got an undefined tensor");
  check_name("parameter", name, name_taken(params_, buffers_, children_, name), this->name());
  EMBER_CHECK(is_floating(t.dtype()), this->name(), ": parameter '", name, "' must be floating, got dtype ",
              dtype_name(t.dtype()), " (register integer state as a buffer)");
  // A parameter is a leaf: cut it off any graph it came from.
  if (!t.is_leaf()) t = t.detach();
  t.requires_grad_(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  EMBER_CHECK(t.defined(), this->name(), ": register_buffer('", name, "') got an undefined tensor");
  check_name("buffer", name, name_taken(params_, buffers_, children_, name), this->name());
  if (t.requires_grad()) t = t.detach();
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, this->name(), ": register_module('", name, "') got a null module");
  EMBER_CHECK(m.get() != this, this->name(), ": a module cannot be its own child ('", name, "')");
  check_name("child module", name, name_taken(params_, buffers_, children_, name), this->name());
  children_.emplace_back(name, std::move(m));
}

// ---- traversal ----

// A parameter shared by several modules (weight tying, a child registered twice) is listed once,
// under the first name reached, so an optimizer updates it once per step.
std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  for_each_module(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, p] : m.params_)
      if (seen.insert(p.impl()).second) out.emplace_back(prefix + n, p);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for_each_module(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, b] : m.buffers_) out.emplace_back(prefix + n, b);
  });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

// ---- modes, moves ----

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Module& Module::to(Device device) {
  device.validate();
  NoGradGuard no_grad;
  for (auto& [n, p] : params_) {
    if (p.device() == device) continue;
    Tensor g = p.grad();
    rebind_in_place(p, p.detach().to(device));
    if (g.defined()) p.set_grad(g.to(device));
  }
  for (auto& [n, b] : buffers_)
    if (b.device() != device) rebind_in_place(b, b.detach().to(device));
  for (auto& [n, c] : children_) c->to(device);
  return *this;
}

Module& Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), name(), ".to(", dtype_name(dtype), "): expected a floating dtype");
  NoGradGuard no_grad;
  for (auto& [n, p] : params_) {
    if (p.dtype() == dtype) continue;
    Tensor g = p.grad();
    rebind_in_place(p, p.detach().to(dtype));
    if (g.defined()) p.set_grad(g.to(dtype));
  }
  // Integer buffers (e.g. BatchNorm's num_batches_tracked) keep their dtype.
  for (auto& [n, b] : buffers_)
    if (is_floating(b.dtype()) && b.dtype() != dtype) rebind_in_place(b, b.detach().to(dtype));
  for (auto& [n, c] : children_) c->to(dtype);
  return *this;
}

Module& Module::to(MemoryFormat format) {
  NoGradGuard no_grad;
  // Copied with format's exact strides (also a tensor in both layouts whose strides say the other).
  for (auto& [n, p] : params_) {
    if (p.dim() != 4 || p.suggest_memory_format() == format) continue;
    Tensor g = p.grad();
    rebind_in_place(p, kernels::copy_in_layout(p, format));
    if (g.defined()) p.set_grad(kernels::copy_in_layout(g, format));
  }
  for (auto& [n, b] : buffers_)
    if (b.dim() == 4 && b.suggest_memory_format() != format) rebind_in_place(b, kernels::copy_in_layout(b, format));
  for (auto& [n, c] : children_) c->to(format);
  return *this;
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

// ---- state dicts ----

// Every name of this tree's parameters and buffers: shared tensors appear under each of their
// names, as in PyTorch's state_dict.
StateDict Module::state_dict() const {
  StateDict out;
  for_each_module(*this, "", [&](const std::string& prefix, const Module& m) {
    for (const auto& [n, p] : m.params_) out.emplace(prefix + n, p.detach());
    for (const auto& [n, b] : m.buffers_) out.emplace(prefix + n, b.detach());
  });
  return out;
}

void Module::load_state_dict(const StateDict& state) {
  // Validate every entry first, collecting all problems, so a failed load modifies nothing.
  // Detached views of this module's tensors: copying into them writes the parameters' storage.
  const StateDict targets = state_dict();
  std::ostringstream problems;
  int n_problems = 0;
  for (const auto& [key, t] : targets) {
    auto it = state.find(key);
    if (it == state.end()) {
      problems << "\n  missing key '" << key << "' (expected shape " << t.shape_str() << ")";
      ++n_problems;
    } else if (!it->second.defined()) {
      problems << "\n  key '" << key << "' holds an undefined tensor (expected shape " << t.shape_str() << ")";
      ++n_problems;
    } else if (it->second.sizes() != t.sizes()) {
      problems << "\n  shape mismatch for '" << key << "': the state dict has " << it->second.shape_str()
               << ", the module expects " << t.shape_str();
      ++n_problems;
    }
  }
  for (const auto& [key, t] : state) {
    if (targets.count(key) == 0) {
      problems << "\n  unexpected key '" << key << "'" << (t.defined() ? " of shape " + t.shape_str() : "");
      ++n_problems;
    }
  }
  EMBER_CHECK(n_problems == 0, name(), ".load_state_dict: ", n_problems,
              " problem(s), nothing was loaded:", problems.str());
  NoGradGuard no_grad;
  for (const auto& [key, view] : targets) {
    Tensor dst = view;
    const Tensor& src = state.at(key);
    if (src.device() == dst.device() && src.data_ptr() == dst.data_ptr() && src.strides() == dst.strides() &&
        src.dtype() == dst.dtype())
      continue;  // loading a module's own state_dict back into it
    dst.copy_(src);
  }
}

// ---- replication ----

std::shared_ptr<Module> Module::clone_structure() const {
  EMBER_FAIL(name(), ": clone_structure() is not implemented; DataParallel needs it to build replicas");
}

namespace {

// Copies src's value into dst's own new storage (same dtype and device as src); dst keeps its
// TensorImpl and autograd record, so the module's cached handles see the copy.
template <typename L> void copy_entries(const char* what, const L& src, const L& dst, const std::string& module_name) {
  EMBER_CHECK(src.size() == dst.size(), module_name, ".clone(): clone_structure() made ", dst.size(), " ", what,
              "s, the module has ", src.size(), " (tied weights are not supported)");
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& [name, s] = src[i];
    Tensor d = dst[i].second;
    EMBER_CHECK(dst[i].first == name && d.sizes() == s.sizes(), module_name, ".clone(): clone_structure() made ", what,
                " '", dst[i].first, "' of shape ", d.shape_str(), " where the module has '", name, "' of shape ",
                s.shape_str());
    rebind_in_place(d, s.detach().clone());
  }
}

}  // namespace

// train() is recursive, so each level is set top-down, after its parent.
void copy_training_modes(const Module& from, Module& to) {
  to.train(from.is_training());
  const auto fc = from.named_children(), tc = to.named_children();
  EMBER_CHECK(fc.size() == tc.size(), "copy_training_modes: ", from.name(), " has ", fc.size(), " children, ",
              to.name(), " has ", tc.size());
  for (size_t i = 0; i < fc.size(); ++i) copy_training_modes(*fc[i].second, *tc[i].second);
}

std::shared_ptr<Module> Module::clone() const {
  std::shared_ptr<Module> c = clone_structure();
  EMBER_CHECK(c != nullptr, name(), ": clone_structure() returned null");
  NoGradGuard no_grad;
  const auto src_params = named_parameters(), dst_params = c->named_parameters();
  copy_entries("parameter", src_params, dst_params, name());
  for (size_t i = 0; i < src_params.size(); ++i) {
    Tensor d = dst_params[i].second;
    d.requires_grad_(src_params[i].second.requires_grad());
  }
  copy_entries("buffer", named_buffers(), c->named_buffers(), name());
  copy_training_modes(*this, *c);
  return c;
}

void Module::bind_parameters_for_replica(const std::vector<Tensor>& values) {
  const auto params = named_parameters();
  EMBER_CHECK(values.size() == params.size(), name(), ".bind_parameters_for_replica: got ", values.size(),
              " values for ", params.size(), " parameters");
  for (size_t i = 0; i < params.size(); ++i) {  // all checked before any is bound
    const Tensor& v = values[i];
    EMBER_CHECK(v.defined() && v.sizes() == params[i].second.sizes(), name(),
                ".bind_parameters_for_replica: parameter '", params[i].first, "' has shape ",
                params[i].second.shape_str(), ", the value has ",
                v.defined() ? v.shape_str() : std::string("no tensor (undefined)"));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& v = values[i];
    Tensor p = params[i].second;
    if (v.is_same(p)) continue;
    rebind_in_place(p, v);
    p.impl()->autograd = v.is_leaf() ? nullptr : v.impl()->autograd;
  }
}

// ---- printing ----

std::string Module::str() const {
  std::ostringstream os;
  std::function<void(const Module&, int)> print = [&](const Module& m, int depth) {
    os << m.name() << "(";
    const std::string extra = m.extra_repr();
    if (m.children_.empty()) {
      os << extra << ")";
      return;
    }
    const std::string indent(2 * (depth + 1), ' ');
    if (!extra.empty()) os << "\n" << indent << extra;
    for (const auto& [n, c] : m.children_) {
      os << "\n" << indent << "(" << n << "): ";
      print(*c, depth + 1);
    }
    os << "\n" << std::string(2 * depth, ' ') << ")";
  };
  print(*this, 0);
  return os.str();
}

}  // namespace ember::layers
