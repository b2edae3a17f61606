// IDX readers and Mnist on files generated here (plain and gzip), on malformed, truncated and
// mismatched files (the messages must name the file, the byte offset and expected vs found), and
// on the real Fashion-MNIST when it is installed.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include <ember/core/error.h>
#include <ember/data/mnist.h>
#include "data_files.h"
#include "support/error_of.h"
#include "support/skip.h"

using namespace ember;
using namespace ember::testing;
using Catch::Contains;

namespace {

// Writes a train or test split of n images (rows x cols) and returns the pixels and labels.
struct Split {
  Bytes pixels, labels;
};
Split write_split(const TempDir& dir, const char* prefix, uint32_t n, uint32_t rows, uint32_t cols, bool gz,
                  uint32_t seed) {
  Split s{random_bytes(size_t(n) * rows * cols, seed), random_bytes(n, seed + 1, 10)};
  auto write = gz ? write_gz : write_file;
  std::string sfx = gz ? ".gz" : "";
  write(dir.file(std::string(prefix) + "-images-idx3-ubyte" + sfx), idx_images(n, rows, cols, s.pixels));
  write(dir.file(std::string(prefix) + "-labels-idx1-ubyte" + sfx), idx_labels(n, s.labels));
  return s;
}

void check_images(const Tensor& t, uint32_t n, uint32_t rows, uint32_t cols, const Bytes& pixels) {
  REQUIRE(t.dtype() == DType::u8);
  REQUIRE(t.sizes() == Shape{int64_t(n), 1, int64_t(rows), int64_t(cols)});
  REQUIRE(t.is_contiguous());
  CHECK(std::memcmp(t.data_ptr(), pixels.data(), pixels.size()) == 0);
}

}  // namespace

TEST_CASE("IDX readers: generated plain and gzip files, odd dims", "[cpu][data]") {
  for (bool gz : {false, true}) {
    TempDir dir;
    const uint32_t n = 7, rows = 5, cols = 3;  // not 28x28: any header dims are accepted
    Split s = write_split(dir, "train", n, rows, cols, gz, 11);
    std::string sfx = gz ? ".gz" : "";
    Tensor images = data::read_idx_images(dir.file("train-images-idx3-ubyte" + sfx));
    check_images(images, n, rows, cols, s.pixels);
    Tensor labels = data::read_idx_labels(dir.file("train-labels-idx1-ubyte" + sfx));
    REQUIRE(labels.dtype() == DType::i64);
    REQUIRE(labels.sizes() == Shape{int64_t(n)});
    for (uint32_t i = 0; i < n; ++i) CHECK(labels.data<int64_t>()[i] == s.labels[i]);
  }
}

TEST_CASE("IDX reader: gzip data larger than one stored block and than zlib's buffer", "[cpu][data]") {
  TempDir dir;
  const uint32_t n = 3001, rows = 28, cols = 28;  // 2.4 MB: many 64 KiB blocks
  Split s = write_split(dir, "t10k", n, rows, cols, true, 5);
  check_images(data::read_idx_images(dir.file("t10k-images-idx3-ubyte.gz")), n, rows, cols, s.pixels);
}

TEST_CASE("Mnist: train and test splits, get() scaled to 0..1, plain beside gzip", "[cpu][data]") {
  TempDir dir;
  Split train = write_split(dir, "train", 9, 4, 6, false, 1);
  Split test = write_split(dir, "t10k", 4, 4, 6, true, 2);
  data::Mnist tr(dir.str(), data::Split::Train);
  data::Mnist te(dir.str(), data::Split::Test);
  REQUIRE(tr.size() == 9);
  REQUIRE(te.size() == 4);
  CHECK(tr.image_shape() == Shape{1, 4, 6});
  int64_t max_label = 0;
  for (uint8_t l : train.labels) max_label = std::max<int64_t>(max_label, l);
  CHECK(tr.num_classes() == max_label + 1);
  for (int64_t i : {0, 5, 8}) {
    data::Example ex = tr.get(i);
    REQUIRE(ex.image.sizes() == Shape{1, 4, 6});
    REQUIRE(ex.image.dtype() == DType::f32);
    CHECK(ex.label == train.labels[size_t(i)]);
    for (int64_t k = 0; k < 24; ++k) {
      double expected = train.pixels[size_t(i * 24 + k)] / 255.0;
      CHECK(ex.image.data<float>()[k] == Approx(expected).epsilon(1e-6).margin(1e-7));
    }
  }
  CHECK(te.get(3).label == test.labels[3]);
  CHECK_THROWS_WITH(tr.get(9), Contains("out of range") && Contains("9"));
  // storage(): the u8 tensors themselves
  data::DatasetStorage st = tr.storage();
  check_images(st.images, 9, 4, 6, train.pixels);
  CHECK(st.labels.size(0) == 9);
}

