#pragma once
// Internal: the wire format between TcpStore clients and the server rank 0 hosts.
//
//   message = u32 body length (little-endian) + body
//   request body = u8 Cmd + fields;  reply body = u8 Status + fields
//   fields: i64 (8 bytes, little-endian), string (u32 length + bytes)
//
// Waits (get, wait) carry their timeout; the server answers Status::timeout when it expires, so a
// client never reads the reply of a request it has given up on.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ember/core/error.h>

namespace ember::parallel::store_wire {

enum class Cmd : uint8_t {
  set = 1,  // key, value -> ok
  set_noreply = 2,  // key, value -> (no reply)
  get = 3,  // key, timeout_ms -> ok value | timeout
  add = 4,  // key, delta -> ok i64 | error text
  compare_set = 5,  // key, expected, desired -> ok current value
  wait = 6,  // timeout_ms, count, keys... -> ok | timeout count, missing keys...
  check = 7,  // count, keys... -> ok i64 (1 when all are set)
  remove = 8,  // key -> ok i64 (1 when it existed)
};
enum class Status : uint8_t { ok = 0, timeout = 1, error = 2 };

/// Largest message either side accepts (a corrupt length must not allocate gigabytes).
constexpr uint32_t kMaxMessage = 64u << 20;

/// Appends fields to a message body.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    body_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(int64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);  // x86-64 and aarch64 Linux are little-endian
    body_.append(b, 8);
    return *this;
  }
  Writer& str(const std::string& s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    char b[4];
    std::memcpy(b, &n, 4);
    body_.append(b, 4).append(s);
    return *this;
  }
  Writer& strs(const std::vector<std::string>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (const std::string& s : v) str(s);
    return *this;
  }
  /// Length prefix + body, ready to send.
  std::string framed() const {
    const uint32_t n = static_cast<uint32_t>(body_.size());
    std::string out(4, '\0');
    std::memcpy(out.data(), &n, 4);
    return out + body_;
  }

 private:
  std::string body_;
};

/// Reads fields from a message body; a truncated body is an error naming the field.
class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  uint8_t u8() {
    need(1, "u8");
    return static_cast<uint8_t>(*p_++);
  }
  int64_t i64() {
    need(8, "i64");
    int64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  std::string str() {
    need(4, "string length");
    uint32_t n;
    std::memcpy(&n, p_, 4);
    p_ += 4;
    need(n, "string");
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<std::string> strs() {
    const int64_t n = i64();
    EMBER_CHECK(n >= 0 && n <= end_ - p_, "store protocol: bad key count ", n);
    std::vector<std::string> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }

 private:
  void need(size_t n, const char* what) const {
    EMBER_CHECK(static_cast<size_t>(end_ - p_) >= n, "store protocol: message truncated while reading a ", what);
  }
  const char* p_;
  const char* end_;
};

}  // namespace ember::parallel::store_wire
