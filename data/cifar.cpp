// CIFAR binary records are fixed-size, so a file is read whole and checked to hold a whole number
// of records before any is decoded; the pixel bytes are already in (C, H, W) order.
#include <ember/data/cifar.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include <ember/core/error.h>
#include <ember/data/io.h>

namespace ember::data {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

// `dir` itself when it holds `probe`, else the archive's subfolder when that does.
std::string resolve_dir(const std::string& dir, const std::string& sub, const std::string& probe) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / probe, ec) || fs::is_regular_file(fs::path(dir) / (probe + ".gz"), ec)) {
    return dir;
  }
  fs::path nested = fs::path(dir) / sub;
  if (fs::is_directory(nested, ec)) return nested.string();
  return dir;
}

struct LabelField {
  int byte;  // position of the label within the record's label bytes
  int64_t classes;  // valid labels are [0, classes)
  const char* name;
};

// Appends the records of one file: pixels to `pixels`, the selected label to `labels`.
void read_records(const std::string& path, int label_bytes, const LabelField& field, std::vector<uint8_t>& pixels,
                  std::vector<int64_t>& labels) {
  detail::ByteReader r(path);
  std::vector<uint8_t> bytes = r.read_rest();
  const int64_t rec = label_bytes + kPixels;
  const int64_t size = static_cast<int64_t>(bytes.size());
  EMBER_CHECK(size > 0, path, ": empty file: expected records of ", rec, " bytes (", label_bytes,
              " label byte(s) + 3072 pixels)");
  if (size % rec != 0) {
    int64_t whole = size / rec;
    EMBER_FAIL(path, ": truncated: record ", whole, " starts at byte offset ", whole * rec, " and expects ", rec,
               " bytes (", label_bytes, " label byte(s) + 3072 pixels), found ", size - whole * rec, " (the file is ",
               size, " bytes, not a multiple of ", rec, ")", r.offset_note());
  }
  const int64_t n = size / rec;
  size_t p0 = pixels.size();
  pixels.resize(p0 + static_cast<size_t>(n * kPixels));
  labels.reserve(labels.size() + static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const uint8_t* recp = bytes.data() + k * rec;
    for (int b = 0; b < label_bytes; ++b) {
      // Validate every label byte of the record (CIFAR-100 has coarse < 20 and fine < 100).
      int64_t limit = label_bytes == 1 ? 10 : (b == 0 ? 20 : 100);
      EMBER_CHECK(recp[b] < limit, path, ": record ", k, ", byte offset ", k * rec + b, ": expected a ",
                  label_bytes == 1 ? "label" : (b == 0 ? "coarse label" : "fine label"), " in 0..", limit - 1,
                  ", found ", int(recp[b]), r.offset_note());
    }
    labels.push_back(recp[field.byte]);
    std::memcpy(pixels.data() + p0 + static_cast<size_t>(k * kPixels), recp + label_bytes, kPixels);
  }
}

Tensor to_images(const std::vector<uint8_t>& pixels) {
  int64_t n = static_cast<int64_t>(pixels.size()) / kPixels;
  Tensor t = empty({n, 3, 32, 32}, {.dtype = DType::u8});
  if (!pixels.empty()) std::memcpy(t.data_ptr(), pixels.data(), pixels.size());
  return t;
}

Tensor to_labels(const std::vector<int64_t>& labels) {
  Tensor t = empty({static_cast<int64_t>(labels.size())}, {.dtype = DType::i64});
  if (!labels.empty()) std::memcpy(t.data_ptr(), labels.data(), labels.size() * sizeof(int64_t));
  return t;
}

}  // namespace

Cifar10::Cifar10(const std::string& dir, Split split) {
  std::string root =
      resolve_dir(dir, "cifar-10-batches-bin", split == Split::Train ? "data_batch_1.bin" : "test_batch.bin");
  std::vector<std::string> names;
  if (split == Split::Train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (const auto& name : names) {
    std::string path = detail::find_file(root, name, std::string("CIFAR-10 ") + split_name(split) + " batch");
    read_records(path, 1, {0, 10, "label"}, pixels, labels);
  }
  init(to_images(pixels), to_labels(labels), 10, std::string("Cifar10[") + split_name(split) + "]");
}

Cifar100::Cifar100(const std::string& dir, Split split, Label label) : label_(label) {
  const char* name = split == Split::Train ? "train.bin" : "test.bin";
  std::string root = resolve_dir(dir, "cifar-100-binary", name);
  std::string path = detail::find_file(root, name, std::string("CIFAR-100 ") + split_name(split) + " file");
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  LabelField field = label == Label::Coarse ? LabelField{0, 20, "coarse"} : LabelField{1, 100, "fine"};
  read_records(path, 2, field, pixels, labels);
  init(to_images(pixels), to_labels(labels), field.classes,
       std::string("Cifar100[") + split_name(split) + ", " + field.name + "]");
}

}  // namespace ember::data
