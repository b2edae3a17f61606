#pragma once
// Per-element expectations for the CUDA layer-kernel tests (conv, pool, norm): a float64
// reference value and an error bound for each element, derived by the test from the formula and
// the dtypes involved; plus a bit-for-bit comparison of two tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include "support/reference.h"

namespace ember::testing {

struct Expect {
  std::vector<double> val;  // float64 reference, row-major
  std::vector<double> bound;  // allowed |actual - val| per element
};

/// Smallest absolute error a store into dt can make near zero (half an f16 subnormal step; bf16
/// and wider types have subnormals far below any test value).
inline double store_floor(DType dt) { return dt == DType::f16 ? std::ldexp(1.0, -24) : 0.0; }

/// CHECKs |actual - val| <= bound for every element (NaN matches NaN, equal infinities match);
/// reports up to 5 misses with their index.
inline void check_expect(const Tensor& actual, const Expect& e) {
  const std::vector<double> got = to_f64(actual);
  REQUIRE(got.size() == e.val.size());
  REQUIRE(e.bound.size() == e.val.size());
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], v = e.val[i];
    bool ok;
    if (std::isnan(v)) ok = std::isnan(g);
    else if (std::isinf(v)) ok = g == v;
    else ok = std::fabs(g - v) <= e.bound[i];
    if (!ok && bad++ < 5) os << "  [" << i << "] got " << g << " expected " << v << " +- " << e.bound[i] << "\n";
  }
  INFO("shape " << actual.shape_str() << " dtype " << dtype_name(actual.dtype()) << ": " << bad << " of " << got.size()
                << " outside their bound\n"
                << os.str());
  CHECK(bad == 0);
}

/// How check_same_bits compares NaNs. The GPU's arithmetic returns the canonical NaN (all payload
/// bits set) where the CPU's returns its NaN operand (sign and payload kept), so a NaN that went
/// through arithmetic has device-dependent bits; AnyPayload counts two NaNs as the same.
enum class NanBits { Exact, AnyPayload };

/// CHECKs that a and b (any devices) hold the same bytes element for element.
inline void check_same_bits(const Tensor& a, const Tensor& b, NanBits nans = NanBits::Exact) {
  REQUIRE(a.sizes() == b.sizes());
  REQUIRE(a.dtype() == b.dtype());
  const Tensor ca = a.to(Device::cpu()).contiguous(), cb = b.to(Device::cpu()).contiguous();
  const size_t es = ca.element_size();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  std::vector<double> va, vb;  // values, to recognise NaNs of any floating dtype
  if (nans == NanBits::AnyPayload && is_floating(ca.dtype())) {
    va = ca.to_vector<double>();
    vb = cb.to_vector<double>();
  }
  int bad = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < ca.numel(); ++i) {
    const bool both_nan = !va.empty() && std::isnan(va[size_t(i)]) && std::isnan(vb[size_t(i)]);
    if (!both_nan && std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  INFO("shape " << ca.shape_str() << " dtype " << dtype_name(ca.dtype()) << ": " << bad << " elements differ, first at "
                << first);
  CHECK(bad == 0);
}

/// Widens a GPU-vs-reference expectation to a GPU-vs-CPU one: the CPU result becomes the value,
/// and the bound doubles because both sides may err from the reference by it.
inline Expect doubled(Expect e, const Tensor& cpu_result) {
  e.val = to_f64(cpu_result);
  for (double& b : e.bound) b *= 2.0;
  return e;
}

}  // namespace ember::testing
