#include <ember/models/blocks.h>

#include <sstream>
#include <utility>

#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/layers/sequential.h>

namespace ember::models {
namespace {

void check_block_args(const char* block, int64_t in, int64_t out, int64_t stride) {
  EMBER_CHECK(in >= 1 && out >= 1, block, ": channels must be >= 1, got in_channels ", in, ", out_channels ", out);
  EMBER_CHECK(stride >= 1, block, ": stride must be >= 1, got ", stride);
}

std::string block_repr(int64_t in, int64_t out, int64_t stride) {
  std::ostringstream os;
  os << in << ", " << out << ", stride=" << stride;
  return os.str();
}

// 3x3 convolution, padding 1, no bias (a BatchNorm follows or precedes it in every block).
std::shared_ptr<layers::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Generator& gen) {
  const layers::Conv2dOptions opts{.stride = stride, .padding = 1, .bias = false};
  return std::make_shared<layers::Conv2d>(in, out, 3, opts, gen);
}

std::shared_ptr<layers::Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride, Generator& gen) {
  return std::make_shared<layers::Conv2d>(in, out, 1, layers::Conv2dOptions{.stride = stride, .bias = false}, gen);
}

}  // namespace

// ---- NamedSequential ----

NamedSequential::NamedSequential(std::string type_name) : type_name_(std::move(type_name)) {}

layers::ModulePtr NamedSequential::add(const std::string& child_name, layers::ModulePtr m) {
  EMBER_CHECK(m != nullptr, type_name_, "::add: null module for child '", child_name, "'");
  register_module(child_name, m);  // checks the name (non-empty, no '.', unique)
  chain_.push_back(m);
  return m;
}

Tensor NamedSequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const layers::ModulePtr& m : chain_) y = m->forward(y);
  return y;
}

std::shared_ptr<layers::Module> NamedSequential::clone_structure() const {
  auto c = std::make_shared<NamedSequential>(type_name_);
  for (const auto& [child_name, m] : named_children()) c->add(child_name, m->clone_structure());
  return c;
}

// ---- BasicBlock ----

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator& gen)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  check_block_args("BasicBlock", in_channels, out_channels, stride);
  // Registration order fixes both the state-dict order and the order parameters are drawn from
  // `gen` (PyTorch's kuangliu BasicBlock: conv1, bn1, conv2, bn2, shortcut).
  conv1_ = register_module("conv1", conv3x3(in_channels, out_channels, stride, gen));
  bn1_ = register_module("bn1", std::make_shared<layers::BatchNorm2d>(out_channels));
  conv2_ = register_module("conv2", conv3x3(out_channels, out_channels, 1, gen));
  bn2_ = register_module("bn2", std::make_shared<layers::BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    auto projection = std::make_shared<layers::Sequential>();
    projection->push_back(conv1x1(in_channels, out_channels, stride, gen));
    projection->push_back(std::make_shared<layers::BatchNorm2d>(out_channels));
    shortcut_ = register_module("shortcut", projection);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() == 4 && x.sizes()[1] == in_, "BasicBlock(", block_repr(in_, out_, stride_),
              "): expected input (N, ", in_, ", H, W), got ",
              x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  Tensor f = bn2_->forward(conv2_->forward(relu(bn1_->forward(conv1_->forward(x)))));
  const Tensor s = shortcut_ ? shortcut_->forward(x) : x;
  return relu(f + s);
}

std::shared_ptr<layers::Module> BasicBlock::clone_structure() const {
  Generator scratch;  // the values are overwritten by clone(); the default generator stays put
  return std::make_shared<BasicBlock>(in_, out_, stride_, scratch);
}

std::string BasicBlock::extra_repr() const { return block_repr(in_, out_, stride_); }

// ---- PreActBlock ----

PreActBlock::PreActBlock(int64_t in_channels, int64_t out_channels, int64_t stride, double dropout, Generator& gen)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  check_block_args("PreActBlock", in_channels, out_channels, stride);
  EMBER_CHECK(dropout >= 0.0 && dropout < 1.0, "PreActBlock: dropout must be in [0, 1), got ", dropout);
  bn1_ = register_module("bn1", std::make_shared<layers::BatchNorm2d>(in_channels));
  conv1_ = register_module("conv1", conv3x3(in_channels, out_channels, stride, gen));
  bn2_ = register_module("bn2", std::make_shared<layers::BatchNorm2d>(out_channels));
  dropout_ = register_module("dropout", std::make_shared<layers::Dropout>(dropout, gen));
  conv2_ = register_module("conv2", conv3x3(out_channels, out_channels, 1, gen));
  if (stride != 1 || in_channels != out_channels)
    shortcut_ = register_module("shortcut", conv1x1(in_channels, out_channels, stride, gen));
}

Tensor PreActBlock::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() == 4 && x.sizes()[1] == in_, "PreActBlock(", block_repr(in_, out_, stride_),
              "): expected input (N, ", in_, ", H, W), got ",
              x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  const Tensor a = relu(bn1_->forward(x));
  Tensor f = conv2_->forward(dropout_->forward(relu(bn2_->forward(conv1_->forward(a)))));
  return f + (shortcut_ ? shortcut_->forward(a) : x);
}

std::shared_ptr<layers::Module> PreActBlock::clone_structure() const {
  Generator scratch;  // initial values only: clone() overwrites them
  auto c = std::make_shared<PreActBlock>(in_, out_, stride_, dropout_->p(), scratch);
  c->dropout_->own_generator_forked_from(*dropout_);  // scratch dies here: the dropout must not keep it
  return c;
}

std::string PreActBlock::extra_repr() const {
  std::ostringstream os;
  os << block_repr(in_, out_, stride_) << ", dropout=" << dropout_->p();
  return os.str();
}

}  // namespace ember::models