TEST_CASE("IDX reader errors: magic, dims, truncation, trailing bytes", "[cpu][data]") {
  TempDir dir;
  const std::string img = dir.file("img"), lbl = dir.file("lbl");

  // A label file read as images: the magic number names what was found.
  write_file(img, idx_labels(3, {1, 2, 3}));
  std::string msg = error_of([&] { data::read_idx_images(img); });
  CHECK_THAT(msg, Contains(img) && Contains("byte offset 0") && Contains("2051") && Contains("found 2049") &&
                      Contains("label file"));
  // Not an IDX file at all.
  write_file(img, Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', 0, 0, 0, 0});
  CHECK_THAT(error_of([&] { data::read_idx_images(img); }), Contains(img) && Contains("not an IDX file"));
  // Images read as labels.
  write_file(lbl, idx_images(1, 1, 1, {9}));
  CHECK_THAT(error_of([&] { data::read_idx_labels(lbl); }),
             Contains(lbl) && Contains("2049") && Contains("found 2051"));

  // A zero dimension, at its offset.
  write_file(img, idx_images(2, 0, 3, {}));
  CHECK_THAT(error_of([&] { data::read_idx_images(img); }),
             Contains(img) && Contains("byte offset 8") && Contains("positive row count"));

  // Header cut short (10 bytes): the message says which field and where.
  Bytes full = idx_images(2, 2, 2, random_bytes(8, 3));
  write_file(img, Bytes(full.begin(), full.begin() + 10));
  CHECK_THAT(error_of([&] { data::read_idx_images(img); }), Contains(img) && Contains("truncated") &&
                                                                Contains("row count") && Contains("byte offset 8") &&
                                                                Contains("found 2"));

  // Pixel data cut short, plain file: expected vs actual size.
  Bytes px = random_bytes(5 * 4 * 3, 4);
  Bytes trunc = idx_images(5, 4, 3, px);
  trunc.resize(trunc.size() - 7);
  write_file(img, trunc);
  CHECK_THAT(error_of([&] { data::read_idx_images(img); }), Contains(img) && Contains("truncated") &&
                                                                Contains("5 images of 4x3") && Contains("76 bytes") &&
                                                                Contains("found 69 bytes"));
  // Same cut in a gzip file: found at the decompressed offset where the data ends.
  write_gz(img + ".gz", trunc);
  CHECK_THAT(error_of([&] { data::read_idx_images(img + ".gz"); }),
             Contains(img + ".gz") && Contains("truncated") && Contains("expected 60 bytes") &&
                 Contains("from byte offset 16") && Contains("found 53") && Contains("decompressed"));
  // Labels cut short.
  Bytes lt = idx_labels(6, {1, 2, 3, 4, 5, 6});
  lt.resize(lt.size() - 2);
  write_file(lbl, lt);
  CHECK_THAT(error_of([&] { data::read_idx_labels(lbl); }),
             Contains(lbl) && Contains("truncated") && Contains("6 labels"));

  // Extra bytes after the promised data.
  Bytes extra = idx_labels(2, {1, 2});
  extra.push_back(7);
  extra.push_back(8);
  write_file(lbl, extra);
  CHECK_THAT(error_of([&] { data::read_idx_labels(lbl); }),
             Contains(lbl) && Contains("end at byte offset 10") && Contains("found 2 more bytes"));

  // A corrupt gzip stream: the compressed file itself cut in the middle of a stored block.
  Bytes gz = gzip_stored(idx_images(5, 4, 3, px));
  gz.resize(gz.size() / 2);
  write_file(img + ".gz", gz);
  CHECK_THAT(error_of([&] { data::read_idx_images(img + ".gz"); }), Contains(img + ".gz") && Contains("truncated"));

  // A header promising absurd sizes is refused before allocating.
  write_file(img, idx_images(0xffffffffu, 0xffffffffu, 2, {}));
  CHECK_THAT(error_of([&] { data::read_idx_images(img); }), Contains(img) && Contains("limit"));
  // Missing file.
  CHECK_THAT(error_of([&] { data::read_idx_images(dir.file("nope")); }), Contains("nope") && Contains("no such file"));
}

TEST_CASE("Mnist errors: mismatched counts, missing files", "[cpu][data]") {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), idx_images(4, 2, 2, random_bytes(16, 1)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels(3, {1, 2, 3}));
  std::string msg = error_of([&] { data::Mnist(dir.str(), data::Split::Train); });
  CHECK_THAT(msg, Contains("train-images-idx3-ubyte") && Contains("holds 4 images") &&
                      Contains("train-labels-idx1-ubyte.gz") && Contains("holds 3 labels"));
  msg = error_of([&] { data::Mnist(dir.str(), data::Split::Test); });
  CHECK_THAT(msg,
             Contains("t10k-images-idx3-ubyte") && Contains("t10k-images-idx3-ubyte.gz") && Contains("cannot find"));
}

TEST_CASE("Mnist on the real Fashion-MNIST", "[cpu][data][data-real][slow]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dir))
    EMBER_SKIP(dir << " does not exist (Debian package dataset-fashion-mnist); nothing checked");
  data::Mnist train(dir, data::Split::Train), test(dir, data::Split::Test);
  REQUIRE(train.size() == 60000);
  REQUIRE(test.size() == 10000);
  CHECK(train.image_shape() == Shape{1, 28, 28});
  CHECK(test.image_shape() == Shape{1, 28, 28});
  CHECK(train.num_classes() == 10);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  for (const auto* ds : {&train, &test}) {
    std::vector<int64_t> count(10, 0);
    const int64_t* l = ds->labels().data<int64_t>();
    for (int64_t i = 0; i < ds->size(); ++i) {
      REQUIRE(l[i] >= 0);
      REQUIRE(l[i] <= 9);
      ++count[size_t(l[i])];
    }
    for (int64_t c : count) CHECK(c == ds->size() / 10);
  }
  // Real pixels: both black background and white foreground occur, and images differ.
  const uint8_t* px = train.images().data<uint8_t>();
  int64_t zeros = 0, bright = 0;
  for (int64_t k = 0; k < 784 * 100; ++k) zeros += px[k] == 0, bright += px[k] > 200;
  CHECK(zeros > 784 * 20);
  CHECK(bright > 784);
  CHECK(std::memcmp(px, px + 784, 784) != 0);
}
