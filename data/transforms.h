#pragma once
// Image transforms applied by DataLoader, per example on the CPU (worker threads), or per batch
// on the batch's device (resident mode). Both paths give the same numbers: example b of a batch
// draws from the same RandomStream as it would alone, in the same order.
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/data/random_stream.h>

namespace ember::data {

class Transform {
 public:
  virtual ~Transform() = default;
  /// image: (C, H, W) f32, contiguous, on the CPU; never modified. Returns the transformed image
  /// (C, H', W'), contiguous f32 on the CPU (possibly `image` itself when nothing changes).
  virtual Tensor apply(const Tensor& image, RandomStream& rng) const = 0;
  /// batch: (B, C, H, W) f32 contiguous on any device; rngs[b] belongs to example b. Returns
  /// (B, C, H', W') on the same device, equal to stacking apply() of each example.
  virtual Tensor apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const = 0;
  /// "Normalize(mean=[0.5], std=[0.25])"
  virtual std::string str() const = 0;
};

/// (x - mean[c]) / std[c] per channel. A single value applies to every channel.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  Tensor apply(const Tensor& image, RandomStream& rng) const override;
  Tensor apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const override;
  std::string str() const override;
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& std() const { return std_; }

 private:
  std::vector<float> per_channel(const std::vector<float>& v, int64_t c, const char* what) const;
  std::vector<float> mean_, std_;
};

/// Pads each side by `padding` zeros, then takes a random size x size window (uniform offsets,
/// drawn as randint(rows) then randint(cols)).
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  Tensor apply(const Tensor& image, RandomStream& rng) const override;
  Tensor apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const override;
  std::string str() const override;

 private:
  void check_input(const Shape& chw) const;
  int64_t height_, width_, padding_;
};

/// Mirrors the image left-right with probability p (one uniform draw per example, always made).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(const Tensor& image, RandomStream& rng) const override;
  Tensor apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const override;
  std::string str() const override;

 private:
  double p_;
};

/// Applies its transforms in order. An empty Compose is the identity. Copies share the
/// transforms. Build one from transform values:
///   data::Compose(data::RandomCrop(32, 4), data::RandomHorizontalFlip(), data::Normalize({...}, {...}))
class Compose : public Transform {
 public:
  Compose() = default;
  explicit Compose(std::vector<std::shared_ptr<const Transform>> ts);
  template <typename... Ts>
  requires(sizeof...(Ts) > 0 && (std::derived_from<std::remove_cvref_t<Ts>, Transform> && ...) &&
           !(sizeof...(Ts) == 1 && (std::same_as<std::remove_cvref_t<Ts>, Compose> && ...)))
      Compose(Ts&&... ts) {  // NOLINT: implicit, so `.transform = data::Normalize(...)` works
    (ts_.push_back(std::make_shared<const std::remove_cvref_t<Ts>>(std::forward<Ts>(ts))), ...);
  }

  Tensor apply(const Tensor& image, RandomStream& rng) const override;
  Tensor apply_batch(const Tensor& batch, std::vector<RandomStream>& rngs) const override;
  std::string str() const override;
  bool empty() const { return ts_.empty(); }
  const std::vector<std::shared_ptr<const Transform>>& transforms() const { return ts_; }

 private:
  std::vector<std::shared_ptr<const Transform>> ts_;
};

}  // namespace ember::data
