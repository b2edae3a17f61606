#include <ember/layers/pool.h>

#include <sstream>

#include <ember/core/error.h>

namespace ember::layers {

namespace {

// "2" or "(3, 2)". Through a stream: GCC 12 warns (-Wrestrict, falsely) on "(" + std::to_string chains.
std::string size_str(Size2 s) {
  std::ostringstream os;
  if (s.h == s.w) {
    os << s.h;
  } else {
    os << "(" << s.h << ", " << s.w << ")";
  }
  return os.str();
}

/// Checks the window at construction, so a bad layer fails where it is built, not at first use.
Pool2dFuncOptions make_options(const char* what, Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode,
                               bool count_include_pad) {
  EMBER_CHECK(kernel.h >= 1 && kernel.w >= 1 && stride.h >= 0 && stride.w >= 0 && padding.h >= 0 && padding.w >= 0,
              what, ": expected kernel_size >= 1, stride >= 1 (or 0 for the kernel size), padding >= 0, got kernel ",
              size_str(kernel), ", stride ", size_str(stride), ", padding ", size_str(padding));
  EMBER_CHECK(2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, what, ": padding ", size_str(padding),
              " must be at most half of kernel_size ", size_str(kernel));
  return {kernel, stride, padding, ceil_mode, count_include_pad};
}

void check_input(const char* what, const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() == 4, what, ": expected input (N, C, H, W), got ",
              x.defined() ? x.shape_str() : "an undefined tensor");
}

std::string window_repr(const Pool2dFuncOptions& o) {
  const kernels::Pool2dParams p = o.params();
  return "kernel_size=" + size_str(o.kernel) + ", stride=" + size_str(Size2(p.stride_h, p.stride_w)) +
         ", padding=" + size_str(o.padding);
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode)
    : opts_(make_options("MaxPool2d", kernel_size, stride, padding, ceil_mode, true)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_input("MaxPool2d", x);
  return max_pool2d(x, opts_);
}

std::shared_ptr<Module> MaxPool2d::clone_structure() const {
  return std::make_shared<MaxPool2d>(opts_.kernel, opts_.stride, opts_.padding, opts_.ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return window_repr(opts_) + ", dilation=1, ceil_mode=" + (opts_.ceil_mode ? "True" : "False");
}

AvgPool2d::AvgPool2d(Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode, bool count_include_pad)
    : opts_(make_options("AvgPool2d", kernel_size, stride, padding, ceil_mode, count_include_pad)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_input("AvgPool2d", x);
  return avg_pool2d(x, opts_);
}

std::shared_ptr<Module> AvgPool2d::clone_structure() const {
  return std::make_shared<AvgPool2d>(opts_.kernel, opts_.stride, opts_.padding, opts_.ceil_mode,
                                     opts_.count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  std::string s = window_repr(opts_);
  if (opts_.ceil_mode) s += ", ceil_mode=True";
  if (!opts_.count_include_pad) s += ", count_include_pad=False";
  return s;
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : out_(output_size) {
  EMBER_CHECK(out_.h >= 1 && out_.w >= 1, "AdaptiveAvgPool2d: expected output_size >= 1, got ", size_str(out_));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_input("AdaptiveAvgPool2d", x);
  return adaptive_avg_pool2d(x, out_.h, out_.w);
}

std::shared_ptr<Module> AdaptiveAvgPool2d::clone_structure() const { return std::make_shared<AdaptiveAvgPool2d>(out_); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size_str(out_); }

}  // namespace ember::layers
