#include <ember/data/transforms.h>

#include <cstring>
#include <mutex>
#include <sstream>

#include <ember/core/error.h>
#include <ember/core/pinned.h>
#include <ember/data/transfer.h>
#include <ember/kernels/elementwise.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/index.h>

namespace ember::data {

namespace {

void check_image(const Tensor& image, const char* who) {
  EMBER_CHECK(image.dim() == 3, who, ": expected an image of shape (C, H, W), got ", image.shape_str());
  EMBER_CHECK(image.dtype() == DType::f32 && image.device().is_cpu() && image.is_contiguous(), who,
              ": expected a contiguous f32 CPU image, got ", dtype_name(image.dtype()), " on ", image.device().str(),
              image.is_contiguous() ? "" : " (non-contiguous)");
}

void check_batch(const Tensor& batch, const std::vector<RandomStream>& rngs, const char* who) {
  EMBER_CHECK(batch.dim() == 4, who, ": expected a batch of shape (B, C, H, W), got ", batch.shape_str());
  EMBER_CHECK(batch.dtype() == DType::f32, who, ": expected an f32 batch, got ", dtype_name(batch.dtype()));
  EMBER_CHECK(static_cast<int64_t>(rngs.size()) == batch.size(0), who, ": ", rngs.size(),
              " random streams for a batch of ", batch.size(0));
}

std::string join(const std::vector<float>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// Host memory for values bound to `device`: pinned when that is a GPU.
Tensor staging(const Shape& sizes, DType dtype, Device device) {
  return device.is_cpu() ? empty(sizes, {.dtype = dtype}) : ember::detail::pinned_empty(sizes, dtype, device);
}

// A small host vector as a tensor on `device`, moved there without blocking the host.
template <typename T> Tensor vector_on(const std::vector<T>& v, const Shape& sizes, Device device) {
  Tensor t = staging(sizes, dtype_of<T>(), device);
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return detail::to_device_async(t, device);
}
Tensor index_on(const std::vector<int64_t>& v, Device device) { return vector_on(v, {int64_t(v.size())}, device); }

}  // namespace

// ---- Normalize ----

Normalize::Normalize(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)), std_(std::move(std)) {
  EMBER_CHECK(!mean_.empty() && !std_.empty(), "Normalize: mean and std must not be empty");
  for (float s : std_) EMBER_CHECK(s > 0.0f, "Normalize: expected std > 0, got ", join(std_));
}

std::vector<float> Normalize::per_channel(const std::vector<float>& v, int64_t c, const char* what) const {
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(c), v[0]);
  EMBER_CHECK(static_cast<int64_t>(v.size()) == c, "Normalize: ", v.size(), " ", what, " values for an image of ", c,
              " channels; expected ", c, " (or 1)");
  return v;
}

Tensor Normalize::apply(const Tensor& image, RandomStream&) const {
  check_image(image, "Normalize");
  const int64_t c = image.size(0), per = image.size(1) * image.size(2);
  std::vector<float> m = per_channel(mean_, c, "mean"), s = per_channel(std_, c, "std");
  Tensor out = empty(image.sizes(), {.dtype = DType::f32});
  const float* x = image.data<float>();
  float* y = out.data<float>();
  // (x - m) / s exactly as the batch path's two f32 kernels compute it (not x * (1/s)).
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t k = 0; k < per; ++k) y[ch * per + k] = (x[ch * per + k] - m[ch]) / s[ch];
  }
  return out;
}

Tensor Normalize::apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const {
  check_batch(batch, rngs, "Normalize");
  const int64_t c = batch.size(1);
  std::vector<float> m = per_channel(mean_, c, "mean"), s = per_channel(std_, c, "std");
  // (1, C, 1, 1) operands broadcast over the batch. Two tiny transfers per batch, asynchronous.
  Tensor mt = vector_on(m, {1, c, 1, 1}, batch.device()), st = vector_on(s, {1, c, 1, 1}, batch.device());
  Tensor centered = kernels::binary(kernels::BinaryOp::Sub, batch, mt);
  return kernels::binary(kernels::BinaryOp::Div, centered, st);
}

std::string Normalize::str() const { return "Normalize(mean=" + join(mean_) + ", std=" + join(std_) + ")"; }

// ---- RandomCrop ----

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  EMBER_CHECK(height > 0 && width > 0, "RandomCrop: expected a positive size, got ", height, "x", width);
  EMBER_CHECK(padding >= 0, "RandomCrop: expected padding >= 0, got ", padding);
}

void RandomCrop::check_input(const Shape& chw) const {
  int64_t hp = chw[1] + 2 * padding_, wp = chw[2] + 2 * padding_;
  EMBER_CHECK(hp >= height_ && wp >= width_, "RandomCrop: cannot take a ", height_, "x", width_,
              " window from an image ", shape_str(chw), " padded by ", padding_, " (", hp, "x", wp, ")");
}

Tensor RandomCrop::apply(const Tensor& image, RandomStream& rng) const {
  check_image(image, "RandomCrop");
  check_input(image.sizes());
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2), p = padding_;
  const int64_t dy = rng.randint(h + 2 * p - height_ + 1);
  const int64_t dx = rng.randint(w + 2 * p - width_ + 1);
  Tensor out = empty({c, height_, width_}, {.dtype = DType::f32});
  const float* x = image.data<float>();
  float* y = out.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t r = 0; r < height_; ++r) {
      const int64_t sr = r + dy - p;  // source row in the unpadded image
      float* row = y + (ch * height_ + r) * width_;
      for (int64_t q = 0; q < width_; ++q) {
        const int64_t sc = q + dx - p;
        row[q] = (sr >= 0 && sr < h && sc >= 0 && sc < w) ? x[(ch * h + sr) * w + sc] : 0.0f;
      }
    }
  }
  return out;
}

