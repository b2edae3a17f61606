#pragma once
// Shared test helpers: float64 references, dtype tolerances, random tensor makers.
//
// Inputs are made with the public factories (from_vector; its conversions are checked against
// round_to in tests/kernels/test_factory.cpp). Results are read back by walking tensor memory
// directly (raw strided loops over the storage, never ember's copy/cast/elementwise kernels), so a
// test built on them checks the kernels against an independent implementation. CUDA tensors are
// moved to the host with Tensor::to(Device::cpu()) (tested in tests/kernels/test_copy.cpp and the
// CUDA tests).
//
// API (namespace ember::testing):
//   unit_roundoff(dtype)       u, the relative error bound of one rounding to nearest in dtype
//                              (2^-53 f64, 2^-24 f32, 2^-11 f16, 2^-8 bf16; 0 for integers): what a
//                              bound derived from a rounding analysis is built from
//   gamma_n(n, u)              n u / (1 - n u): the bound of n roundings of unit roundoff u
//   loose_tol(dtype)           a loose relative tolerance with headroom, NOT one rounding: 1e-12
//                              f64 (~9007 u), 1e-5 f32 (~168 u), 1e-3 f16 (2.048 u), 1e-2 bf16
//                              (2.56 u); 0 for integers
//   loose_tol_sum(dtype, k)    loose_tol(dtype) * sqrt(k), for a sum/dot of length k
//   to_f64(t)                  elements of t (any strides, any device) in row-major order
//   random_tensor(sizes, dtype, seed, lo, hi, layout, device)   values U[lo, hi) from a fixed
//                              seed; layout picks a contiguous, transposed or step-2 strided view
//   random_values(n, seed, lo, hi)   the raw doubles behind random_tensor(..., Layout::Contiguous)
//   seeded_indices(n, d, seed) n i64 indices in [0, d) from a fixed seed (duplicates when n >> d)
//   round_to(dtype, v)         v rounded to dtype the way a store into that dtype rounds it
//   check_close(actual, expected, rtol, atol)   CHECKs every element, reports the first misses
//   check_bounded(actual, expected, bound)   CHECKs |actual - expected| <= kSecondOrder * bound[i]
//                              (kSecondOrder = 1.01: the O(u^2) terms a first-order bound drops)
//   acc_of(dtype)              the dtype kernels accumulate dtype in (f64 or f32)
//   reduced_dims(nd, dims), reduce_ref(op, vals, shape, red)   float64 reduction reference
//   pool_window_ref(o, k, s, pad, in), adaptive_window_ref(o, out, in),
//   avg_window_ref(p, oh, ow, H, W, Ho, Wo)   pooling windows (and the average's count)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/pool.h>
#include <ember/kernels/reduce.h>

namespace ember::testing {

/// Unit roundoff u of a floating dtype: half an ulp at 1, so one rounding to nearest of a real x
/// (in range, not subnormal) gives x (1 + d) with |d| <= u. 2^-53 for f64, 2^-24 for f32, 2^-11 for
/// f16, 2^-8 for bf16; 0 for integer dtypes (their results are exact or not rounded at all). A sum
/// of n terms accumulated in a dtype with unit roundoff u is within gamma_n * sum |x_i| of the exact
/// sum, gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, 3.1).
inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::f64:
      return std::ldexp(1.0, -53);
    case DType::f32:
      return std::ldexp(1.0, -24);
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
    default:
      return 0.0;
  }
}

/// gamma_n = n u / (1 - n u) for unit roundoff u (n u < 1): the relative bound of n roundings,
/// |prod (1 + d_i)^(+-1) - 1| <= gamma_n for |d_i| <= u, e.g. a sum or dot product of n terms.
inline double gamma_n(int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1 - nu);
}

/// A loose relative tolerance with headroom for results of a few roundings in `dt`. It is NOT one
/// rounding: 1e-12 in f64 is 9007.2 u (u = 2^-53), 1e-5 in f32 is 167.8 u (u = 2^-24), 1e-3 in
/// f16 is 2.048 u (u = 2^-11), 1e-2 in bf16 is 2.56 u (u = 2^-8); 0 for integers. So it is very
/// generous in f64 and f32 and only a couple of roundings in f16 and bf16. Where a test can count
/// its roundings, derive the bound from unit_roundoff(dt) instead.
inline double loose_tol(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 1e-2;
    default:
      return 0.0;
  }
}
/// loose_tol(dt) * sqrt(k), for a reduction or dot product of length k (k < 1 counts as 1): the
/// statistical growth of rounding errors, not the worst case (which grows like gamma_k, linearly).
inline double loose_tol_sum(DType dt, int64_t k) {
  return loose_tol(dt) * std::sqrt(static_cast<double>(k < 1 ? 1 : k));
}

