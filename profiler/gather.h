#pragma once
// One trace for the ranks of a job: each rank's clock measured against rank 0's through the job's
// store (as NTP does), and every rank's spans gathered by rank 0 into one Trace Event Format file,
// a process row per rank ("rank k", pid k) on rank 0's clock.
//
//   profiler::ClockOffset clock = profiler::measure_clock_offset(*group);  // every rank, collective
//   profiler::Profile p(...);  ... train ...  p.stop();
//   profiler::GatheredTrace t = profiler::gather_chrome_trace(p, *group, clock);  // every rank
//   if (group->rank() == 0) write(t.json);
//
// The offset: rank k stamps t0 on its clock and sets a key; rank 0, waiting for that key, stamps t
// on its clock and answers; rank k stamps t3 when the answer arrives. Rank 0's stamp happened
// between t0 and t3, so rank k's clock minus rank 0's lies within (t0 + t3) / 2 - t plus or minus
// (t3 - t0) / 2: the residual is half the round trip, a bound, not an estimate. Of several round
// trips the shortest one is kept.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/parallel/process_group.h>
#include <ember/parallel/store.h>
#include <ember/profiler/profile.h>

namespace ember::profiler {

/// One rank's clock against rank 0's.
struct ClockOffset {
  int64_t offset_ns = 0;  // this rank's clock minus rank 0's (rank 0: 0)
  int64_t residual_ns = 0;  // |offset_ns - the true offset| <= residual_ns (rank 0: 0)
  int round_trips = 0;  // measured (rank 0: 0)
};

struct ClockOptions {
  int round_trips = 16;  // per rank; the shortest one gives the offset
  /// The clock to measure (default now_ns, the clock spans use); tests shift it.
  std::function<uint64_t()> clock = {};
  /// Prefix of the store keys; the keys are removed once read, so a later measurement with the
  /// same prefix starts clean.
  std::string key_prefix = "ember/profiler/clock/";
};

/// This rank's offset to rank 0 through `store`. Every rank of `world_size` calls it (rank 0
/// answers the others, one after another); waits use the store's timeout.
ClockOffset measure_clock_offset(parallel::Store& store, int rank, int world_size, const ClockOptions& options = {});
/// The same through the job's store at group.info()'s MASTER_ADDR:MASTER_PORT (where
/// init_process_group hosts it), on a connection of its own. Collective.
ClockOffset measure_clock_offset(const parallel::ProcessGroup& group, const ClockOptions& options = {});

/// What gather_chrome_trace gives rank 0 (other ranks: empty).
struct GatheredTrace {
  /// Trace Event Format: every rank's events (pid = rank, process rows "rank k", timestamps in
  /// microseconds on rank 0's clock from the earliest profile start), and "otherData" with each
  /// rank's clock offset and residual.
  std::string json;
  int64_t spans = 0;  // complete events, all ranks together
  std::vector<ClockOffset> offsets;  // by rank
};

/// Every rank's spans of `profile` (stopped) in one trace on rank 0, each rank's timestamps moved
/// by its `clock` offset onto rank 0's clock. Collective: every rank calls it, also one that kept
/// no span.
GatheredTrace gather_chrome_trace(const Profile& profile, parallel::ProcessGroup& group, const ClockOffset& clock);

namespace detail {
/// Rank 0's half of gather_chrome_trace (tests call it with made-up ranks): `ranks[k]` is what rank
/// k sends, a JSON line {"origin_ns", "offset_ns", "residual_ns", "round_trips"} and then its
/// Profile::chrome_trace_json(k).
GatheredTrace merge_chrome_traces(const std::vector<std::string>& ranks);
}  // namespace detail

}  // namespace ember::profiler
