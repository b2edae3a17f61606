#pragma once
// Internal: what backends share about a collective call: its description for errors and for the
// debug-mode cross-rank check, argument validation, and the Work handle of host-side collectives.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include <ember/core/tensor.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Which collective (or point-to-point op) a call is.
enum class OpKind : uint8_t { all_reduce, broadcast, all_gather, reduce_scatter, barrier, send, recv };
/// "all_reduce", "broadcast", ...
const char* op_kind_name(OpKind k);

/// One call as errors and the debug check see it. `shape` and `dtype` describe the tensor the
/// call was given (all_gather and reduce_scatter: the per-rank input).
struct CollectiveCall {
  OpKind kind = OpKind::barrier;
  uint64_t seq = 0;  // sequence number in the group
  Shape shape;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;  // all_reduce, reduce_scatter
  int root = -1;  // broadcast: root; send/recv: the peer

  /// "all_reduce #12 on (4096,) f32".
  std::string str() const;
  /// str() plus the reduce op or root: "all_reduce #12 on (4096,) f32 with op max".
  std::string detailed() const;
  /// True when two ranks' calls can run together (same kind, seq, shape, dtype, op, root).
  bool matches(const CollectiveCall& o) const;

  /// Fixed-size encoding exchanged by the debug check (kEncodedBytes bytes).
  static constexpr size_t kEncodedBytes = 128;
  static constexpr size_t kMaxDims = 12;
  void encode(void* out) const;
  static CollectiveCall decode(const void* in);
};

/// Python-tuple text of a shape as the messages use it: "(4096,)", "(2, 3)", "()".
std::string tuple_str(const Shape& s);

/// Checks the argument every collective needs: defined, contiguous, a dtype collectives support
/// (f32, f64, f16, bf16, i32, i64; plus u8 and bool for broadcast, gather and send/recv).
void check_collective_tensor(const Tensor& t, const char* op, const char* arg, bool reducing);

/// The next group number of this process (0, 1, ...). Every rank creates its groups in the same
/// order, so the n-th group of every rank gets the same number: its keys in the store.
int next_group_id();

/// all_gather: `out` holds world * input.numel() elements of input's dtype.
void check_all_gather_sizes(const Tensor& out, const Tensor& input, int world);
/// reduce_scatter: `input` holds world * out.numel() elements of out's dtype.
void check_reduce_scatter_sizes(const Tensor& out, const Tensor& input, int world);
/// broadcast: `root` is a rank of the group.
void check_root(int root, int world);
/// send/recv: `peer` is another rank of the group (`arg` names it: "dst", "src").
void check_peer(int peer, int rank, int world, const char* op, const char* arg);

/// Work for collectives that finish on a host thread: the thread calls finish() once.
class HostWork : public Work {
 public:
  void wait() override;
  bool is_completed() override;
  double busy_seconds() override;
  /// The thread started running the collective (busy_seconds counts from here).
  void start();
  /// Marks the work done; `error` (if any) is rethrown by wait().
  void finish(std::exception_ptr error = nullptr);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point started_{}, finished_{};
};

}  // namespace ember::parallel