/// Reads element at `p` (of dtype dt) as double.
inline double load_f64(DType dt, const void* p) {
  switch (dt) {
    case DType::f32:
      return *static_cast<const float*>(p);
    case DType::f64:
      return *static_cast<const double*>(p);
    case DType::f16:
      return static_cast<float>(*static_cast<const Half*>(p));
    case DType::bf16:
      return static_cast<float>(*static_cast<const BFloat16*>(p));
    case DType::i32:
      return *static_cast<const int32_t*>(p);
    case DType::i64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::u8:
      return *static_cast<const uint8_t*>(p);
    case DType::boolean:
      return *static_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}
/// Stores v into `p` as dtype dt (floats round to nearest, integers truncate toward zero and
/// narrow ones wrap, bool is v != 0).
inline void store_f64(DType dt, void* p, double v) {
  switch (dt) {
    case DType::f32:
      *static_cast<float*>(p) = static_cast<float>(v);
      break;
    case DType::f64:
      *static_cast<double*>(p) = v;
      break;
    case DType::f16:
      *static_cast<Half*>(p) = Half(static_cast<float>(v));
      break;
    case DType::bf16:
      *static_cast<BFloat16*>(p) = BFloat16(static_cast<float>(v));
      break;
    // Through i64 so out-of-range values wrap (as ember's casts do) instead of being undefined.
    case DType::i32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case DType::i64:
      *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DType::u8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DType::boolean:
      *static_cast<uint8_t*>(p) = v != 0.0 ? 1 : 0;
      break;
  }
}
/// v as it reads back after a store into dtype dt.
inline double round_to(DType dt, double v) {
  alignas(8) unsigned char buf[8];
  store_f64(dt, buf, v);
  return load_f64(dt, buf);
}

/// Elements of t in row-major order of its logical shape, as doubles (walks the strides itself).
// Reads element by element (not through ember's cast kernels, which it checks), walking the
// strides as an odometer over plain arrays: test files compile at -O0 (tests/CMakeLists.txt), and
// one copy of an inline function serves every file, so this loop must be cheap without an
// optimiser (it compares models' millions of parameters).
inline std::vector<double> to_f64(const Tensor& t_in) {
  Tensor t = t_in.device().is_cpu() ? t_in : t_in.to(Device::cpu());
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  if (n == 0) return out;
  const auto* base = static_cast<const unsigned char*>(t.data_ptr());
  const int64_t es = static_cast<int64_t>(t.element_size());
  const DType dtype = t.dtype();
  double* o = out.data();
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) o[i] = load_f64(dtype, base + i * es);
    return out;
  }
  const int64_t nd = t.dim();
  std::vector<int64_t> dims(t.sizes().begin(), t.sizes().end()), steps(t.strides().begin(), t.strides().end()),
      index(static_cast<size_t>(nd), 0);
  const int64_t *size = dims.data(), *stride = steps.data();
  int64_t* at = index.data();
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    o[i] = load_f64(dtype, base + off * es);
    for (int64_t d = nd - 1; d >= 0; --d) {  // the next index, last dim fastest
      if (++at[d] < size[d]) {
        off += stride[d];
        break;
      }
      off -= (size[d] - 1) * stride[d];
      at[d] = 0;
    }
  }
  return out;
}

/// n doubles U[lo, hi) from a fixed seed (std::mt19937_64, so independent of ember's RNG).
/// The values are what std::uniform_real_distribution<double>(lo, hi) draws from the engine in
/// libstdc++ (generate_canonical: one 64-bit draw / 2^64, kept below 1), spelled out: that template
/// is shared by every test file, and built at -O0 it takes a logarithm per draw (the checkpoint
/// kill test draws 4M values per child).
inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(n));
  double* p = v.data();
  const double span = hi - lo;
  for (int64_t i = 0; i < n; ++i) {
    double u = static_cast<double>(rng()) * 0x1p-64;
    if (u >= 1.0) u = std::nextafter(1.0, 0.0);
    p[i] = u * span + lo;
  }
  return v;
}

enum class Layout {
  Contiguous,  // plain row-major
  Transposed,  // last two dims swapped in memory (needs dim >= 2; else contiguous)
  Strided,  // every other element of a buffer twice as long in the last dim
};

