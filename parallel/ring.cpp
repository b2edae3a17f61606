// The ring schedules (see ring.h) and the host reducer.
//
// A schedule is a list of steps; each step sends one chunk to the next rank and receives one from
// the previous rank (reducing it into the local copy or storing it). Every chunk is cut into P
// slices, so the schedule is a sequence of K = steps * P stages; stage m moves slice m % P of its
// step's chunks. Stage m sends what stage m - P produced (the same slice one step earlier), so it
// may be posted once stage m - P has completed; with at most `depth` stages in flight, up to
// min(depth, P) exchanges overlap with the reduction of the oldest one.
#include <ember/parallel/ring.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/half.h>

namespace ember::parallel {

std::pair<int64_t, int64_t> ring_chunk(int64_t n, int parts, int c) {
  const int64_t base = n / parts, rem = n % parts;
  const int64_t begin = c * base + std::min<int64_t>(c, rem);
  return {begin, begin + base + (c < rem ? 1 : 0)};
}

size_t ring_staging_bytes(const RingConfig& cfg) {
  return static_cast<size_t>(cfg.depth) * static_cast<size_t>(cfg.slice_elems) * dtype_size(cfg.dtype);
}

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

struct Step {
  int send_chunk;
  int recv_chunk;
  bool reduce;  // reduce the received slice into the local chunk (else store it there)
  bool last_reduce;  // the received chunk is final after this step (ReduceOp::avg divides it here)
};

void check_config(const RingConfig& cfg, int64_t numel) {
  EMBER_ASSERT(cfg.world_size >= 1 && cfg.rank >= 0 && cfg.rank < cfg.world_size, "ring: rank ", cfg.rank,
               " of world size ", cfg.world_size);
  EMBER_ASSERT(cfg.slice_elems >= 1 && cfg.depth >= 1, "ring: slice_elems ", cfg.slice_elems, ", depth ", cfg.depth);
  EMBER_ASSERT(numel >= 0, "ring: numel ", numel);
}

// Runs `steps` over `data` cut into world_size chunks (see the file comment).
void run_schedule(RingTransport& tr, RingReducer* red, char* data, int64_t numel, const std::vector<Step>& steps,
                  bool avg, const RingConfig& cfg, char* staging) {
  const int n = cfg.world_size;
  const size_t esize = dtype_size(cfg.dtype);
  const int64_t slice = cfg.slice_elems;
  const int64_t longest = ring_chunk(numel, n, 0).second;  // chunk 0 is a longest one
  const int64_t per_chunk = std::max<int64_t>(1, (longest + slice - 1) / slice);
  const int64_t stages = static_cast<int64_t>(steps.size()) * per_chunk;
  const int64_t window = std::min<int64_t>(cfg.depth, per_chunk);

  // [begin, length) of slice j of chunk c; slices past a short chunk's end are empty.
  auto slice_of = [&](int c, int64_t j) {
    const auto [b, e] = ring_chunk(numel, n, c);
    const int64_t sb = std::min(e, b + j * slice);
    return std::pair<int64_t, int64_t>{sb, std::min(e, sb + slice) - sb};
  };
  auto stage_parts = [&](int64_t m) {
    const Step& st = steps[static_cast<size_t>(m / per_chunk)];
    return std::tuple{st, slice_of(st.send_chunk, m % per_chunk), slice_of(st.recv_chunk, m % per_chunk)};
  };
  auto slot = [&](int64_t m) { return staging + static_cast<size_t>(m % cfg.depth) * slice * esize; };

  int64_t posted = 0;
  for (int64_t done = 0; done < stages; ++done) {
    for (; posted < stages && posted < done + window; ++posted) {
      const auto [st, snd, rcv] = stage_parts(posted);
      // A receive straight into the data may land where an earlier stage sent from (all-gather
      // overwrites the chunks sent during reduce-scatter, at least P stages earlier). The data
      // arriving there already includes what this rank sent from it, so those sends have left in
      // practice; waiting for them makes it a guarantee. Staging slots are never sent from.
      if (!st.reduce && posted >= per_chunk) tr.wait_sent(posted - per_chunk + 1);
      char* dst = st.reduce ? slot(posted) : data + rcv.first * esize;
      tr.post(data + snd.first * esize, snd.second * esize, dst, rcv.second * esize);
    }
    tr.wait_recv();
    const auto [st, snd, rcv] = stage_parts(done);
    if (st.reduce && rcv.second > 0) {
      red->reduce(data + rcv.first * esize, slot(done), rcv.second);
      if (avg && st.last_reduce) red->divide(data + rcv.first * esize, rcv.second, n);
    }
  }
  tr.wait_sent(stages);  // the caller may change the data once the collective returns
}

// Reduce-scatter steps starting from chunk `first` (rank r sends chunk first - s at step s and
// ends owning chunk first + 1).
void add_reduce_scatter(std::vector<Step>& steps, int first, int n) {
  for (int s = 0; s + 1 < n; ++s) steps.push_back({mod(first - s, n), mod(first - s - 1, n), true, s + 2 == n});
}
// All-gather steps starting from the owned chunk `first`.
void add_all_gather(std::vector<Step>& steps, int first, int n) {
  for (int s = 0; s + 1 < n; ++s) steps.push_back({mod(first - s, n), mod(first - s - 1, n), false, false});
}

}  // namespace

void ring_all_reduce(RingTransport& tr, RingReducer& red, void* data, int64_t numel, bool avg, const RingConfig& cfg,
                     void* staging) {
  check_config(cfg, numel);
  if (cfg.world_size == 1 || numel == 0) return;  // avg over one rank is the identity
  std::vector<Step> steps;
  add_reduce_scatter(steps, cfg.rank, cfg.world_size);
  add_all_gather(steps, cfg.rank + 1, cfg.world_size);
  run_schedule(tr, &red, static_cast<char*>(data), numel, steps, avg, cfg, static_cast<char*>(staging));
}

