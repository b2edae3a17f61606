#pragma once
// Internal (not part of the public API): reading dataset files, plain or gzip-compressed, with
// byte-offset bookkeeping so that every error names the file, the offset and what was expected.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::data::detail {

/// Sequential reader over a plain or .gz file (zlib's gzread reads both; offsets count bytes of
/// the decompressed stream). Not copyable; closes the file on destruction.
class ByteReader {
 public:
  /// Opens `path`; throws naming the path when it cannot be opened.
  explicit ByteReader(std::string path);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  /// Reads exactly n bytes into dst, or throws "<path>: truncated: ... expected n bytes of <what>
  /// from byte offset X, found m (the file ends at byte offset Y)".
  void read_exact(void* dst, size_t n, const std::string& what);
  /// read_exact for a length the file itself states, into `out` (resized to n): the buffer grows
  /// with the bytes actually read (doubling, from 16 MiB) instead of being allocated whole first,
  /// so a corrupt length in a small gzip file fails as truncated without allocating what it claims.
  void read_exact_grow(std::vector<uint8_t>& out, size_t n, const std::string& what);
  /// Reads up to n bytes; returns how many were read (fewer only at the end of the file).
  size_t read_some(void* dst, size_t n);
  /// A big-endian 32-bit integer (IDX headers).
  uint32_t read_be32(const std::string& what);
  /// Reads everything left in the file.
  std::vector<uint8_t> read_rest();
  /// Reads and discards everything left in the file; returns how many bytes that was.
  uint64_t skip_rest();
  /// True when no byte is left (reads ahead by one byte at most, which is kept for the next read).
  bool at_end();
  /// Bytes consumed so far (of the decompressed stream).
  int64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  /// True for gzip input; error messages then say that offsets are in the decompressed stream.
  bool compressed() const { return compressed_; }
  /// " (offsets count decompressed bytes)" for gzip input, "" otherwise; appended to messages.
  std::string offset_note() const;
  /// Size of the file on disk (compressed size for .gz).
  uint64_t file_size() const { return file_size_; }

 private:
  // Throws read_exact's "truncated" error unless got == n.
  void check_complete(int64_t start, size_t got, size_t n, const std::string& what) const;

  std::string path_;
  void* gz_ = nullptr;  // gzFile
  int64_t offset_ = 0;
  bool compressed_ = false;
  bool has_peek_ = false;
  uint8_t peek_ = 0;
  uint64_t file_size_ = 0;
};

/// `dir/name` when it exists, else `dir/name.gz` when that exists; otherwise throws naming both
/// paths and `what` ("MNIST training images").
std::string find_file(const std::string& dir, const std::string& name, const std::string& what);

}  // namespace ember::data::detail
