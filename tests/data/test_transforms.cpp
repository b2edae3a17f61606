// Transforms: per-example results against references computed here, the batch path (used by the
// resident loader) against the per-example path, and the random streams' reproducibility.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>

#include <ember/core/error.h>
#include <ember/data/random_stream.h>
#include <ember/data/transforms.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;
using Catch::Contains;

namespace {

Tensor random_image(const Shape& s, uint64_t seed) { return random_tensor(s, DType::f32, seed, 0.0, 1.0); }

// Element (c, y, x) of a contiguous (C, H, W) f32 tensor.
float at(const Tensor& t, int64_t c, int64_t y, int64_t x) {
  return t.data<float>()[(c * t.size(1) + y) * t.size(2) + x];
}

}  // namespace

TEST_CASE("RandomStream: a pure function of (seed, example, epoch)", "[cpu][data]") {
  data::RandomStream a(7, 3, 1), b(7, 3, 1), c(7, 3, 2), d(7, 4, 1), e(8, 3, 1);
  std::vector<uint32_t> va, vb, vc, vd, ve;
  for (int k = 0; k < 11; ++k) {  // crosses Philox block boundaries
    va.push_back(a.next_u32()), vb.push_back(b.next_u32()), vc.push_back(c.next_u32());
    vd.push_back(d.next_u32()), ve.push_back(e.next_u32());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  CHECK(va != vd);
  CHECK(va != ve);
  // Lane layout: draw k is lane k % 4 of the block at counter (example, epoch << 32 | k / 4).
  CHECK(va[5] == philox4x32(7, 3, (uint64_t(1) << 32) | 1).v[1]);
  // randint covers its range uniformly: 6 values, 6000 draws, each count within 5 sigma of 1000.
  data::RandomStream r(1, 2, 3);
  std::vector<int> count(6, 0);
  for (int k = 0; k < 6000; ++k) ++count[size_t(r.randint(6))];
  for (int c6 : count) CHECK(std::abs(c6 - 1000) < 5 * std::sqrt(6000 * (1.0 / 6) * (5.0 / 6)));
}

TEST_CASE("Normalize: per channel against a float64 reference", "[cpu][data]") {
  Tensor img = random_image({3, 5, 7}, 1);
  data::Normalize norm({0.49f, 0.48f, 0.45f}, {0.25f, 0.2f, 0.26f});
  data::RandomStream rng;
  Tensor out = norm.apply(img, rng);
  REQUIRE(out.sizes() == img.sizes());
  std::vector<double> x = to_f64(img), y = to_f64(out);
  const double m[3] = {0.49f, 0.48f, 0.45f}, s[3] = {0.25f, 0.2f, 0.26f};
  // y = fl(fl(x - m) / s) in f32 from f32 x, m, s: the difference rounds by u32 |x - m| (u32 |y| s)
  // and the quotient by u32 |y|; the reference's two double roundings add 2 u64 |y|.
  const double rel = kSecondOrder * (2 * unit_roundoff(DType::f32) + 2 * unit_roundoff(DType::f64));
  for (size_t k = 0; k < x.size(); ++k) {
    size_t c = k / 35;
    double ref = (x[k] - m[c]) / s[c];
    CHECK(y[k] == Approx(ref).epsilon(rel));
  }
  // The input is not modified.
  CHECK(to_f64(img) == x);
  // One value for every channel.
  Tensor one = data::Normalize({0.5f}, {0.5f}).apply(img, rng);
  CHECK(to_f64(one)[40] == Approx((x[40] - 0.5) / 0.5).epsilon(rel));
  CHECK_THROWS_WITH(data::Normalize({0.1f, 0.2f}, {1.f, 1.f}).apply(img, rng),
                    Contains("2 mean values") && Contains("3 channels"));
  CHECK_THROWS_WITH(data::Normalize({0.1f}, {0.f}), Contains("std > 0"));
}

TEST_CASE("RandomCrop: window of the zero-padded image at the drawn offsets", "[cpu][data]") {
  const int64_t c = 2, h = 6, w = 5, p = 2, oh = 4, ow = 3;
  Tensor img = random_image({c, h, w}, 2);
  data::RandomCrop crop(oh, ow, p);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t ex = 0; ex < 400; ++ex) {
    data::RandomStream rng(5, ex, 0), copy = rng;
    Tensor out = crop.apply(img, rng);
    REQUIRE(out.sizes() == Shape{c, oh, ow});
    // Offsets drawn as documented: randint(rows) then randint(cols) of the padded image.
    int64_t dy = copy.randint(h + 2 * p - oh + 1), dx = copy.randint(w + 2 * p - ow + 1);
    seen.insert({dy, dx});
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          int64_t sy = y + dy - p, sx = x + dx - p;
          float ref = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? at(img, ch, sy, sx) : 0.0f;
          REQUIRE(at(out, ch, y, x) == ref);
        }
  }
  // Every offset in (5 rows) x (5 cols) occurred over 400 draws.
  CHECK(seen.size() == size_t((h + 2 * p - oh + 1) * (w + 2 * p - ow + 1)));
  data::RandomStream rng;
  CHECK_THROWS_WITH(data::RandomCrop(9, 0).apply(img, rng), Contains("9x9") && Contains("[2, 6, 5]"));
}

