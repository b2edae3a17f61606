#include <ember/data/synthetic.h>

#include <vector>

#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/core/thread_pool.h>

namespace ember::data {

namespace {
// Distinct Philox counter ranges (high word) for the three kinds of draws.
constexpr uint64_t kProtoStream = 1, kLabelStream = 2, kNoiseStream = 3;

uint8_t byte_at(uint64_t seed, uint64_t stream, uint64_t i) {
  // 16 bytes per Philox block; byte i is lane i/4 % 4, byte i % 4 of the block at i / 16.
  Philox4 r = philox4x32(seed, i / 16, stream);
  return static_cast<uint8_t>(r.v[(i / 4) % 4] >> (8 * (i % 4)));
}
}  // namespace

Synthetic::Synthetic(int64_t n, const Shape& image_shape, int64_t classes, uint64_t seed) {
  EMBER_CHECK(n >= 0, "Synthetic: expected n >= 0, got ", n);
  EMBER_CHECK(image_shape.size() == 3 && image_shape[0] > 0 && image_shape[1] > 0 && image_shape[2] > 0,
              "Synthetic: expected a positive image shape (C, H, W), got ", shape_str(image_shape));
  EMBER_CHECK(classes > 0, "Synthetic: expected classes > 0, got ", classes);
  const int64_t per = numel_of(image_shape);
  std::vector<uint8_t> protos(static_cast<size_t>(classes * per));
  for (int64_t i = 0; i < classes * per; ++i) protos[static_cast<size_t>(i)] = byte_at(seed, kProtoStream, uint64_t(i));

  Tensor labels = empty({n}, {.dtype = DType::i64});
  int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    Philox4 r = philox4x32(seed, uint64_t(i), kLabelStream);
    uint64_t v = (uint64_t(r.v[0]) << 32) | r.v[1];
    l[i] = static_cast<int64_t>(v % uint64_t(classes));
  }
  Tensor images = empty({n, image_shape[0], image_shape[1], image_shape[2]}, {.dtype = DType::u8});
  uint8_t* px = images.data<uint8_t>();
  parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint8_t* proto = protos.data() + l[i] * per;
      uint8_t* out = px + i * per;
      // Same bytes as byte_at(seed, kNoiseStream, i * per + k), one Philox block per 16 bytes.
      uint64_t cached = ~uint64_t(0);
      Philox4 r{};
      for (int64_t k = 0; k < per; ++k) {
        uint64_t g = uint64_t(i * per + k);
        if (g / 16 != cached) {
          cached = g / 16;
          r = philox4x32(seed, cached, kNoiseStream);
        }
        uint8_t noise = static_cast<uint8_t>(r.v[(g / 4) % 4] >> (8 * (g % 4)));
        out[k] = static_cast<uint8_t>((int(proto[k]) + int(noise)) / 2);
      }
    }
  });
  init(images, labels, classes, "Synthetic");
}

}  // namespace ember::data
