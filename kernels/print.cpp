// Tensor::str(): PyTorch-like text. Floats print with 4 decimals, switching to scientific
// notation when the magnitudes would not read well in fixed point; every element of a tensor is
// padded to one width so columns line up; more than kSummarizeThreshold elements print only the
// first and last kEdgeItems along each long dim, with "..." between.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/kernels/copy.h>

namespace ember {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;
const std::string kPrefix = "tensor(";

double load_double(DType dt, const void* p) {
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
    case DType::boolean:
      return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

class Printer {
 public:
  explicit Printer(const Tensor& t) : t_(t), summarize_(t.numel() > kSummarizeThreshold) {
    base_ = static_cast<const unsigned char*>(t.data_ptr());
    esize_ = static_cast<int64_t>(t.element_size());
    collect(0, 0);
    choose_format();
  }

  std::string body() const { return block(0, 0); }

 private:
  // Indices shown along `dim`; -1 marks the "..." gap.
  std::vector<int64_t> shown(int64_t dim) const {
    const int64_t n = t_.sizes()[dim];
    std::vector<int64_t> idx;
    if (summarize_ && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  const void* at(int64_t off) const { return base_ + off * esize_; }

  // Gathers the values that will be printed, to choose one format for all of them.
  void collect(int64_t dim, int64_t off) {
    if (dim == t_.dim()) {
      values_.push_back(load_double(t_.dtype(), at(off)));
      return;
    }
    for (int64_t i : shown(dim))
      if (i >= 0) collect(dim + 1, off + i * t_.strides()[dim]);
  }

  void choose_format() {
    if (!is_floating(t_.dtype())) {
      for (size_t i = 0; i < values_.size(); ++i) width_ = std::max(width_, element_at_value(values_[i], 0).size());
      return;
    }
    double max_abs = 0, min_abs = INFINITY;
    bool all_integral = true, any_finite = false;
    for (double v : values_) {
      if (!std::isfinite(v)) continue;
      any_finite = true;
      const double a = std::fabs(v);
      max_abs = std::max(max_abs, a);
      if (a != 0) min_abs = std::min(min_abs, a);
      if (v != std::floor(v)) all_integral = false;
    }
    if (any_finite && max_abs > 0) {
      if (all_integral) sci_ = max_abs > 1e8;
      else sci_ = max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4;
    }
    for (double v : values_) width_ = std::max(width_, element_at_value(v, 0).size());
  }

  std::string element_at_value(double v, size_t width) const {
    std::string s;
    const DType dt = t_.dtype();
    if (dt == DType::boolean) {
      s = v != 0 ? "True" : "False";
    } else if (!is_floating(dt)) {
      s = std::to_string(static_cast<long long>(v));
    } else if (std::isnan(v)) {
      s = "nan";
    } else if (std::isinf(v)) {
      s = v > 0 ? "inf" : "-inf";
    } else {
      char buf[64];
      std::snprintf(buf, sizeof(buf), sci_ ? "%.4e" : "%.4f", v);
      s = buf;
    }
    if (s.size() < width) s.insert(0, width - s.size(), ' ');
    return s;
  }

  std::string element(int64_t off) const {
    // i64 beyond 2^53 would lose digits through double: print those from the integer itself.
    if (t_.dtype() == DType::i64) {
      std::string s = std::to_string(static_cast<long long>(*static_cast<const int64_t*>(at(off))));
      if (s.size() < width_) s.insert(0, width_ - s.size(), ' ');
      return s;
    }
    return element_at_value(load_double(t_.dtype(), at(off)), width_);
  }

  // Text of the sub-tensor at `dim` starting at element offset `off`, placed after `dim`
  // opening brackets on the first line.
  std::string block(int64_t dim, int64_t off) const {
    const int64_t nd = t_.dim();
    if (dim == nd) return element(off);
    const std::vector<int64_t> idx = shown(dim);
    const size_t indent = kPrefix.size() + static_cast<size_t>(dim) + 1;
    std::string out = "[";
    if (dim == nd - 1) {
      // Innermost dim: as many elements per line as fit in kLineWidth (PyTorch's rule; the
      // summarizing " ..." counts as one element).
      const size_t per_line = std::max<size_t>(1, (kLineWidth - (indent - 1)) / (width_ + 2));
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) {
          if (k % per_line == 0) {
            out += ",\n";
            out.append(indent, ' ');
          } else {
            out += ", ";
          }
        }
        out += idx[k] < 0 ? " ..." : element(off + idx[k] * t_.strides()[dim]);
      }
    } else {
      std::string sep = ",";
      sep.append(static_cast<size_t>(nd - dim - 1), '\n');
      sep.append(indent, ' ');
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) out += sep;
        out += idx[k] < 0 ? "..." : block(dim + 1, off + idx[k] * t_.strides()[dim]);
      }
    }
    return out + "]";
  }

  const Tensor& t_;
  bool summarize_;
  const unsigned char* base_ = nullptr;
  int64_t esize_ = 1;
  std::vector<double> values_;
  bool sci_ = false;
  size_t width_ = 0;
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Tensor host = *this;
  if (!device().is_cpu()) {
    host = empty(sizes(), {.dtype = dtype()});
    kernels::copy(host, *this);
  }
  std::string s = kPrefix;
  if (numel() == 0) {
    s += "[]";
    if (dim() != 1) s += ", size=" + shape_str();
  } else {
    s += Printer(host).body();
  }
  if (!device().is_cpu()) s += ", device='" + device().str() + "'";
  if (dtype() != DType::f32) s += std::string(", dtype=") + dtype_name(dtype());
  if (requires_grad()) s += ", requires_grad=True";
  return s + ")";
}

}  // namespace ember
