#pragma once
// A fixed CPU thread pool for kernels. Size: EMBER_NUM_THREADS, default the cores this process may
// run on (its CPU affinity: what Slurm, HTCondor or taskset allow, not every core of the machine).
#include <cstdint>
#include <functional>

namespace ember {

/// The cores this process may run on (its CPU affinity), at least 1.
int available_cores();
/// Number of threads kernels use (including the calling thread).
int num_threads();
/// Overrides EMBER_NUM_THREADS for this process (recreates the pool).
void set_num_threads(int n);

/// Time parallel_for callers have waited, their own chunks done, for the pool's workers to finish
/// theirs, since the process started (diagnostics: train/ records it per epoch).
double pool_wait_seconds();

/// Calls fn(begin_i, end_i) on disjoint chunks covering [begin, end). Runs inline when the range
/// is smaller than `grain` or when called from inside a pool worker (no nested parallelism).
/// The first exception thrown by fn is rethrown on the caller.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ember
