#pragma once
// Helpers for the data tests: writers for IDX / CIFAR files (plain or gzip) built byte by byte
// here, independently of the readers. The temporary directory they are written into is
// ember::testing::TempDir (support/temp_dir.h, included here for the tests that use both).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace ember::testing {

using Bytes = std::vector<uint8_t>;

inline void put_be32(Bytes& b, uint32_t v) {
  b.push_back(uint8_t(v >> 24));
  b.push_back(uint8_t(v >> 16));
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}

inline Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, const Bytes& pixels) {
  Bytes b;
  put_be32(b, 2051);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

inline Bytes idx_labels(uint32_t n, const Bytes& labels) {
  Bytes b;
  put_be32(b, 2049);
  put_be32(b, n);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

inline Bytes random_bytes(size_t n, uint32_t seed, int mod = 256) {
  std::mt19937 gen(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(gen() % uint32_t(mod));
  return b;
}

inline void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline uint32_t crc32_of(const Bytes& b) {
  uint32_t c = 0xffffffffu;
  for (uint8_t x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

inline void put_le16(Bytes& b, uint32_t v) {
  b.push_back(uint8_t(v));
  b.push_back(uint8_t(v >> 8));
}
inline void put_le32(Bytes& b, uint32_t v) {
  put_le16(b, v & 0xffffu);
  put_le16(b, v >> 16);
}

/// A gzip file (RFC 1952) whose deflate stream uses stored blocks (RFC 1951, BTYPE 00): written
/// here without zlib, so the reader is checked against an independent encoder.
inline Bytes gzip_stored(const Bytes& data) {
  Bytes g = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  size_t pos = 0;
  do {
    size_t len = std::min<size_t>(65535, data.size() - pos);
    bool final = pos + len == data.size();
    g.push_back(final ? 1 : 0);
    put_le16(g, uint32_t(len));
    put_le16(g, uint32_t(~len & 0xffffu));
    g.insert(g.end(), data.begin() + pos, data.begin() + pos + len);
    pos += len;
  } while (pos < data.size());
  put_le32(g, crc32_of(data));
  put_le32(g, uint32_t(data.size()));
  return g;
}

inline void write_gz(const std::string& path, const Bytes& b) { write_file(path, gzip_stored(b)); }

inline Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace ember::testing