// On a batch the crop is two gathers with index_select: rows first, then (after a transpose)
// columns, so the per-example offsets travel as small index vectors (B*C*H' and B*W' entries)
// instead of one index per output pixel.
Tensor RandomCrop::apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const {
  check_batch(batch, rngs, "RandomCrop");
  const int64_t b = batch.size(0), c = batch.size(1), h = batch.size(2), w = batch.size(3), p = padding_;
  check_input({c, h, w});
  const int64_t hp = h + 2 * p, wp = w + 2 * p, oh = height_, ow = width_;
  std::vector<int64_t> dy(static_cast<size_t>(b)), dx(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    dy[i] = rngs[i].randint(hp - oh + 1);
    dx[i] = rngs[i].randint(wp - ow + 1);
  }
  if (b == 0) return empty({0, c, oh, ow}, {.dtype = DType::f32, .device = batch.device()});
  Device dev = batch.device();
  // padded: (B, C, Hp, Wp), zeros around the batch.
  Tensor padded = batch.is_contiguous() ? batch : batch.contiguous();
  if (p > 0) {
    padded = zeros({b, c, hp, wp}, {.dtype = DType::f32, .device = dev});
    padded.slice(2, p, p + h).slice(3, p, p + w).copy_(batch);
  }
  std::vector<int64_t> rows(static_cast<size_t>(b * c * oh));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t r = 0; r < oh; ++r) rows[static_cast<size_t>((i * c + ch) * oh + r)] = (i * c + ch) * hp + r + dy[i];
  // (B*C*Hp, Wp) -> (B*C*H', Wp)
  Tensor picked = kernels::index_select(padded.view({b * c * hp, wp}), 0, index_on(rows, dev));
  // (B, C*H', Wp) -> (B, Wp, C*H') -> rows of (B*Wp, C*H')
  Tensor cols_major = picked.view({b, c * oh, wp}).permute({0, 2, 1}).contiguous().view({b * wp, c * oh});
  std::vector<int64_t> cols(static_cast<size_t>(b * ow));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t q = 0; q < ow; ++q) cols[static_cast<size_t>(i * ow + q)] = i * wp + q + dx[i];
  // (B*W', C*H') -> (B, W', C, H') -> (B, C, H', W')
  Tensor out = kernels::index_select(cols_major, 0, index_on(cols, dev));
  return out.view({b, ow, c, oh}).permute({0, 2, 3, 1}).contiguous();
}

std::string RandomCrop::str() const {
  std::ostringstream os;
  os << "RandomCrop(" << height_ << "x" << width_ << ", padding=" << padding_ << ")";
  return os.str();
}

// ---- RandomHorizontalFlip ----

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: expected a probability in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::apply(const Tensor& image, RandomStream& rng) const {
  check_image(image, "RandomHorizontalFlip");
  if (!(rng.uniform() < p_)) return image;
  const int64_t rows = image.size(0) * image.size(1), w = image.size(2);
  Tensor out = empty(image.sizes(), {.dtype = DType::f32});
  const float* x = image.data<float>();
  float* y = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < w; ++q) y[r * w + q] = x[r * w + (w - 1 - q)];
  return out;
}

Tensor RandomHorizontalFlip::apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const {
  check_batch(batch, rngs, "RandomHorizontalFlip");
  const int64_t b = batch.size(0), w = batch.size(3);
  std::vector<int64_t> flip(static_cast<size_t>(b));
  int64_t count = 0;
  for (int64_t i = 0; i < b; ++i) count += (flip[i] = rngs[i].uniform() < p_ ? 1 : 0);
  if (count == 0) return batch;
  Device dev = batch.device();
  std::vector<int64_t> rev(static_cast<size_t>(w));
  for (int64_t q = 0; q < w; ++q) rev[static_cast<size_t>(q)] = w - 1 - q;
  Tensor flipped = kernels::index_select(batch, 3, index_on(rev, dev));
  if (count == b) return flipped;
  // cond (B, 1, 1, 1) broadcasts over each example.
  Tensor mask = kernels::binary(kernels::BinaryOp::Ne, index_on(flip, dev), 0.0).view({b, 1, 1, 1});
  return kernels::where(mask, flipped, batch);
}

std::string RandomHorizontalFlip::str() const {
  std::ostringstream os;
  os << "RandomHorizontalFlip(p=" << p_ << ")";
  return os.str();
}

// ---- Compose ----

Compose::Compose(std::vector<std::shared_ptr<const Transform>> ts) : ts_(std::move(ts)) {
  for (const auto& t : ts_) EMBER_CHECK(t != nullptr, "Compose: null transform");
}

Tensor Compose::apply(const Tensor& image, RandomStream& rng) const {
  Tensor x = image;
  for (const auto& t : ts_) x = t->apply(x, rng);
  return x;
}

Tensor Compose::apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const {
  Tensor x = batch;
  for (const auto& t : ts_) x = t->apply_batch(x, rngs);
  return x;
}

std::string Compose::str() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < ts_.size(); ++i) s += (i ? ", " : "") + ts_[i]->str();
  return s + ")";
}

}  // namespace ember::data
