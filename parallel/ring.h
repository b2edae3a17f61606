#pragma once
// ember's ring collectives, written once against two small interfaces: a RingTransport moves bytes
// to the next rank and from the previous one (both directions in flight together), and a
// RingReducer combines a received slice into the local one where the data lives (host loops for
// tcp, a CUDA kernel for nccl). The tcp backend runs them over sockets; the nccl backend over
// ncclSend/ncclRecv (algorithm "ring").
//
// All-reduce of n elements on N ranks: the buffer is cut into N chunks (sizes differ by at most
// one element; any n, including 0 and n < N). Reduce-scatter: in step s = 0..N-2 rank r sends
// chunk (r - s) mod N and receives chunk (r - s - 1) mod N, which it reduces into its own copy;
// after N-1 steps rank r holds chunk (r + 1) mod N fully reduced. All-gather: N-1 more steps pass
// the reduced chunks on. Each rank sends and receives 2 (N-1)/N * n elements in all, the least any
// all-reduce can. Every chunk is cut into slices; a slice is sent on as soon as it is reduced, and
// up to `depth` exchanges are in flight, so the wire and the reduction overlap.
// docs/parallel.md derives the cost model.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <ember/core/dtype.h>
#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Moves bytes around the ring. One transport serves one collective; its exchanges are numbered
/// 0, 1, ... in the order posted, and each half (send, receive) completes in that order.
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  /// Starts sending `send_bytes` at `send` to the next rank and receiving `recv_bytes` from the
  /// previous rank into `recv`; both proceed together (either count may be 0). Returns at once;
  /// the send memory must stay unchanged until wait_sent covers it, the receive memory untouched
  /// until wait_recv does.
  virtual void post(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) = 0;
  /// Waits until the receive of the oldest exchange not yet waited for has completed.
  virtual void wait_recv() = 0;
  /// Waits until the sends of exchanges 0 .. count-1 have completed (their memory may change).
  virtual void wait_sent(int64_t count) = 0;
};

/// Combines received data into local data (runs where the data lives).
class RingReducer {
 public:
  virtual ~RingReducer() = default;
  /// dst[i] = op(dst[i], src[i]) for `count` elements.
  virtual void reduce(void* dst, const void* src, int64_t count) = 0;
  /// data[i] /= divisor for `count` elements (ReduceOp::avg; integers truncate).
  virtual void divide(void* data, int64_t count, int64_t divisor) = 0;
};

/// Where this rank sits and how the work is cut.
struct RingConfig {
  int rank = 0;
  int world_size = 1;
  DType dtype = DType::f32;
  int64_t slice_elems = 1 << 16;  // elements per pipelined slice (>= 1)
  int depth = 2;  // exchanges in flight (>= 1); a reduction needs depth staging slices
};

/// [begin, end) of chunk `c` when `n` elements are cut into `parts` chunks (the first n % parts
/// chunks are one element longer).
std::pair<int64_t, int64_t> ring_chunk(int64_t n, int parts, int c);
/// Bytes of staging memory the reducing collectives need: depth * slice_elems * element size.
size_t ring_staging_bytes(const RingConfig& cfg);

/// In place: `data` (numel elements of cfg.dtype) becomes the reduction over all ranks; `avg`
/// divides by world_size. `staging` holds ring_staging_bytes(cfg) bytes where the data lives.
void ring_all_reduce(RingTransport& tr, RingReducer& red, void* data, int64_t numel, bool avg, const RingConfig& cfg,
                     void* staging);
/// In place on `data` (numel = world_size * m elements): afterwards block cfg.rank
/// ([rank * m, (rank + 1) * m)) holds the reduction over all ranks of that block; the other
/// blocks hold partial sums.
void ring_reduce_scatter(RingTransport& tr, RingReducer& red, void* data, int64_t numel, bool avg,
                         const RingConfig& cfg, void* staging);
/// In place on `data` (numel = world_size * m elements): block cfg.rank is this rank's
/// contribution; afterwards every block holds its rank's.
void ring_all_gather(RingTransport& tr, void* data, int64_t numel, const RingConfig& cfg);
/// In place: every rank's `data` becomes rank `root`'s, passed along the ring root, root+1, ...
/// in pipelined slices.
void ring_broadcast(RingTransport& tr, void* data, int64_t numel, int root, const RingConfig& cfg);

/// The host reducer for `dtype` and `op` (f16 and bf16 are combined in float and rounded once
/// per step, as NCCL does; max and min ignore nothing: a NaN operand may or may not win).
std::unique_ptr<RingReducer> make_host_reducer(DType dtype, ReduceOp op);

}  // namespace ember::parallel
