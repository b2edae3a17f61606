// CIFAR-10 / CIFAR-100 binary readers on files generated here: record layout, file order,
// label selection, the archive's subfolder, and errors naming file, record offset and values.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include <ember/core/error.h>
#include <ember/data/cifar.h>
#include "data_files.h"
#include "support/error_of.h"

using namespace ember;
using namespace ember::testing;
using Catch::Contains;

namespace {

constexpr size_t kPixels = 3072;

struct Records {
  Bytes file;  // the bytes written
  std::vector<Bytes> labels;  // label bytes per record
  std::vector<Bytes> pixels;  // 3072 bytes per record
};

Records make_records(int n, int label_bytes, uint32_t seed) {
  Records r;
  std::mt19937 gen(seed);
  for (int k = 0; k < n; ++k) {
    Bytes l;
    if (label_bytes == 1) {
      l.push_back(uint8_t(gen() % 10));
    } else {
      l.push_back(uint8_t(gen() % 20));
      l.push_back(uint8_t(gen() % 100));
    }
    Bytes p = random_bytes(kPixels, seed * 1000 + uint32_t(k));
    r.file.insert(r.file.end(), l.begin(), l.end());
    r.file.insert(r.file.end(), p.begin(), p.end());
    r.labels.push_back(l);
    r.pixels.push_back(p);
  }
  return r;
}

void check_record(const data::TensorDataset& ds, int64_t i, const Bytes& pixels, int64_t label) {
  CHECK(ds.labels().data<int64_t>()[i] == label);
  // Record bytes are R plane, G plane, B plane, each 32x32 row-major: exactly (3, 32, 32).
  CHECK(std::memcmp(ds.images().data<uint8_t>() + i * int64_t(kPixels), pixels.data(), kPixels) == 0);
  data::Example ex = ds.get(i);
  CHECK(ex.label == label);
  // pixel (c=2, y=31, x=0) and (c=1, y=5, x=17) through get()'s f32 view
  CHECK(ex.image.data<float>()[2 * 1024 + 31 * 32] == Approx(pixels[2 * 1024 + 31 * 32] / 255.0).epsilon(1e-6));
  CHECK(ex.image.data<float>()[1024 + 5 * 32 + 17] == Approx(pixels[1024 + 5 * 32 + 17] / 255.0).epsilon(1e-6));
}

}  // namespace

TEST_CASE("Cifar10: five training batches in order, test batch, subfolder, gzip", "[cpu][data]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("cifar-10-batches-bin"));
  const int counts[5] = {3, 1, 4, 2, 5};
  std::vector<Records> batches;
  for (int b = 0; b < 5; ++b) {
    batches.push_back(make_records(counts[b], 1, 10 + uint32_t(b)));
    std::string name = dir.file("cifar-10-batches-bin/data_batch_" + std::to_string(b + 1) + ".bin");
    (b == 2 ? write_gz : write_file)(b == 2 ? name + ".gz" : name, batches.back().file);
  }
  Records test = make_records(6, 1, 99);
  write_file(dir.file("cifar-10-batches-bin/test_batch.bin"), test.file);

  data::Cifar10 train(dir.str(), data::Split::Train);  // finds the archive's subfolder
  REQUIRE(train.size() == 15);
  CHECK(train.image_shape() == Shape{3, 32, 32});
  CHECK(train.num_classes() == 10);
  int64_t i = 0;
  for (int b = 0; b < 5; ++b)
    for (int k = 0; k < counts[b]; ++k, ++i)
      check_record(train, i, batches[size_t(b)].pixels[size_t(k)], batches[size_t(b)].labels[size_t(k)][0]);

  data::Cifar10 te(dir.file("cifar-10-batches-bin"), data::Split::Test);  // or the folder itself
  REQUIRE(te.size() == 6);
  for (int k = 0; k < 6; ++k) check_record(te, k, test.pixels[size_t(k)], test.labels[size_t(k)][0]);
}

