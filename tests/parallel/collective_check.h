#pragma once
// Inputs and expected results of collectives, shared by the in-process ring tests and the
// multi-process tests: rank r's element i is a pure function of (salt, r, i), exactly
// representable in the dtype, so every rank can compute what every other rank contributed and
// check its result element by element against a float64 reduction (integers: exactly).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include <ember/core/dtype.h>
#include <ember/parallel/process_group.h>

#include "support/reference.h"

namespace ember::testing {

inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Rank `r`'s element `i`: integers in [-100, 100]; floats in [-4, 4) with 8 significant bits
/// (exact in every float dtype, bf16 included).
inline double coll_value(DType dt, uint64_t salt, int r, int64_t i) {
  const uint64_t h = splitmix(salt * 0x100000001b3ull ^ (uint64_t(r) << 40) ^ uint64_t(i));
  if (!is_floating(dt)) return static_cast<double>(static_cast<int64_t>(h % 201) - 100);
  return (static_cast<double>(h % 256) - 128.0) / 32.0;
}

/// Writes coll_value(dt, salt, r, offset + k) for k < n into `p` (contiguous, dtype dt).
inline void coll_fill(void* p, DType dt, int64_t n, uint64_t salt, int r, int64_t offset = 0) {
  EMBER_DISPATCH_ALL(dt, "coll_fill", [&]<typename T>() {
    T* q = static_cast<T*>(p);
    for (int64_t k = 0; k < n; ++k) q[k] = static_cast<T>(static_cast<float>(coll_value(dt, salt, r, offset + k)));
  });
}

/// The float64 reduction over ranks 0..world-1 of element i (avg of integers truncates).
inline double coll_expected(parallel::ReduceOp op, DType dt, uint64_t salt, int world, int64_t i) {
  double acc = coll_value(dt, salt, 0, i);
  for (int r = 1; r < world; ++r) {
    const double v = coll_value(dt, salt, r, i);
    if (op == parallel::ReduceOp::max) {
      acc = std::max(acc, v);
    } else if (op == parallel::ReduceOp::min) {
      acc = std::min(acc, v);
    } else {
      acc += v;
    }
  }
  if (op == parallel::ReduceOp::avg) acc = is_floating(dt) ? acc / world : std::trunc(acc / world);
  return acc;
}

/// Allowed |result - expected| for element i: integers and max/min exactly; sums and averages
/// went through up to world - 1 roundings in dt, each at most loose_tol(dt) of the running magnitude.
inline double coll_tolerance(parallel::ReduceOp op, DType dt, uint64_t salt, int world, int64_t i) {
  if (!is_floating(dt) || op == parallel::ReduceOp::max || op == parallel::ReduceOp::min) return 0.0;
  double mag = 0;
  for (int r = 0; r < world; ++r) mag += std::fabs(coll_value(dt, salt, r, i));
  return loose_tol(dt) * world * (op == parallel::ReduceOp::avg ? mag / world + 1e-30 : mag);
}

/// Checks `n` elements at `p` (element k is reduced element offset + k); returns "" when all
/// match, else the first mismatches and how many there were.
inline std::string coll_compare_reduced(const void* p, DType dt, int64_t n, parallel::ReduceOp op, uint64_t salt,
                                        int world, int64_t offset = 0) {
  std::ostringstream os;
  int64_t bad = 0;
  const size_t es = dtype_size(dt);
  for (int64_t k = 0; k < n; ++k) {
    const double got = load_f64(dt, static_cast<const char*>(p) + static_cast<size_t>(k) * es);
    const double want = coll_expected(op, dt, salt, world, offset + k);
    if (std::fabs(got - want) <= coll_tolerance(op, dt, salt, world, offset + k)) continue;
    if (bad++ < 3) os << " [" << offset + k << "] = " << got << ", expected " << want << ";";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(n) + " elements wrong (" + dtype_name(dt) + " " +
         parallel::reduce_op_name(op) + ", world " + std::to_string(world) + "):" + os.str();
}

/// Checks that `n` elements at `p` equal rank `r`'s values offset..offset+n-1 exactly.
inline std::string coll_compare_rank(const void* p, DType dt, int64_t n, uint64_t salt, int r, int64_t offset = 0) {
  std::ostringstream os;
  int64_t bad = 0;
  const size_t es = dtype_size(dt);
  for (int64_t k = 0; k < n; ++k) {
    const double got = load_f64(dt, static_cast<const char*>(p) + static_cast<size_t>(k) * es);
    const double want = coll_value(dt, salt, r, offset + k);
    if (got == want) continue;
    if (bad++ < 3) os << " [" << offset + k << "] = " << got << ", expected rank " << r << "'s " << want << ";";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(n) + " elements differ from rank " + std::to_string(r) + "'s (" +
         dtype_name(dt) + "):" + os.str();
}

}  // namespace ember::testing