/// n indices in [0, d) (i64, on the CPU) from a fixed seed: many duplicates when n >> d.
inline Tensor seeded_indices(int64_t n, int64_t d, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(d));
  }
  return from_vector(v, {n});
}

/// A tensor of logical shape `sizes` with values U[lo, hi) cast to dtype (integers truncate), laid
/// out as `layout` says. Its values in row-major order are random_values(numel, seed, lo, hi)
/// rounded to dtype, whatever the layout.
inline Tensor random_tensor(const Shape& sizes, DType dtype = DType::f32, uint64_t seed = 0, double lo = -1.0,
                            double hi = 1.0, Layout layout = Layout::Contiguous, Device device = Device::cpu()) {
  const std::vector<double> vals = random_values(numel_of(sizes), seed, lo, hi);
  const int64_t nd = static_cast<int64_t>(sizes.size());
  if (layout == Layout::Transposed && nd < 2) layout = Layout::Contiguous;
  if (layout == Layout::Strided && nd == 0) layout = Layout::Contiguous;
  if (layout == Layout::Contiguous) return from_vector(vals, sizes, {.dtype = dtype, .device = device});

  // A bigger contiguous buffer viewed with the wanted geometry: the view's elements hold vals.
  Shape buf_sizes = sizes, strides;
  if (layout == Layout::Transposed) {
    std::swap(buf_sizes[nd - 1], buf_sizes[nd - 2]);
    strides = contiguous_strides(buf_sizes);
    std::swap(strides[nd - 1], strides[nd - 2]);
  } else {
    buf_sizes[nd - 1] *= 2;
    strides = contiguous_strides(buf_sizes);
    strides[nd - 1] *= 2;
  }
  // Poison the gaps so a kernel that reads them produces visibly wrong numbers.
  std::vector<double> buf_vals(static_cast<size_t>(numel_of(buf_sizes)), 1e4);
  for (int64_t i = 0; i < static_cast<int64_t>(vals.size()); ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      off += (rem % sizes[d]) * strides[d];
      rem /= sizes[d];
    }
    buf_vals[static_cast<size_t>(off)] = vals[static_cast<size_t>(i)];
  }
  const Tensor buf = from_vector(buf_vals, buf_sizes, {.dtype = dtype, .device = device});
  return as_strided_raw(buf, sizes, strides, 0);
}

/// CHECKs |actual - expected| <= atol + rtol * |expected| for every element (NaN matches NaN,
/// equal infinities match). Reports up to 5 mismatches with their index.
inline void check_close(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol = 0.0) {
  const std::vector<double> got = to_f64(actual);
  REQUIRE(got.size() == expected.size());
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    bool ok;
    if (std::isnan(e)) ok = std::isnan(g);
    else if (std::isinf(e)) ok = g == e;
    else ok = std::fabs(g - e) <= atol + rtol * std::fabs(e);
    if (!ok && bad++ < 5) os << "  [" << i << "] got " << g << " expected " << e << "\n";
  }
  INFO("shape " << actual.shape_str() << " dtype " << dtype_name(actual.dtype()) << ", rtol " << rtol << " atol "
                << atol << ", " << bad << " mismatches:\n"
                << os.str());
  CHECK(bad == 0);
}

/// Factor over a first-order rounding bound (a sum of n u |term| contributions) for the O(u^2)
/// products of roundings it drops: below n u of the bound, far under 1% for the n of these tests.
inline constexpr double kSecondOrder = 1.01;

/// CHECKs |actual - expected| <= kSecondOrder * bound elementwise, bound a first-order rounding
/// bound per element (NaN matches NaN, equal infinities match). Reports up to 5 mismatches and
/// the largest |actual - expected| / bound (how tight the bound is).
inline void check_bounded(const Tensor& actual, const std::vector<double>& expected, const std::vector<double>& bound) {
  const std::vector<double> got = to_f64(actual);
  REQUIRE(got.size() == expected.size());
  REQUIRE(bound.size() == expected.size());
  int bad = 0;
  double worst = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i], b = kSecondOrder * bound[i];
    bool ok;
    if (std::isnan(e)) ok = std::isnan(g);
    else if (std::isinf(e)) ok = g == e;
    else {
      ok = std::fabs(g - e) <= b;
      if (b > 0) worst = std::max(worst, std::fabs(g - e) / b);
    }
    if (!ok && bad++ < 5) os << "  [" << i << "] got " << g << " expected " << e << " bound " << b << "\n";
  }
  INFO("shape " << actual.shape_str() << " dtype " << dtype_name(actual.dtype()) << ", largest error / bound " << worst
                << ", " << bad << " mismatches:\n"
                << os.str());
  CHECK(bad == 0);
}