TEST_CASE("Cifar100: fine and coarse labels", "[cpu][data]") {
  TempDir dir;
  Records train = make_records(7, 2, 3), test = make_records(2, 2, 4);
  write_file(dir.file("train.bin"), train.file);
  write_file(dir.file("test.bin"), test.file);
  data::Cifar100 fine(dir.str(), data::Split::Train);
  data::Cifar100 coarse(dir.str(), data::Split::Train, data::Cifar100::Label::Coarse);
  REQUIRE(fine.size() == 7);
  CHECK(fine.num_classes() == 100);
  CHECK(coarse.num_classes() == 20);
  for (int k = 0; k < 7; ++k) {
    check_record(fine, k, train.pixels[size_t(k)], train.labels[size_t(k)][1]);
    check_record(coarse, k, train.pixels[size_t(k)], train.labels[size_t(k)][0]);
  }
  data::Cifar100 te(dir.str(), data::Split::Test);
  REQUIRE(te.size() == 2);
  check_record(te, 1, test.pixels[1], test.labels[1][1]);
}

TEST_CASE("CIFAR errors: truncated record, bad labels, missing files", "[cpu][data]") {
  TempDir dir;
  // Test batch with a partial third record: 2 whole records, then 100 bytes.
  Records r = make_records(3, 1, 5);
  Bytes cut(r.file.begin(), r.file.begin() + 2 * 3073 + 100);
  write_file(dir.file("test_batch.bin"), cut);
  CHECK_THAT(error_of([&] { data::Cifar10(dir.str(), data::Split::Test); }),
             Contains("test_batch.bin") && Contains("truncated") && Contains("record 2 starts at byte offset 6146") &&
                 Contains("expects 3073 bytes") && Contains("found 100"));
  // Label 10 in record 1 of a CIFAR-10 file.
  Bytes bad = r.file;
  bad[3073] = 10;
  write_file(dir.file("test_batch.bin"), bad);
  CHECK_THAT(error_of([&] { data::Cifar10(dir.str(), data::Split::Test); }),
             Contains("test_batch.bin") && Contains("record 1, byte offset 3073") && Contains("label in 0..9") &&
                 Contains("found 10"));
  // Training needs all five batches: the first missing one is named.
  for (int b = 1; b <= 2; ++b) write_file(dir.file("data_batch_" + std::to_string(b) + ".bin"), r.file);
  CHECK_THAT(error_of([&] { data::Cifar10(dir.str(), data::Split::Train); }),
             Contains("data_batch_3.bin") && Contains("cannot find"));
  // CIFAR-100: coarse label 20 (record 0), then fine label 100 (record 2).
  Records c = make_records(3, 2, 6);
  Bytes b1 = c.file;
  b1[0] = 20;
  write_file(dir.file("train.bin"), b1);
  CHECK_THAT(error_of([&] { data::Cifar100(dir.str(), data::Split::Train); }),
             Contains("train.bin") && Contains("record 0, byte offset 0") && Contains("coarse label in 0..19") &&
                 Contains("found 20"));
  Bytes b2 = c.file;
  b2[2 * 3074 + 1] = 100;
  write_file(dir.file("train.bin"), b2);
  CHECK_THAT(error_of([&] { data::Cifar100(dir.str(), data::Split::Train, data::Cifar100::Label::Coarse); }),
             Contains("record 2, byte offset 6149") && Contains("fine label in 0..99") && Contains("found 100"));
  // A CIFAR-100 file that is a CIFAR-10 file: 3 records of 3073 bytes is not a whole number of 3074.
  write_file(dir.file("test.bin"), r.file);
  CHECK_THAT(error_of([&] { data::Cifar100(dir.str(), data::Split::Test); }),
             Contains("test.bin") && Contains("not a multiple of 3074"));
  write_file(dir.file("test.bin"), {});
  CHECK_THAT(error_of([&] { data::Cifar100(dir.str(), data::Split::Test); }),
             Contains("test.bin") && Contains("empty"));
}
