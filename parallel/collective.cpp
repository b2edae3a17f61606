// Collective descriptions, argument checks and HostWork (see collective.h).
#include <ember/parallel/collective.h>

#include <atomic>
#include <cstring>

#include <ember/core/error.h>

namespace ember::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::all_reduce:
      return "all_reduce";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::barrier:
      return "barrier";
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
  }
  return "?";
}

std::string tuple_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

std::string CollectiveCall::str() const {
  std::string out = std::string(op_kind_name(kind)) + " #" + std::to_string(seq);
  if (kind != OpKind::barrier) out += " on " + tuple_str(shape) + " " + dtype_name(dtype);
  return out;
}

std::string CollectiveCall::detailed() const {
  switch (kind) {
    case OpKind::all_reduce:
    case OpKind::reduce_scatter:
      return str() + " with op " + reduce_op_name(op);
    case OpKind::broadcast:
      return str() + " from root " + std::to_string(root);
    case OpKind::send:
      return str() + " to rank " + std::to_string(root);
    case OpKind::recv:
      return str() + " from rank " + std::to_string(root);
    default:
      return str();
  }
}

bool CollectiveCall::matches(const CollectiveCall& o) const {
  const bool reduces = kind == OpKind::all_reduce || kind == OpKind::reduce_scatter;
  return kind == o.kind && seq == o.seq && shape == o.shape && dtype == o.dtype && (!reduces || op == o.op) &&
         (kind != OpKind::broadcast || root == o.root);
}

// Layout: u8 kind, u8 dtype, u8 op, u8 ndim, i32 root, u64 seq, i64 dims[12] = 112 bytes, zero
// padded to kEncodedBytes. Both ends are the same build on the same kind of machine.
void CollectiveCall::encode(void* out) const {
  static_assert(16 + 8 * kMaxDims <= kEncodedBytes);
  unsigned char* p = static_cast<unsigned char*>(out);
  std::memset(p, 0, kEncodedBytes);
  const size_t ndim = std::min(shape.size(), kMaxDims);
  p[0] = static_cast<unsigned char>(kind);
  p[1] = static_cast<unsigned char>(dtype);
  p[2] = static_cast<unsigned char>(op);
  p[3] = static_cast<unsigned char>(shape.size() > kMaxDims ? 255 : ndim);
  const int32_t r = root;
  std::memcpy(p + 4, &r, 4);
  std::memcpy(p + 8, &seq, 8);
  for (size_t i = 0; i < ndim; ++i) std::memcpy(p + 16 + 8 * i, &shape[i], 8);
}

CollectiveCall CollectiveCall::decode(const void* in) {
  const unsigned char* p = static_cast<const unsigned char*>(in);
  CollectiveCall c;
  c.kind = static_cast<OpKind>(p[0]);
  c.dtype = static_cast<DType>(p[1]);
  c.op = static_cast<ReduceOp>(p[2]);
  const size_t ndim = p[3] == 255 ? kMaxDims : p[3];
  int32_t r;
  std::memcpy(&r, p + 4, 4);
  c.root = r;
  std::memcpy(&c.seq, p + 8, 8);
  c.shape.resize(std::min(ndim, kMaxDims));
  for (size_t i = 0; i < c.shape.size(); ++i) std::memcpy(&c.shape[i], p + 16 + 8 * i, 8);
  return c;
}

void check_collective_tensor(const Tensor& t, const char* op, const char* arg, bool reducing) {
  EMBER_CHECK(t.defined(), op, ": '", arg, "' is an undefined tensor");
  EMBER_CHECK(t.is_contiguous(), op, ": '", arg, "' must be contiguous, got shape ", tuple_str(t.shape()),
              " with strides ", tuple_str(t.strides()), " (call .contiguous() first)");
  const DType d = t.dtype();
  const bool reducible =
      d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16 || d == DType::i32 || d == DType::i64;
  EMBER_CHECK(reducible || !reducing, op, ": '", arg, "' has dtype ", dtype_name(d),
              "; reductions support f32, f64, f16, bf16, i32 and i64");
}

void check_all_gather_sizes(const Tensor& out, const Tensor& input, int world) {
  EMBER_CHECK(out.dtype() == input.dtype() && out.numel() == input.numel() * world, "all_gather: 'out' must hold ",
              world, " x ", input.numel(), " elements of ", dtype_name(input.dtype()), ", got ", tuple_str(out.shape()),
              " ", dtype_name(out.dtype()));
}

void check_reduce_scatter_sizes(const Tensor& out, const Tensor& input, int world) {
  EMBER_CHECK(out.dtype() == input.dtype() && input.numel() == out.numel() * world,
              "reduce_scatter: 'input' must hold ", world, " x ", out.numel(), " elements of ", dtype_name(out.dtype()),
              ", got ", tuple_str(input.shape()), " ", dtype_name(input.dtype()));
}

void check_root(int root, int world) {
  EMBER_CHECK(root >= 0 && root < world, "broadcast: root ", root, " is not a rank of this group (world size ", world,
              ")");
}

void check_peer(int peer, int rank, int world, const char* op, const char* arg) {
  EMBER_CHECK(peer >= 0 && peer < world && peer != rank, op, ": ", arg, " = ", peer,
              " is not another rank of this group (rank ", rank, " of ", world, ")");
}

int next_group_id() {
  static std::atomic<int> next{0};
  return next++;
}

void HostWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

double HostWork::busy_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_ || started_ == std::chrono::steady_clock::time_point{}) return 0;
  return std::chrono::duration<double>(finished_ - started_).count();
}

void HostWork::start() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = std::chrono::steady_clock::now();
}

void HostWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = std::chrono::steady_clock::now();
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace ember::parallel
