#include <ember/layers/conv.h>

#include <cmath>
#include <sstream>

#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/layers/init.h>

namespace ember::layers {

namespace {
// Through a stream: GCC 12 warns (-Wrestrict, falsely) on "(" + std::to_string(...) chains.
std::string pair_str(Size2 s) {
  std::ostringstream os;
  os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options,
               Generator& gen)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), opts_(options) {
  const std::string what = "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ")";
  EMBER_CHECK(in_ > 0 && out_ > 0, what, ": expected positive in/out channels");
  EMBER_CHECK(kernel_.h >= 1 && kernel_.w >= 1, what, ": expected kernel_size >= 1, got ", pair_str(kernel_));
  EMBER_CHECK(opts_.stride.h >= 1 && opts_.stride.w >= 1 && opts_.padding.h >= 0 && opts_.padding.w >= 0 &&
                  opts_.dilation.h >= 1 && opts_.dilation.w >= 1,
              what, ": expected stride >= 1, padding >= 0, dilation >= 1, got stride ", pair_str(opts_.stride),
              ", padding ", pair_str(opts_.padding), ", dilation ", pair_str(opts_.dilation));
  EMBER_CHECK(opts_.groups >= 1 && in_ % opts_.groups == 0 && out_ % opts_.groups == 0, what,
              ": groups = ", opts_.groups, " must divide both in_channels and out_channels");
  weight_ = register_parameter("weight", empty({out_, in_ / opts_.groups, kernel_.h, kernel_.w}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), init::FanMode::FanIn, init::Nonlinearity::LeakyReLU, gen);
  if (opts_.bias) {
    bias_ = register_parameter("bias", empty({out_}));
    const double fan_in = static_cast<double>(in_ / opts_.groups * kernel_.h * kernel_.w);
    const double bound = 1.0 / std::sqrt(fan_in);
    init::uniform_(bias_, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_, "Conv2d(", in_, ", ", out_, "): expected input (N, ",
              in_, ", H, W), got ", x.defined() ? x.shape_str() : "an undefined tensor");
  return conv2d(x, weight_, bias_, {opts_.stride, opts_.padding, opts_.dilation, opts_.groups});
}

std::shared_ptr<Module> Conv2d::clone_structure() const {
  Generator scratch;  // the values are overwritten by clone(); the default generator stays put
  return std::make_shared<Conv2d>(in_, out_, kernel_, opts_, scratch);
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_ << ", " << out_ << ", kernel_size=" << pair_str(kernel_) << ", stride=" << pair_str(opts_.stride);
  if (opts_.padding != Size2(0)) os << ", padding=" << pair_str(opts_.padding);
  if (opts_.dilation != Size2(1)) os << ", dilation=" << pair_str(opts_.dilation);
  if (opts_.groups != 1) os << ", groups=" << opts_.groups;
  if (!opts_.bias) os << ", bias=False";
  return os.str();
}

}  // namespace ember::layers