void ring_reduce_scatter(RingTransport& tr, RingReducer& red, void* data, int64_t numel, bool avg,
                         const RingConfig& cfg, void* staging) {
  check_config(cfg, numel);
  EMBER_ASSERT(numel % cfg.world_size == 0, "ring_reduce_scatter: ", numel, " elements in ", cfg.world_size, " blocks");
  if (cfg.world_size == 1 || numel == 0) return;
  std::vector<Step> steps;
  add_reduce_scatter(steps, cfg.rank - 1, cfg.world_size);
  run_schedule(tr, &red, static_cast<char*>(data), numel, steps, avg, cfg, static_cast<char*>(staging));
}

void ring_all_gather(RingTransport& tr, void* data, int64_t numel, const RingConfig& cfg) {
  check_config(cfg, numel);
  EMBER_ASSERT(numel % cfg.world_size == 0, "ring_all_gather: ", numel, " elements in ", cfg.world_size, " blocks");
  if (cfg.world_size == 1 || numel == 0) return;
  std::vector<Step> steps;
  add_all_gather(steps, cfg.rank, cfg.world_size);
  run_schedule(tr, nullptr, static_cast<char*>(data), numel, steps, false, cfg, nullptr);
}

void ring_broadcast(RingTransport& tr, void* data, int64_t numel, int root, const RingConfig& cfg) {
  check_config(cfg, numel);
  const int n = cfg.world_size;
  if (n == 1 || numel == 0) return;
  // Position along the chain root -> root+1 -> ... -> root-1. A middle rank forwards slice j
  // `lag` stages after receiving it, so `lag` receives stay in flight ahead of the forwarding.
  const int pos = mod(cfg.rank - root, n);
  const bool sends = pos != n - 1, receives = pos != 0;
  const int64_t lag = receives ? cfg.depth : 0;
  const int64_t slices = (numel + cfg.slice_elems - 1) / cfg.slice_elems;
  const int64_t stages = slices + (sends ? lag : 0);
  const size_t esize = dtype_size(cfg.dtype);
  char* base = static_cast<char*>(data);
  auto bytes_of = [&](int64_t j) {
    return (j < 0 || j >= slices) ? size_t(0)
                                  : static_cast<size_t>(std::min(cfg.slice_elems, numel - j * cfg.slice_elems)) * esize;
  };
  auto at = [&](int64_t j) { return base + (j < 0 ? 0 : j) * cfg.slice_elems * static_cast<int64_t>(esize); };
  int64_t posted = 0;
  for (int64_t done = 0; done < stages; ++done) {
    for (; posted < stages && posted < done + cfg.depth; ++posted) {
      const int64_t s = posted - lag;  // slice sent by this stage
      tr.post(at(s), sends ? bytes_of(s) : 0, at(posted), receives ? bytes_of(posted) : 0);
    }
    tr.wait_recv();
  }
  tr.wait_sent(stages);
}

namespace {

template <typename T, ReduceOp Op> void reduce_loop(T* __restrict dst, const T* __restrict src, int64_t n) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    // Combined in float, rounded once per step (what the half types' arithmetic would do anyway).
    for (int64_t i = 0; i < n; ++i) {
      const float a = static_cast<float>(dst[i]), b = static_cast<float>(src[i]);
      float r;
      if constexpr (Op == ReduceOp::max) {
        r = std::max(a, b);
      } else if constexpr (Op == ReduceOp::min) {
        r = std::min(a, b);
      } else {
        r = a + b;
      }
      dst[i] = T(r);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (Op == ReduceOp::max) {
        dst[i] = std::max(dst[i], src[i]);
      } else if constexpr (Op == ReduceOp::min) {
        dst[i] = std::min(dst[i], src[i]);
      } else {
        dst[i] += src[i];
      }
    }
  }
}

template <typename T, ReduceOp Op> class HostReducer final : public RingReducer {
 public:
  void reduce(void* dst, const void* src, int64_t count) override {
    reduce_loop<T, Op>(static_cast<T*>(dst), static_cast<const T*>(src), count);
  }
  void divide(void* data, int64_t count, int64_t divisor) override {
    T* p = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      for (int64_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(divisor));
    } else {
      const T d = static_cast<T>(divisor);
      for (int64_t i = 0; i < count; ++i) p[i] /= d;
    }
  }
};

template <typename T> std::unique_ptr<RingReducer> reducer_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return std::make_unique<HostReducer<T, ReduceOp::sum>>();
    case ReduceOp::max:
      return std::make_unique<HostReducer<T, ReduceOp::max>>();
    case ReduceOp::min:
      return std::make_unique<HostReducer<T, ReduceOp::min>>();
  }
  EMBER_FAIL("reduction: unknown op ", int(op));
}

}  // namespace

std::unique_ptr<RingReducer> make_host_reducer(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reducer_for<float>(op);
    case DType::f64:
      return reducer_for<double>(op);
    case DType::f16:
      return reducer_for<Half>(op);
    case DType::bf16:
      return reducer_for<BFloat16>(op);
    case DType::i32:
      return reducer_for<int32_t>(op);
    case DType::i64:
      return reducer_for<int64_t>(op);
    default:
      break;
  }
  EMBER_FAIL("reduction over dtype ", dtype_name(dtype), " is not supported (f32, f64, f16, bf16, i32, i64 are)");
}

}  // namespace ember::parallel