TEST_CASE("RandomHorizontalFlip: mirror with probability p", "[cpu][data]") {
  Tensor img = random_image({3, 4, 5}, 3);
  data::RandomStream rng(1, 1, 1);
  Tensor always = data::RandomHorizontalFlip(1.0).apply(img, rng);
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 5; ++x) REQUIRE(at(always, ch, y, x) == at(img, ch, y, 4 - x));
  CHECK(to_f64(data::RandomHorizontalFlip(0.0).apply(img, rng)) == to_f64(img));
  // p = 0.3 over 5000 examples: the flip rate is within 5 sigma of 0.3.
  data::RandomHorizontalFlip flip(0.3);
  int flips = 0;
  const int n = 5000;
  for (int ex = 0; ex < n; ++ex) {
    data::RandomStream r(9, uint64_t(ex), 0);
    Tensor out = flip.apply(img, r);
    flips += at(out, 0, 0, 0) == at(img, 0, 0, 4);
  }
  CHECK(std::abs(flips / double(n) - 0.3) < 5 * std::sqrt(0.3 * 0.7 / n));
}

TEST_CASE("Transforms: the batch path equals the per-example path", "[cpu][data]") {
  const int64_t b = 9, c = 3, h = 7, w = 6;
  data::Compose all(data::RandomCrop(5, 4, 2), data::RandomHorizontalFlip(0.5),
                    data::Normalize({0.4f, 0.5f, 0.6f}, {0.2f, 0.3f, 0.25f}));
  std::vector<std::pair<std::string, data::Compose>> cases = {
      {"crop+flip+normalize", all},
      {"crop only", data::Compose(data::RandomCrop(7, 6, 1))},
      {"flip only", data::Compose(data::RandomHorizontalFlip(0.5))},
      {"identity", data::Compose()}};
  for (bool strided : {false, true}) {
    // strided: every other example of a batch twice as large (a non-contiguous batch view).
    Tensor big = random_tensor({strided ? 2 * b : b, c, h, w}, DType::f32, 4, 0.0, 1.0);
    Tensor batch = strided ? big.slice(0, 0, 2 * b, 2) : big;
    for (auto& [name, t] : cases) {
      INFO(name << (strided ? ", strided batch" : ""));
      std::vector<data::RandomStream> rngs;
      for (int64_t i = 0; i < b; ++i) rngs.emplace_back(3, uint64_t(100 + i), 2);
      std::vector<data::RandomStream> rngs_single = rngs;
      Tensor out = t.apply_batch(batch, rngs);
      REQUIRE(out.dim() == 4);
      REQUIRE(out.size(0) == b);
      std::vector<double> got = to_f64(out);
      const int64_t per = out.numel() / b;
      for (int64_t i = 0; i < b; ++i) {
        Tensor one = batch.slice(0, i, i + 1).squeeze(0).contiguous();
        Tensor ref = t.apply(one, rngs_single[size_t(i)]);
        REQUIRE(ref.numel() == per);
        std::vector<double> r = to_f64(ref);
        for (int64_t k = 0; k < per; ++k)
          REQUIRE(got[size_t(i * per + k)] == Approx(r[size_t(k)]).epsilon(1e-6).margin(1e-7));
      }
      // Both paths consumed the same draws.
      for (int64_t i = 0; i < b; ++i) CHECK(rngs[size_t(i)].next_u32() == rngs_single[size_t(i)].next_u32());
    }
  }
}

TEST_CASE("Compose: order and description", "[cpu][data]") {
  data::Compose t(data::RandomHorizontalFlip(1.0), data::Normalize({0.5f}, {0.5f}));
  CHECK(t.str() == "Compose(RandomHorizontalFlip(p=1), Normalize(mean=[0.5], std=[0.5]))");
  Tensor img = random_image({1, 2, 3}, 5);
  data::RandomStream rng;
  Tensor out = t.apply(img, rng);
  // flip first, then normalize: out[0,0,0] = (img[0,0,2] - 0.5) / 0.5
  CHECK(at(out, 0, 0, 0) == Approx((at(img, 0, 0, 2) - 0.5) / 0.5).epsilon(1e-6));
  data::Compose single = data::Normalize({0.5f}, {0.25f});  // implicit from one transform
  CHECK(single.transforms().size() == 1);
  CHECK(data::Compose().empty());
}
