// Broadcast, Scatter and Gather with their backward closures (see comm_ops.h). Forwards move data
// with raw views (as_strided_raw) and kernels::copy, so they record nothing themselves; each op
// records one node whose closure runs the adjoint communication.
#include <ember/parallel/comm_ops.h>

#include <algorithm>
#include <sstream>
#include <string>

#include <ember/autograd/function.h>
#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember::parallel {

using autograd::TensorList;

namespace {

// A view of t's rows [start, start + length) along dim, without autograd.
Tensor raw_narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape sizes = t.sizes();
  sizes[dim] = length;
  return as_strided_raw(t, sizes, t.strides(), t.offset() + start * t.strides()[dim]);
}

// t on `device` as a tensor of its own handle: an alias of t's storage on t's device, else a copy.
Tensor raw_to(const Tensor& t, Device device) {
  if (device == t.device()) return as_strided_raw(t, t.sizes(), t.strides(), t.offset());
  Tensor out = empty(t.sizes(), {.dtype = t.dtype(), .device = device}, t.suggest_memory_format());
  kernels::copy(out, t);
  return out;
}

}  // namespace

std::string devices_str(const std::vector<Device>& devices) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < devices.size(); ++i) os << (i ? ", " : "") << devices[i].str();
  os << "}";
  return os.str();
}

std::vector<int64_t> chunk_sizes(int64_t size, int64_t parts) {
  EMBER_CHECK(size >= 1 && parts >= 1, "chunk_sizes: expected at least one row and one part, got ", size, " rows over ",
              parts, " parts");
  const int64_t n = std::min(size, parts);
  std::vector<int64_t> out(static_cast<size_t>(n), size / n);
  for (int64_t i = 0; i < size % n; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

std::vector<Tensor> broadcast_to(const Tensor& t, const std::vector<Device>& devices) {
  EMBER_CHECK(t.defined(), "broadcast_to: expected a tensor to copy to ", devices_str(devices),
              ", got an undefined tensor");
  EMBER_CHECK(!devices.empty(), "broadcast_to: expected at least one device for the tensor of shape ", t.shape_str());
  std::vector<Tensor> outs;
  outs.reserve(devices.size());
  for (const Device& d : devices) outs.push_back(raw_to(t, d));
  if (autograd::needs_grad(t)) {
    autograd::record_multi(outs, "BroadcastBackward",
                           [src = t.device()](const TensorList& grads) {
                             Tensor sum;
                             for (const Tensor& g : grads) {
                               if (!g.defined()) continue;
                               const Tensor here = g.to(src);
                               sum = sum.defined() ? sum + here : here;
                             }
                             return TensorList{sum};
                           },
                           {t});
  }
  return outs;
}

std::vector<Tensor> scatter(const Tensor& t, const std::vector<Device>& devices, int64_t dim) {
  EMBER_CHECK(t.defined(), "scatter: expected a tensor to split across ", devices_str(devices),
              ", got an undefined tensor");
  EMBER_CHECK(t.dim() >= 1, "scatter: cannot split a 0-d tensor (shape ", t.shape_str(), ") across ",
              devices_str(devices));
  EMBER_CHECK(!devices.empty(), "scatter: expected at least one device for the tensor of shape ", t.shape_str());
  dim = wrap_dim(dim, t.dim(), "scatter: dim");
  EMBER_CHECK(t.size(dim) >= 1, "scatter: cannot split shape ", t.shape_str(), " along dim ", dim, " (size 0) across ",
              devices_str(devices));
  const std::vector<int64_t> sizes = chunk_sizes(t.size(dim), static_cast<int64_t>(devices.size()));
  std::vector<Tensor> outs;
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back(raw_to(raw_narrow(t, dim, start, sizes[i]), devices[i]));
    start += sizes[i];
  }
  if (autograd::needs_grad(t)) {
    autograd::record_multi(outs, "ScatterBackward",
                           [in_sizes = t.sizes(), options = t.options(), format = t.suggest_memory_format(), dim,
                            sizes](const TensorList& grads) {
                             Tensor gx = empty(in_sizes, options, format);
                             int64_t at = 0;
                             for (size_t i = 0; i < sizes.size(); ++i) {
                               const Tensor piece = raw_narrow(gx, dim, at, sizes[i]);
                               if (grads[i].defined()) {
                                 kernels::copy(piece, grads[i]);
                               } else {
                                 kernels::fill(piece, 0.0);
                               }
                               at += sizes[i];
                             }
                             return TensorList{gx};
                           },
                           {t});
  }
  return outs;
}

Tensor gather(const std::vector<Tensor>& parts, Device out, int64_t dim) {
  EMBER_CHECK(!parts.empty(), "gather: expected at least one tensor to concatenate on ", out.str());
  for (size_t i = 0; i < parts.size(); ++i)
    EMBER_CHECK(parts[i].defined() && parts[i].dim() >= 1, "gather: part ", i, " is ",
                parts[i].defined() ? "0-d (shape " + parts[i].shape_str() + ")" : std::string("undefined"),
                "; expected tensors of at least one dim");
  const Tensor& first = parts[0];
  dim = wrap_dim(dim, first.dim(), "gather: dim");
  Shape out_sizes = first.sizes();
  out_sizes[dim] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    Shape a = p.sizes(), b = first.sizes();
    a[dim] = b[dim] = 0;
    EMBER_CHECK(p.dim() == first.dim() && a == b && p.dtype() == first.dtype(), "gather: part ", i, " (shape ",
                p.shape_str(), ", ", dtype_name(p.dtype()), ") does not match part 0 (shape ", first.shape_str(), ", ",
                dtype_name(first.dtype()), ") outside dim ", dim);
    out_sizes[dim] += p.size(dim);
  }
  Tensor result = empty(out_sizes, {.dtype = first.dtype(), .device = out}, first.suggest_memory_format());
  std::vector<int64_t> sizes;
  std::vector<Device> devices;
  std::vector<bool> need;  // parts that require grad (the others get none in backward)
  int64_t start = 0;
  for (const Tensor& p : parts) {
    kernels::copy(raw_narrow(result, dim, start, p.size(dim)), p);
    sizes.push_back(p.size(dim));
    devices.push_back(p.device());
    need.push_back(autograd::tensor_requires_grad(p));
    start += p.size(dim);
  }
  if (autograd::needs_grad_list(parts)) {
    std::vector<Tensor> outs{result};
    autograd::record_multi(
        outs, "GatherBackward",
        [dim, sizes, devices, need](const TensorList& grads) {
          TensorList gs(sizes.size());
          int64_t at = 0;
          for (size_t i = 0; i < sizes.size(); ++i) {
            if (need[i]) gs[i] = raw_to(raw_narrow(grads[0], dim, at, sizes[i]), devices[i]);
            at += sizes[i];
          }
          return gs;
        },
        parts);
    result = outs[0];
  }
  return result;
}

}  // namespace ember::parallel
