// Differentiable reductions: sum, mean, max/min along a dim (gradient to the arg position),
// amax/amin over dims (gradient shared among ties), and argmax (not differentiable).
#include <ember/autograd/autocast.h>
#include <ember/autograd/ops.h>
#include <ember/autograd/ops_util.h>
#include <ember/core/record.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/reduce.h>

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::save_output;
using autograd::TensorList;
using autograd::detail::as_keepdim;
using autograd::detail::keepdim_shape;
using autograd::detail::normalize_dims;
using kernels::BinaryOp;
using kernels::ReduceOp;

namespace {

// sum/mean: the gradient (result shape) is broadcast back over the reduced dims, scaled by `scale`.
Tensor sum_like(ReduceOp op, const char* name, const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  profiler::RecordScope profile_scope(name, profiler::Category::op);
  profile_scope.inputs(x_in);
  autograd::detail::check_defined(name, x_in, "x");
  const Tensor x = amp::cast_for(amp::OpClass::Float32, x_in);  // autocast: sums and means accumulate in f32
  Tensor out = kernels::reduce(op, x, dims, keepdim);
  if (!needs_grad(x)) return out;
  std::vector<int64_t> nd = normalize_dims(name, dims, x.dim());
  int64_t count = 1;
  for (int64_t d : nd) count *= x.size(d);
  const double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(count) : 1.0;
  record(
      out, op == ReduceOp::Mean ? "MeanBackward" : "SumBackward",
      [in = x.sizes(), kd = keepdim_shape(x.sizes(), nd), scale](const Tensor& g) {
        Tensor gs = scale == 1.0 ? g : g * scale;
        return TensorList{as_keepdim(gs, kd).expand(in)};
      },
      x);
  return out;
}

// max/min along one dim: the gradient goes to the first arg-extremum of each slice.
Tensor extremum_dim(ReduceOp op, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  autograd::detail::check_defined(name, x, "x");
  Tensor out = kernels::reduce(op, x, {dim}, keepdim);
  if (!needs_grad(x)) return out;
  if (x.dim() == 0) {  // a single element is its own extremum
    record(
        out, op == ReduceOp::Max ? "MaxBackward" : "MinBackward", [](const Tensor& g) { return TensorList{g}; }, x);
    return out;
  }
  const int64_t d = wrap_dim(dim, x.dim(), name);
  // idx: (keepdim shape) i64; argmin is the first argmax of -x.
  Tensor idx = kernels::argmax(op == ReduceOp::Max ? x : kernels::unary(kernels::UnaryOp::Neg, x), d, true);
  record(
      out, op == ReduceOp::Max ? "MaxBackward" : "MinBackward",
      [idx, in = x.sizes(), d](const Tensor& g) {
        // one_hot[..., r, ...] = (r == idx[..., 0, ...]), broadcast to the input's shape.
        Shape pos_shape(in.size(), 1);
        pos_shape[d] = in[d];
        Tensor pos = arange(in[d], {.dtype = DType::i64, .device = g.device()}).reshape(pos_shape);
        Tensor one_hot = kernels::binary(BinaryOp::Eq, pos, idx);
        Tensor zero = scalar_tensor(0.0, g.options());
        Tensor gx = kernels::where(one_hot, as_keepdim(g, idx.sizes()), zero);
        return TensorList{gx.sizes() == in ? gx : gx.expand(in)};
      },
      x);
  return out;
}

// amax/amin over dims: every element equal to the extremum of its slice gets g / (number of ties).
Tensor extremum_dims(ReduceOp op, const char* name, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  autograd::detail::check_defined(name, x, "x");
  Tensor out = kernels::reduce(op, x, dims, keepdim);
  if (!needs_grad(x)) return out;
  std::vector<int64_t> nd = normalize_dims(name, dims, x.dim());
  record(
      out, op == ReduceOp::Max ? "AmaxBackward" : "AminBackward",
      [x, y = save_output(out), nd, kd = keepdim_shape(x.sizes(), nd)](const Tensor& g) {
        Tensor mask = kernels::binary(BinaryOp::Eq, x, as_keepdim(y, kd)).to(g.dtype());
        Tensor count = nd.empty() ? mask : kernels::reduce(ReduceOp::Sum, mask, nd, true);
        return TensorList{mask * (as_keepdim(g, kd) / count)};
      },
      x);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return sum_like(ReduceOp::Sum, "sum", x, {}, false); }
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_like(ReduceOp::Sum, "sum", x, dims, keepdim);
}
Tensor mean(const Tensor& x) { return sum_like(ReduceOp::Mean, "mean", x, {}, false); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_like(ReduceOp::Mean, "mean", x, dims, keepdim);
}
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(ReduceOp::Max, "max", x, dim, keepdim); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(ReduceOp::Min, "min", x, dim, keepdim); }
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_dims(ReduceOp::Max, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_dims(ReduceOp::Min, "amin", x, dims, keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  autograd::detail::check_defined("argmax", x, "x");
  return kernels::argmax(x, dim, keepdim);
}

}  // namespace ember
