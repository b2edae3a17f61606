// Fuzz harness: the IDX reader (data/mnist.h read_idx_images, read_idx_labels; data/io.h's
// ByteReader underneath, plain or gzip). The input is the file. Loaded tensors must agree with the
// header the file states; a refusal is an ember::Error naming the file.
#include <cstring>

#include <ember/core/tensor.h>
#include <ember/data/mnist.h>

#include "fuzz_support.h"

namespace ember::fuzz {

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// gzip input (the reader decompresses it): its header cannot be read here to check the result.
bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

}  // namespace

bool fuzz_one(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("input.idx", data, size);
  bool loaded = false;
  try {
    Tensor images = data::read_idx_images(path);
    loaded = true;
    if (images.dim() != 4 || images.size(1) != 1 || images.dtype() != DType::u8)
      violation("read_idx_images returned " + images.shape_str() + " " + dtype_name(images.dtype()));
    if (!is_gzip(data, size)) {
      if (size < 16 || static_cast<uint64_t>(images.numel()) != size - 16 || images.size(0) != be32(data + 4) ||
          images.size(2) != be32(data + 8) || images.size(3) != be32(data + 12) ||
          (images.numel() > 0 && std::memcmp(images.data_ptr(), data + 16, size - 16) != 0))
        violation("read_idx_images returned " + images.shape_str() + " that disagrees with the file's header/bytes");
    }
  } catch (const Error& e) {
    expect_names(e, path);
  }
  try {
    Tensor labels = data::read_idx_labels(path);
    loaded = true;
    if (labels.dim() != 1 || labels.dtype() != DType::i64)
      violation("read_idx_labels returned " + labels.shape_str() + " " + dtype_name(labels.dtype()));
    if (!is_gzip(data, size)) {
      if (size < 8 || static_cast<uint64_t>(labels.numel()) != size - 8 || labels.size(0) != be32(data + 4))
        violation("read_idx_labels returned " + labels.shape_str() + " that disagrees with the file's header");
      const int64_t* l = labels.data<int64_t>();
      for (int64_t i = 0; i < labels.numel(); ++i)
        if (l[i] != data[8 + i]) violation("read_idx_labels: label " + std::to_string(i) + " differs from the file");
    }
  } catch (const Error& e) {
    expect_names(e, path);
  }
  return loaded;
}

}  // namespace ember::fuzz