/// The dtype a kernel accumulates dt in: f64 for f64, f32 for every other floating dtype.
inline DType acc_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

/// Which of the nd dims a reduction over `dims` covers (empty: all; negative dims count from the end).
inline std::vector<bool> reduced_dims(int64_t nd, const std::vector<int64_t>& dims) {
  std::vector<bool> red(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  return red;
}

/// float64 reference of a reduction, per output (row-major over the kept dims): the result, how
/// many elements it reduced, and the sums of |x| and x^2 over them (the scales a summation error
/// is relative to). Max and Min propagate NaN.
struct ReduceRef {
  std::vector<double> out, abs_sum, sq_sum;
  std::vector<int64_t> count;
};
/// Reduces `vals` (row-major of `shape`) with op over the dims flagged in `red`.
inline ReduceRef reduce_ref(kernels::ReduceOp op, const std::vector<double>& vals, const Shape& shape,
                            const std::vector<bool>& red) {
  using kernels::ReduceOp;
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n_out = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) n_out *= shape[d];
  ReduceRef r;
  r.out.assign(n_out, op == ReduceOp::Max ? -INFINITY : op == ReduceOp::Min ? INFINITY : 0.0);
  r.abs_sum.assign(n_out, 0.0);
  r.sq_sum.assign(n_out, 0.0);
  r.count.assign(n_out, 0);
  for (int64_t i = 0; i < static_cast<int64_t>(vals.size()); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t c = rem % shape[d];
      rem /= shape[d];
      if (!red[d]) {
        o += c * mul;
        mul *= shape[d];
      }
    }
    const double v = vals[i];
    ++r.count[o];
    r.abs_sum[o] += std::fabs(v);
    r.sq_sum[o] += v * v;
    if (op == ReduceOp::Max) r.out[o] = std::isnan(r.out[o]) || std::isnan(v) ? NAN : std::max(r.out[o], v);
    else if (op == ReduceOp::Min) r.out[o] = std::isnan(r.out[o]) || std::isnan(v) ? NAN : std::min(r.out[o], v);
    else r.out[o] += v;
  }
  if (op == ReduceOp::Mean)
    for (int64_t o = 0; o < n_out; ++o) r.out[o] /= static_cast<double>(r.count[o]);
  return r;
}

/// One pooling window along a dim: input positions [start, end), and `padded`, its size counted
/// against the padded input (what count_include_pad divides by).
struct PoolWindow {
  int64_t start, end, padded;
};
/// The window of output o for kernel k, stride s and padding pad over `in` positions (PyTorch's
/// rule: clipped to the input, padded size clipped to the padded input).
inline PoolWindow pool_window_ref(int64_t o, int64_t k, int64_t s, int64_t pad, int64_t in) {
  const int64_t start = o * s - pad, end = std::min(start + k, in + pad);
  return {std::max<int64_t>(start, 0), std::min(end, in), end - start};
}
/// The adaptive window of output o of `out` over `in` positions: [floor(o * in / out),
/// ceil((o + 1) * in / out)), computed in floating point.
inline PoolWindow adaptive_window_ref(int64_t o, int64_t out, int64_t in) {
  const auto start = static_cast<int64_t>(std::floor(static_cast<double>(o) * static_cast<double>(in) / out));
  const auto end = static_cast<int64_t>(std::ceil(static_cast<double>(o + 1) * static_cast<double>(in) / out));
  return {start, end, end - start};
}
/// The windows of output (oh, ow) of an average pooling from (H, W) to (Ho, Wo) and the count it
/// divides by: avg_pool2d's windows and count when p is given, adaptive_avg_pool2d's when p is null.
struct AvgWindow {
  PoolWindow h, w;
  double count;
};
inline AvgWindow avg_window_ref(const kernels::Pool2dParams* p, int64_t oh, int64_t ow, int64_t H, int64_t W,
                                int64_t Ho, int64_t Wo) {
  AvgWindow a;
  a.h = p ? pool_window_ref(oh, p->kernel_h, p->stride_h, p->pad_h, H) : adaptive_window_ref(oh, Ho, H);
  a.w = p ? pool_window_ref(ow, p->kernel_w, p->stride_w, p->pad_w, W) : adaptive_window_ref(ow, Wo, W);
  const bool padded = p == nullptr || p->count_include_pad;
  a.count = static_cast<double>(padded ? a.h.padded * a.w.padded : (a.h.end - a.h.start) * (a.w.end - a.w.start));
  return a;
}

}  // namespace ember::testing
