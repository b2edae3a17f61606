// IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header — magic (0x0000, dtype byte
// 0x08 = unsigned byte, number of dims), then one u32 per dim — followed by the raw bytes.
#include <ember/data/mnist.h>

#include <cstring>
#include <sstream>

#include <ember/core/error.h>
#include <ember/data/io.h>

namespace ember::data {

namespace {

constexpr uint32_t kImageMagic = 2051;  // 0x00000803: u8, 3 dims (count, rows, cols)
constexpr uint32_t kLabelMagic = 2049;  // 0x00000801: u8, 1 dim (count)
// A header claiming more than this is corrupt (MNIST is 47 MB); refuse before allocating.
constexpr uint64_t kMaxPayload = uint64_t(16) << 30;

std::string describe_magic(uint32_t magic) {
  std::ostringstream os;
  os << magic;
  if (magic == kImageMagic) {
    os << " (an IDX image file)";
  } else if (magic == kLabelMagic) {
    os << " (an IDX label file)";
  } else if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) >= 0x08) {
    os << " (an IDX file of element type 0x" << std::hex << ((magic >> 8) & 0xff) << std::dec << " with "
       << (magic & 0xff) << " dims)";
  } else {
    os << " (not an IDX file)";
  }
  return os.str();
}

void check_magic(detail::ByteReader& r, uint32_t expected, const char* kind) {
  uint32_t magic = r.read_be32("the IDX magic number");
  EMBER_CHECK(magic == expected, r.path(), ": byte offset 0: expected the IDX ", kind, " magic number ", expected,
              " (0x0000080", (expected == kImageMagic ? 3 : 1), "), found ", describe_magic(magic));
}

uint32_t read_dim(detail::ByteReader& r, const char* what) {
  int64_t at = r.offset();
  uint32_t v = r.read_be32(std::string("the header's ") + what);
  EMBER_CHECK(v > 0, r.path(), ": byte offset ", at, ": expected a positive ", what, ", found 0");
  return v;
}

// After the payload the file must end: extra bytes mean the header and the data disagree.
void check_end(detail::ByteReader& r, const std::string& promised) {
  int64_t end = r.offset();
  if (!r.at_end()) {
    const uint64_t more = r.skip_rest();  // counted, not kept: gzip data may be large
    EMBER_FAIL(r.path(), ": expected the file to end at byte offset ", end, " (", promised, "), found ", more,
               " more bytes", r.offset_note());
  }
}

void check_payload_size(detail::ByteReader& r, uint64_t header_bytes, uint64_t payload, const std::string& promised) {
  EMBER_CHECK(payload <= kMaxPayload, r.path(), ": the header promises ", promised, ", more than the ", kMaxPayload,
              "-byte limit: a corrupt header?");
  // For plain files the size on disk tells truncation before a large allocation.
  if (!r.compressed()) {
    uint64_t expected = header_bytes + payload;
    EMBER_CHECK(r.file_size() >= expected, r.path(), ": truncated: the header promises ", promised,
                ", so the file should be ", expected, " bytes (data from byte offset ", header_bytes, " to ", expected,
                "), found ", r.file_size(), " bytes");
  }
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  detail::ByteReader r(path);
  check_magic(r, kImageMagic, "image");
  uint32_t n = read_dim(r, "image count (dim 0)");
  uint32_t rows = read_dim(r, "row count (dim 1)");
  uint32_t cols = read_dim(r, "column count (dim 2)");
  std::ostringstream promised;
  promised << n << " images of " << rows << "x" << cols << " pixels";
  // In 128 bits: three u32 dims can overflow 64.
  unsigned __int128 wide = static_cast<unsigned __int128>(n) * rows * cols;
  uint64_t payload = wide > kMaxPayload ? kMaxPayload + 1 : static_cast<uint64_t>(wide);
  check_payload_size(r, 16, payload, promised.str());
  const Shape shape{int64_t(n), 1, int64_t(rows), int64_t(cols)};
  const std::string what = "pixels (" + promised.str() + ")";
  Tensor images;
  if (r.compressed()) {
    // Only reading tells how much a gzip file holds: the header's size is not allocated up front
    // (a 23-byte file promising 470 MB did that; tests/fuzz/regressions/idx/).
    std::vector<uint8_t> bytes;
    r.read_exact_grow(bytes, payload, what);
    images = empty(shape, {.dtype = DType::u8});
    std::memcpy(images.data_ptr(), bytes.data(), bytes.size());
  } else {
    images = empty(shape, {.dtype = DType::u8});  // check_payload_size saw the file hold it all
    r.read_exact(images.data_ptr(), payload, what);
  }
  check_end(r, promised.str());
  return images;
}

Tensor read_idx_labels(const std::string& path) {
  detail::ByteReader r(path);
  check_magic(r, kLabelMagic, "label");
  uint32_t n = read_dim(r, "label count (dim 0)");
  std::ostringstream promised;
  promised << n << " labels";
  check_payload_size(r, 8, n, promised.str());
  std::vector<uint8_t> bytes;
  r.read_exact_grow(bytes, n, promised.str());
  check_end(r, promised.str());
  Tensor labels = empty({int64_t(n)}, {.dtype = DType::i64});
  int64_t* l = labels.data<int64_t>();
  for (uint32_t i = 0; i < n; ++i) l[i] = bytes[i];
  return labels;
}

Mnist::Mnist(const std::string& dir, Split split) : split_(split) {
  const char* prefix = split == Split::Train ? "train" : "t10k";
  std::string what = std::string("MNIST ") + split_name(split);
  std::string img_path = detail::find_file(dir, std::string(prefix) + "-images-idx3-ubyte", what + " images");
  std::string lbl_path = detail::find_file(dir, std::string(prefix) + "-labels-idx1-ubyte", what + " labels");
  Tensor images = read_idx_images(img_path);
  Tensor labels = read_idx_labels(lbl_path);
  EMBER_CHECK(images.size(0) == labels.size(0), "Mnist: ", img_path, " holds ", images.size(0), " images but ",
              lbl_path, " holds ", labels.size(0), " labels (byte offset 4 of each file); expected equal counts");
  init(images, labels, -1, std::string("Mnist[") + split_name(split) + "]");
}

}  // namespace ember::data
