// Fuzz harness: the CIFAR binary readers (data/cifar.h). The input is one batch file, read as
// CIFAR-10's test_batch.bin and as CIFAR-100's test.bin (fine and coarse labels). A load must hold
// one image per record, the file's pixels and labels; a refusal is an ember::Error naming the file.
#include <cstring>
#include <filesystem>

#include <ember/data/cifar.h>

#include "fuzz_support.h"

namespace ember::fuzz {

namespace {

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

// The dataset's records must be the file's: `label_bytes` label bytes, then 3072 pixels.
void check_records(const data::TensorDataset& ds, const uint8_t* data, size_t size, int label_bytes, int label_at,
                   const char* what) {
  const size_t rec = static_cast<size_t>(label_bytes) + 3072;
  const Tensor& x = ds.images();
  const Tensor& y = ds.labels();
  if (x.dim() != 4 || x.size(1) != 3 || x.size(2) != 32 || x.size(3) != 32 || y.dim() != 1 || y.size(0) != x.size(0))
    violation(std::string(what) + ": images " + x.shape_str() + ", labels " + y.shape_str());
  if (is_gzip(data, size)) return;
  if (size % rec != 0 || static_cast<size_t>(x.size(0)) != size / rec)
    violation(std::string(what) + ": " + std::to_string(x.size(0)) + " records from a file of " + std::to_string(size) +
              " bytes");
  const auto* px = static_cast<const uint8_t*>(x.data_ptr());
  const int64_t* l = y.data<int64_t>();
  for (int64_t k = 0; k < x.size(0); ++k) {
    const uint8_t* r = data + static_cast<size_t>(k) * rec;
    if (l[k] != r[label_at] || std::memcmp(px + k * 3072, r + label_bytes, 3072) != 0)
      violation(std::string(what) + ": record " + std::to_string(k) + " differs from the file");
  }
}

}  // namespace

bool fuzz_one(const uint8_t* data, size_t size) {
  // Both names in one directory; the readers find them by name.
  const std::string c10 = write_scratch("test_batch.bin", data, size);
  const std::string c100 = (scratch_dir() / "test.bin").string();
  std::error_code ec;
  std::filesystem::remove(c100, ec);
  std::filesystem::create_hard_link(c10, c100, ec);
  if (ec) violation("cannot link " + c100 + ": " + ec.message());
  const std::string dir = scratch_dir().string();
  bool loaded = false;
  try {
    data::Cifar10 ds(dir, data::Split::Test);
    loaded = true;
    check_records(ds, data, size, 1, 0, "Cifar10");
  } catch (const Error& e) {
    expect_names(e, c10);
  }
  for (auto kind : {data::Cifar100::Label::Fine, data::Cifar100::Label::Coarse}) {
    try {
      data::Cifar100 ds(dir, data::Split::Test, kind);
      loaded = true;
      check_records(ds, data, size, 2, kind == data::Cifar100::Label::Fine ? 1 : 0, "Cifar100");
    } catch (const Error& e) {
      expect_names(e, c100);
    }
  }
  return loaded;
}

}  // namespace ember::fuzz
