// Front functions of the elementwise ops: operand checks, broadcasting (stride-0 views), dtype
// promotion, output allocation, dispatch. Device implementations: kernels/cpu/elementwise.cpp,
// kernels/cuda/elementwise.cu.
#include <ember/kernels/elementwise.h>

#include <initializer_list>
#include <string>

#include <ember/kernels/copy.h>
#include <ember/kernels/expand.h>

namespace ember::kernels {

DispatchTable<UnaryFn> unary_table("unary");
DispatchTable<UnaryBackwardFn> unary_backward_table("unary_backward");
DispatchTable<BinaryFn> binary_table("binary");
DispatchTable<BinaryScalarFn> binary_scalar_table("binary_scalar");
DispatchTable<WhereFn> where_table("where");

namespace {

void check_defined(const char* op, const char* name, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": operand ", name, " is undefined");
}

void check_same_device(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  EMBER_CHECK(a.device() == b.device(), op, ": operands on different devices: ", na, " on ", a.device().str(), ", ", nb,
              " on ", b.device().str());
}

void check_unary_dtype(UnaryOp op, DType dt, const char* what = "") {
  const bool ok = is_floating(dt) || ((dt == DType::i32 || dt == DType::i64) && unary_allows_integers(op));
  EMBER_CHECK(ok, op_name(op), what, ": unsupported dtype ", dtype_name(dt), " (expected ",
              unary_allows_integers(op) ? "f32, f64, f16, bf16, i32 or i64" : "f32, f64, f16 or bf16", ")");
}

void check_binary_dtype(BinaryOp op, DType dt) {
  EMBER_CHECK(dt != DType::boolean || binary_allows_bool(op), op_name(op),
              ": not defined for bool operands (use a numeric dtype)");
}

Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const Error& e) {
    throw Error(std::string(op) + ": " + e.what());
  }
}

/// The layout of an elementwise result: that of the first dense operand with the result's shape
/// (not broadcast: an expanded view, e.g. the ones a sum's backward hands down, has no layout), so
/// that channels-last operands give a channels-last result; else row-major.
MemoryFormat layout_for(const Shape& shape, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->defined() && t->sizes() == shape && (t->is_contiguous() || t->is_contiguous(MemoryFormat::channels_last)))
      return t->suggest_memory_format();
  return MemoryFormat::contiguous;
}

// t converted to dtype (t itself when it already has it), in t's layout.
Tensor as_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : cast(t, dtype, t.suggest_memory_format());
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  check_defined(op_name(op), "x", x);
  check_unary_dtype(op, x.dtype());
  Tensor out = empty(x.sizes(), x.options(), x.suggest_memory_format());
  if (out.numel() > 0) unary_table(x.device(), op, x, out);
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y) {
  const std::string name = std::string(op_name(op)) + " backward";
  EMBER_CHECK(grad.defined(), name, ": grad is undefined");
  check_unary_dtype(op, grad.dtype(), " backward");
  Tensor xs, ys;  // the operand the formula reads, on grad's shape and dtype
  if (unary_grad_reads(op) != UnaryGradReads::None) {
    const bool reads_x = unary_grad_reads(op) == UnaryGradReads::Input;
    const Tensor& v = reads_x ? x : y;
    const char* vname = reads_x ? "x (the forward input)" : "y (the forward output)";
    EMBER_CHECK(v.defined(), name, ": needs ", vname, ", got an undefined tensor");
    EMBER_CHECK(v.sizes() == grad.sizes(), name, ": grad has shape ", grad.shape_str(), " but ", vname, " has shape ",
                v.shape_str());
    check_same_device(name.c_str(), "grad", grad, reads_x ? "x" : "y", v);
    (reads_x ? xs : ys) = as_dtype(v, grad.dtype());
  }
  Tensor out = empty(grad.sizes(), grad.options(), layout_for(grad.sizes(), {&grad, &x, &y}));
  if (out.numel() > 0) unary_backward_table(grad.device(), op, grad, xs, ys, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_defined(name, "a", a);
  check_defined(name, "b", b);
  check_same_device(name, "a", a, "b", b);
  const Shape shape = broadcast_for(name, a.sizes(), b.sizes());
  const DType dt = promote_types(a.dtype(), b.dtype());
  check_binary_dtype(op, dt);
  Tensor out = empty(shape, {.dtype = is_comparison(op) ? DType::boolean : dt, .device = a.device()},
                     layout_for(shape, {&a, &b}));
  if (out.numel() == 0) return out;
  const Tensor ae = expand_to(as_dtype(a, dt), shape);
  const Tensor be = expand_to(as_dtype(b, dt), shape);
  binary_table(a.device(), op, ae, be, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = op_name(op);
  check_defined(name, "a", a);
  check_binary_dtype(op, a.dtype());
  Tensor out = empty(a.sizes(), {.dtype = is_comparison(op) ? DType::boolean : a.dtype(), .device = a.device()},
                     a.suggest_memory_format());
  if (out.numel() > 0) binary_scalar_table(a.device(), op, a, s, scalar_first, out);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", "cond", cond);
  check_defined("where", "a", a);
  check_defined("where", "b", b);
  check_same_device("where", "cond", cond, "a", a);
  check_same_device("where", "a", a, "b", b);
  EMBER_CHECK(cond.dtype() == DType::boolean || cond.dtype() == DType::u8,
              "where: cond must have dtype bool or u8, got ", dtype_name(cond.dtype()));
  const Shape shape = broadcast_for("where", broadcast_for("where", cond.sizes(), a.sizes()), b.sizes());
  const DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()}, layout_for(shape, {&a, &b, &cond}));
  if (out.numel() == 0) return out;
  const Tensor ce = expand_to(as_dtype(cond, DType::boolean), shape);
  const Tensor ae = expand_to(as_dtype(a, dt), shape);
  const Tensor be = expand_to(as_dtype(b, dt), shape);
  where_table(a.device(), ce, ae, be, out);
  return out;
}

}  // namespace ember::kernels
