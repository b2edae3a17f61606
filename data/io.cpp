// Dataset file reading through zlib's gz* API, which reads plain files transparently, so one
// code path serves both `train-images-idx3-ubyte` and `train-images-idx3-ubyte.gz`.
#include <ember/data/io.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <ember/core/error.h>

namespace ember::data::detail {

namespace {
gzFile as_gz(void* p) { return static_cast<gzFile>(p); }
// gzread takes an unsigned count but returns an int: read in chunks below INT_MAX.
constexpr size_t kChunk = size_t(1) << 30;
}  // namespace

ByteReader::ByteReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  EMBER_CHECK(std::filesystem::is_regular_file(path_, ec), path_, ": no such file (or not a regular file)");
  file_size_ = std::filesystem::file_size(path_, ec);
  gzFile f = gzopen(path_.c_str(), "rb");
  EMBER_CHECK(f != nullptr, path_, ": cannot open: ", std::strerror(errno));
  gz_ = f;
  gzbuffer(f, 1 << 20);
  // gzdirect() is only meaningful after the first read: peek one byte to decide.
  int c = gzgetc(f);
  compressed_ = gzdirect(f) == 0;
  if (c >= 0) {
    has_peek_ = true;
    peek_ = static_cast<uint8_t>(c);
  }
}

ByteReader::~ByteReader() {
  if (gz_ != nullptr) gzclose(as_gz(gz_));
}

std::string ByteReader::offset_note() const {
  return compressed_ ? " (gzip file: offsets count decompressed bytes)" : "";
}

size_t ByteReader::read_some(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t got = 0;
  if (n > 0 && has_peek_) {
    out[0] = peek_;
    has_peek_ = false;
    got = 1;
  }
  while (got < n) {
    size_t want = std::min(n - got, kChunk);
    int r = gzread(as_gz(gz_), out + got, static_cast<unsigned>(want));
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(as_gz(gz_), &errnum);
      EMBER_FAIL(path_, ": read error at byte offset ", offset_ + static_cast<int64_t>(got), offset_note(),
                 " (truncated or corrupt gzip data?): ", msg ? msg : "unknown zlib error");
    }
    if (r == 0) {
      // End of input; a gzip stream cut short reports Z_BUF_ERROR here.
      int errnum = 0;
      const char* msg = gzerror(as_gz(gz_), &errnum);
      if (errnum != Z_OK && errnum != Z_STREAM_END) {
        EMBER_FAIL(path_, ": the gzip stream is truncated or corrupt at byte offset ",
                   offset_ + static_cast<int64_t>(got), offset_note(), ": ", msg ? msg : "unknown zlib error");
      }
      break;
    }
    got += static_cast<size_t>(r);
  }
  offset_ += static_cast<int64_t>(got);
  return got;
}

void ByteReader::read_exact(void* dst, size_t n, const std::string& what) {
  const int64_t start = offset_;
  check_complete(start, read_some(dst, n), n, what);
}

void ByteReader::read_exact_grow(std::vector<uint8_t>& out, size_t n, const std::string& what) {
  const int64_t start = offset_;
  constexpr size_t kFirstStep = size_t(16) << 20;
  out.clear();
  size_t got = 0;
  while (got < n) {
    const size_t want = std::min(n - got, std::max(kFirstStep, got));
    out.resize(got + want);
    const size_t k = read_some(out.data() + got, want);
    got += k;
    if (k < want) break;
  }
  out.resize(got);
  check_complete(start, got, n, what);
}

void ByteReader::check_complete(int64_t start, size_t got, size_t n, const std::string& what) const {
  EMBER_CHECK(got == n, path_, ": truncated: expected ", n, " bytes of ", what, " from byte offset ", start, ", found ",
              got, " (the file ends at byte offset ", start + static_cast<int64_t>(got), ", expected it to reach ",
              start + static_cast<int64_t>(n), ")", offset_note());
}

uint32_t ByteReader::read_be32(const std::string& what) {
  uint8_t b[4];
  read_exact(b, 4, what);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

std::vector<uint8_t> ByteReader::read_rest() {
  std::vector<uint8_t> out;
  // For plain files the size is known; gzip data grows in 4 MiB steps.
  size_t step = compressed_ ? (size_t(4) << 20) : static_cast<size_t>(std::max<uint64_t>(file_size_, 1));
  for (;;) {
    size_t old = out.size();
    out.resize(old + step);
    size_t got = read_some(out.data() + old, step);
    out.resize(old + got);
    if (got < step) break;
  }
  return out;
}

uint64_t ByteReader::skip_rest() {
  std::vector<uint8_t> buf(size_t(1) << 16);
  uint64_t n = 0;
  for (size_t got; (got = read_some(buf.data(), buf.size())) > 0;) n += got;
  return n;
}

bool ByteReader::at_end() {
  if (has_peek_) return false;
  uint8_t b;
  size_t got = read_some(&b, 1);
  if (got == 0) return true;
  // Give the byte back: it belongs to whatever the caller reads next.
  offset_ -= 1;
  has_peek_ = true;
  peek_ = b;
  return false;
}

std::string find_file(const std::string& dir, const std::string& name, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path plain = fs::path(dir) / name;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  EMBER_FAIL("cannot find the ", what, ": neither ", plain.string(), " nor ", gz.string(), " exists",
             fs::is_directory(dir, ec) ? "" : " (the directory itself does not exist)");
}

}  // namespace ember::data::detail
