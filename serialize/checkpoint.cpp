// Checkpoint files: format and atomic write described in serialize/checkpoint.h.
#include <ember/serialize/checkpoint.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <sstream>

#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>
#include <ember/core/tensor.h>

namespace ember::serialize {

// Tensor bytes go to the file exactly as they sit in host memory; the format says little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoint.cpp writes raw host bytes; a big-endian host needs byte swapping here");

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'C', 'K', 'P'};
constexpr uint64_t kPayloadAlign = 64;
constexpr uint64_t kTrailerBytes = 4;
constexpr uint32_t kMaxNameBytes = 1u << 16;
constexpr uint32_t kMaxDims = 64;

// ---- little-endian encoding ----
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// zlib's crc32 takes a 32-bit length; feed it in chunks so any size works.
uint32_t crc_update(uint32_t crc, const void* data, uint64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<uint64_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}
uint32_t crc_of(const void* data, uint64_t n) {
  return crc_update(static_cast<uint32_t>(::crc32(0, nullptr, 0)), data, n);
}

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}
std::string range(uint64_t begin, uint64_t end) {
  std::ostringstream os;  // (not string operator+: GCC 12 warns falsely on "[" + to_string)
  os << "[" << begin << ", " << end << ")";
  return os.str();
}

// Format-fixed dtype codes (independent of the DType enum's values, which may change).
uint32_t dtype_code(DType t) {
  switch (t) {
    case DType::f32:
      return 1;
    case DType::f64:
      return 2;
    case DType::f16:
      return 3;
    case DType::bf16:
      return 4;
    case DType::i32:
      return 5;
    case DType::i64:
      return 6;
    case DType::u8:
      return 7;
    case DType::boolean:
      return 8;
  }
  EMBER_FAIL("checkpoint: no file code for dtype ", dtype_name(t));
}
bool dtype_from_code(uint32_t code, DType& out) {
  static constexpr DType kByCode[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                      DType::i32, DType::i64, DType::u8,  DType::boolean};
  if (code < 1 || code > 8) return false;
  out = kByCode[code - 1];
  return true;
}

// Bytes as a quoted string, non-printable ones as \xNN.
std::string printable(const uint8_t* p, size_t n) {
  std::ostringstream os;
  os << '"';
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '"' && p[i] != '\\') {
      os << static_cast<char>(p[i]);
    } else {
      os << "\\x" << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(p[i]) << std::dec;
    }
  }
  os << '"';
  return os.str();
}

uint64_t align_up(uint64_t v) { return (v + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign; }

std::string sys_error(int err) { return std::string(std::strerror(err)); }

// ---- writing ----

// An open file descriptor that is closed (and its file unlinked unless committed) on scope exit.
class TmpFile {
 public:
  explicit TmpFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = errno;
    EMBER_CHECK(fd_ >= 0, "checkpoint: cannot create temporary file '", path_, "': ", sys_error(err));
  }
  ~TmpFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());  // never throws: a leftover .tmp is harmless
  }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;

  void write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
      const int err = errno;  // before anything else can overwrite it
      if (w < 0 && err == EINTR) continue;
      EMBER_CHECK(w > 0, "checkpoint: writing '", path_, "' failed after ", written_,
                  " bytes: ", w < 0 ? sys_error(err) : std::string("no progress"));
      p += w;
      n -= static_cast<uint64_t>(w);
      written_ += static_cast<uint64_t>(w);
    }
  }
  // Flushes the data to the disk and closes; the file is complete after this returns.
  void sync_and_close() {
    int rc = ::fsync(fd_);
    int err = errno;
    EMBER_CHECK(rc == 0, "checkpoint: fsync of '", path_, "' failed: ", sys_error(err));
    rc = ::close(fd_);
    err = errno;
    fd_ = -1;
    EMBER_CHECK(rc == 0, "checkpoint: closing '", path_, "' failed: ", sys_error(err));
  }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// The directory entry of a rename is only durable once the directory itself is fsync'd.
void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename happened; durability of the entry is best effort here
  ::fsync(fd);
  ::close(fd);
}

struct PreparedEntry {
  std::string name;
  Tensor host;  // contiguous, on the CPU
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// ---- reading ----
std::vector<uint8_t> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int open_err = errno;
  EMBER_CHECK(fd >= 0, "checkpoint: cannot open '", path, "': ", sys_error(open_err));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    EMBER_FAIL("checkpoint: cannot stat '", path, "': ", sys_error(err));
  }
  std::vector<uint8_t> buf(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t r = ::read(fd, buf.data() + got, std::min<size_t>(buf.size() - got, 1u << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = r < 0 ? errno : 0;
      ::close(fd);
      EMBER_FAIL("checkpoint: reading '", path, "' stopped at byte ", got, " of ", buf.size(), ": ",
                 err ? sys_error(err) : std::string("unexpected end of file"));
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return buf;
}

// Bounds-checked reader over the entry table; errors name the entry being parsed.
class TableReader {
 public:
  TableReader(const std::string& path, const uint8_t* base, uint64_t size) : path_(path), base_(base), size_(size) {}
  void need(uint64_t n, uint64_t entry, const char* what) const {
    EMBER_CHECK(n <= size_ - pos_, "checkpoint '", path_, "': entry #", entry,
                " runs past the end of the entry table "
                "while reading its ",
                what, " (table bytes ", range(kCheckpointHeaderBytes, kCheckpointHeaderBytes + size_), ", needed ", n,
                " bytes at file offset ", kCheckpointHeaderBytes + pos_, ")");
  }
  uint32_t u32(uint64_t entry, const char* what) {
    need(4, entry, what);
    uint32_t v = get_u32(base_ + pos_);
    pos_ += 4;
    return v;
  }
  uint64_t u64(uint64_t entry, const char* what) {
    need(8, entry, what);
    uint64_t v = get_u64(base_ + pos_);
    pos_ += 8;
    return v;
  }
  std::string bytes(uint64_t n, uint64_t entry, const char* what) {
    need(n, entry, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  uint64_t pos() const { return pos_; }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// ---- checkpoint sections ----
constexpr const char* kSections[] = {"model/", "optimizer/", "scheduler/", "sampler/", "grad_scaler/"};

Tensor i64_tensor(const std::vector<int64_t>& values, const Shape& sizes) {
  Tensor t = empty(sizes, {.dtype = DType::i64});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

int64_t scalar_i64(const StateDict& all, const std::string& path, const std::string& key) {
  auto it = all.find(key);
  EMBER_CHECK(it != all.end(), "checkpoint '", path, "': missing entry '", key, "'");
  const Tensor& t = it->second;
  EMBER_CHECK(t.dtype() == DType::i64 && t.dim() == 0, "checkpoint '", path, "': entry '", key,
              "' should be a 0-d i64 tensor, found ", dtype_name(t.dtype()), " ", t.shape_str());
  return t.to(Device::cpu()).data<int64_t>()[0];
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void save_tensors(const StateDict& entries, const std::string& path) {
  EMBER_CHECK(!path.empty(), "save checkpoint: empty path");
  NoGradGuard no_grad;
  // Host copies first: a bad entry fails before any file is touched.
  std::vector<PreparedEntry> prepared;
  prepared.reserve(entries.size());
  uint64_t payload = 0;
  for (const auto& [name, t] : entries) {
    EMBER_CHECK(!name.empty(), "save checkpoint '", path, "': an entry has an empty name");
    EMBER_CHECK(name.size() < kMaxNameBytes, "save checkpoint '", path, "': entry name of ", name.size(),
                " bytes is too long (limit ", kMaxNameBytes - 1, ")");
    EMBER_CHECK(t.defined(), "save checkpoint '", path, "': entry '", name, "' is an undefined tensor");
    EMBER_CHECK(t.dim() <= static_cast<int64_t>(kMaxDims), "save checkpoint '", path, "': entry '", name, "' has ",
                t.dim(), " dims (limit ", kMaxDims, ")");
    PreparedEntry e;
    e.name = name;
    e.host = t.detach().to(Device::cpu()).contiguous();
    e.bytes = static_cast<uint64_t>(e.host.numel()) * e.host.element_size();
    e.offset = align_up(payload);
    e.crc = crc_of(e.host.numel() > 0 ? e.host.data_ptr() : nullptr, e.bytes);
    payload = e.offset + e.bytes;
    prepared.push_back(std::move(e));
  }

  std::string table;
  for (const auto& e : prepared) {
    put_u32(table, static_cast<uint32_t>(e.name.size()));
    table += e.name;
    put_u32(table, dtype_code(e.host.dtype()));
    put_u32(table, static_cast<uint32_t>(e.host.dim()));
    for (int64_t s : e.host.sizes()) put_u64(table, static_cast<uint64_t>(s));
    put_u64(table, e.offset);
    put_u64(table, e.bytes);
    put_u32(table, e.crc);
  }

  std::string header(kMagic, sizeof(kMagic));
  put_u32(header, kCheckpointVersion);
  put_u32(header, 0);
  put_u64(header, prepared.size());
  put_u64(header, table.size());
  put_u64(header, payload);
  put_u32(header, crc_of(table.data(), table.size()));
  put_u32(header, crc_of(header.data(), header.size()));
  EMBER_ASSERT(header.size() == kCheckpointHeaderBytes, "checkpoint header is ", header.size(), " bytes");

  const std::string tmp = path + ".tmp";
  TmpFile f(tmp);
  f.write(header.data(), header.size());
  f.write(table.data(), table.size());
  static const char kZeros[kPayloadAlign] = {};
  uint32_t payload_crc = crc_of(nullptr, 0);
  uint64_t pos = 0;
  for (const auto& e : prepared) {
    if (e.offset > pos) {
      f.write(kZeros, e.offset - pos);
      payload_crc = crc_update(payload_crc, kZeros, e.offset - pos);
    }
    if (e.bytes > 0) {
      f.write(e.host.data_ptr(), e.bytes);
      payload_crc = crc_update(payload_crc, e.host.data_ptr(), e.bytes);
    }
    pos = e.offset + e.bytes;
  }
  std::string trailer;
  put_u32(trailer, payload_crc);
  f.write(trailer.data(), trailer.size());
  f.sync_and_close();
  const int rename_rc = std::rename(tmp.c_str(), path.c_str());
  const int rename_err = errno;
  EMBER_CHECK(rename_rc == 0, "save checkpoint: renaming '", tmp, "' to '", path, "' failed: ", sys_error(rename_err));
  f.commit();
  sync_directory_of(path);
}

StateDict load_tensors(const std::string& path, Device device) {
  device.validate();
  const std::vector<uint8_t> buf = read_file(path);
  const uint64_t size = buf.size();
  const uint8_t* p = buf.data();

  EMBER_CHECK(size >= sizeof(kMagic) && std::memcmp(p, kMagic, sizeof(kMagic)) == 0, "checkpoint '", path,
              "': not an ember checkpoint (expected magic \"EMBERCKP\" in bytes [0, 8), found ",
              size < sizeof(kMagic) ? "a file of " + std::to_string(size) + " bytes" : printable(p, sizeof(kMagic)),
              ")");
  EMBER_CHECK(size >= kCheckpointHeaderBytes, "checkpoint '", path, "': truncated: the file has ", size,
              " bytes, less than the ", kCheckpointHeaderBytes, "-byte header");
  const uint32_t version = get_u32(p + 8);
  EMBER_CHECK(version == kCheckpointVersion, "checkpoint '", path, "': format version ", version,
              " (bytes [8, 12)), this build reads version ", kCheckpointVersion);
  const uint32_t header_crc = crc_of(p, 44);
  EMBER_CHECK(header_crc == get_u32(p + 44), "checkpoint '", path,
              "': header (bytes [0, 44)) fails its CRC-32 check: "
              "stored ",
              hex32(get_u32(p + 44)), ", computed ", hex32(header_crc), "; the file is corrupt");
  const uint64_t count = get_u64(p + 16), table_bytes = get_u64(p + 24), payload_bytes = get_u64(p + 32);
  // Lengths this large cannot come from a writer (and would overflow the sum below).
  constexpr uint64_t kMaxLength = uint64_t{1} << 60;
  EMBER_CHECK(table_bytes < kMaxLength && payload_bytes < kMaxLength, "checkpoint '", path,
              "': the header states impossible lengths (table ", table_bytes, ", payload ", payload_bytes, " bytes)");
  const uint64_t expected = kCheckpointHeaderBytes + table_bytes + payload_bytes + kTrailerBytes;
  EMBER_CHECK(size >= expected, "checkpoint '", path, "': truncated: the header promises ", expected, " bytes (table ",
              table_bytes, ", payload ", payload_bytes, "), the file has ", size, "; bytes from offset ", size,
              " on are missing");
  EMBER_CHECK(size == expected, "checkpoint '", path, "': ", size - expected, " unexpected bytes after the end ",
              "of the checkpoint at offset ", expected);
  const uint8_t* table = p + kCheckpointHeaderBytes;
  const uint8_t* payload = table + table_bytes;
  const uint64_t payload_start = kCheckpointHeaderBytes + table_bytes;
  const uint32_t table_crc = crc_of(table, table_bytes);
  EMBER_CHECK(table_crc == get_u32(p + 40), "checkpoint '", path, "': entry table (bytes ",
              range(kCheckpointHeaderBytes, payload_start), ") fails its CRC-32 check: stored ", hex32(get_u32(p + 40)),
              ", computed ", hex32(table_crc), "; the file is corrupt");

  StateDict out;
  TableReader rd(path, table, table_bytes);
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t name_len = rd.u32(i, "name length");
    EMBER_CHECK(name_len > 0 && name_len < kMaxNameBytes, "checkpoint '", path, "': entry #", i,
                " has a name length of ", name_len, " (expected 1..", kMaxNameBytes - 1, ")");
    const std::string name = rd.bytes(name_len, i, "name");
    const std::string where = "checkpoint '" + path + "': entry '" + name + "' (#" + std::to_string(i) + ")";
    DType dtype{};
    const uint32_t code = rd.u32(i, "dtype");
    EMBER_CHECK(dtype_from_code(code, dtype), where, " has unknown dtype code ", code);
    const uint32_t ndim = rd.u32(i, "ndim");
    EMBER_CHECK(ndim <= kMaxDims, where, " has ", ndim, " dims (limit ", kMaxDims, ")");
    Shape sizes(ndim);
    uint64_t numel = 1;
    // The sizes' product with each 0 taken as 1: no tensor has one past 2^62. An empty tensor's
    // other sizes multiplied past int64 in numel_of ([2^62, 2^62, 0]; tests/fuzz/regressions/).
    uint64_t extent = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      const uint64_t s = rd.u64(i, "sizes");
      EMBER_CHECK(s <= (1ull << 62), where, " has an impossible size ", s, " in dim ", d);
      sizes[d] = static_cast<int64_t>(s);
      numel = (s != 0 && numel > payload_bytes / s) ? UINT64_MAX : numel * s;
      extent = (s > 1 && extent > (1ull << 62) / s) ? UINT64_MAX : extent * std::max<uint64_t>(s, 1);
    }
    EMBER_CHECK(extent <= (1ull << 62), where, " has an impossible shape ", shape_str(sizes),
                ": its sizes multiply past 2^62 (the nonzero ones, even when another is 0)");
    const uint64_t offset = rd.u64(i, "payload offset");
    const uint64_t length = rd.u64(i, "byte length");
    const uint32_t stored_crc = rd.u32(i, "checksum");
    EMBER_CHECK(numel != UINT64_MAX && numel * dtype_size(dtype) == length, where, ": shape ", shape_str(sizes), " of ",
                dtype_name(dtype), " does not match its byte length ", length);
    EMBER_CHECK(offset <= payload_bytes && length <= payload_bytes - offset, where, ": payload bytes ",
                range(offset, offset + length), " lie outside the payload [0, ", payload_bytes, ")");
    EMBER_CHECK(offset >= prev_end, where, ": payload bytes ", range(offset, offset + length),
                " overlap the previous entry, which ends at ", prev_end);
    prev_end = offset + length;
    const uint32_t crc = crc_of(payload + offset, length);
    EMBER_CHECK(crc == stored_crc, where, ": its bytes (file bytes ",
                range(payload_start + offset, payload_start + offset + length), ") fail their CRC-32 check: stored ",
                hex32(stored_crc), ", computed ", hex32(crc), "; the file is corrupt");
    EMBER_CHECK(out.find(name) == out.end(), where, ": the name appears twice");
    Tensor t = empty(sizes, {.dtype = dtype});
    if (length > 0) std::memcpy(t.data_ptr(), payload + offset, length);
    out.emplace(name, std::move(t));
  }
  EMBER_CHECK(rd.pos() == table_bytes, "checkpoint '", path, "': the entry table has ", table_bytes - rd.pos(),
              " bytes left over after ", count, " entries (from file offset ", kCheckpointHeaderBytes + rd.pos(), ")");
  // The entries' own checksums passed, so a mismatch here lies in the padding between them.
  const uint32_t payload_crc = crc_of(payload, payload_bytes);
  const uint32_t stored = get_u32(payload + payload_bytes);
  EMBER_CHECK(payload_crc == stored, "checkpoint '", path, "': payload (bytes ",
              range(payload_start, payload_start + payload_bytes),
              ") fails its CRC-32 check outside every entry "
              "(padding or the trailer at offset ",
              payload_start + payload_bytes, "): stored ", hex32(stored), ", computed ", hex32(payload_crc),
              "; the file is corrupt");
  if (!device.is_cpu()) {
    for (auto& [name, t] : out) t = t.to(device);
  }
  return out;
}

void save_checkpoint(const Checkpoint& ckpt, const std::string& path) {
  StateDict all;
  const StateDict* sections[] = {&ckpt.model, &ckpt.optimizer, &ckpt.scheduler, &ckpt.sampler, &ckpt.grad_scaler};
  for (size_t s = 0; s < std::size(kSections); ++s) {
    for (const auto& [name, t] : *sections[s]) all.emplace(kSections[s] + name, t);
  }
  for (const auto& [name, st] : ckpt.rng) {
    EMBER_CHECK(!name.empty(), "save checkpoint '", path, "': a generator has an empty name");
    all.emplace("rng/" + name, i64_tensor({std::bit_cast<int64_t>(st.seed), std::bit_cast<int64_t>(st.offset)}, {2}));
  }
  for (const auto& [key, value] : ckpt.metadata) {
    EMBER_CHECK(!key.empty(), "save checkpoint '", path, "': a metadata entry has an empty key");
    Tensor t = empty({static_cast<int64_t>(value.size())}, {.dtype = DType::u8});
    if (!value.empty()) std::memcpy(t.data_ptr(), value.data(), value.size());
    all.emplace("meta/" + key, t);
  }
  all.emplace("epoch", i64_tensor({ckpt.epoch}, {}));
  all.emplace("global_step", i64_tensor({ckpt.global_step}, {}));
  all.emplace("sampler_position", i64_tensor({ckpt.sampler_position}, {}));
  save_tensors(all, path);
}

Checkpoint load_checkpoint(const std::string& path, Device device) {
  StateDict all = load_tensors(path, Device::cpu());
  Checkpoint ck;
  ck.epoch = scalar_i64(all, path, "epoch");
  ck.global_step = scalar_i64(all, path, "global_step");
  ck.sampler_position = scalar_i64(all, path, "sampler_position");
  StateDict* sections[] = {&ck.model, &ck.optimizer, &ck.scheduler, &ck.sampler, &ck.grad_scaler};
  for (auto& [name, t] : all) {
    if (name == "epoch" || name == "global_step" || name == "sampler_position") continue;
    bool placed = false;
    for (size_t s = 0; s < std::size(kSections) && !placed; ++s) {
      const std::string prefix = kSections[s];
      if (name.compare(0, prefix.size(), prefix) == 0 && name.size() > prefix.size()) {
        sections[s]->emplace(name.substr(prefix.size()), device.is_cpu() ? t : t.to(device));
        placed = true;
      }
    }
    if (placed) continue;
    if (name.rfind("rng/", 0) == 0 && name.size() > 4) {
      EMBER_CHECK(t.dtype() == DType::i64 && t.sizes() == Shape{2}, "checkpoint '", path, "': entry '", name,
                  "' should be an i64 tensor of shape [2] (seed, offset), found ", dtype_name(t.dtype()), " ",
                  t.shape_str());
      const int64_t* v = t.data<int64_t>();
      ck.rng[name.substr(4)] = RngState{std::bit_cast<uint64_t>(v[0]), std::bit_cast<uint64_t>(v[1])};
    } else if (name.rfind("meta/", 0) == 0 && name.size() > 5) {
      EMBER_CHECK(t.dtype() == DType::u8 && t.dim() == 1, "checkpoint '", path, "': entry '", name,
                  "' should be a 1-D u8 tensor (text), found ", dtype_name(t.dtype()), " ", t.shape_str());
      ck.metadata[name.substr(5)] = std::string(reinterpret_cast<const char*>(t.data_ptr()), t.numel());
    } else {
      EMBER_FAIL("checkpoint '", path, "': unexpected entry '", name,
                 "' (expected model/, optimizer/, scheduler/, "
                 "sampler/, grad_scaler/, rng/, meta/ entries, epoch, global_step, sampler_position)");
    }
  }
  return ck;
}

void capture_rng(Checkpoint& ckpt, const std::vector<std::pair<std::string, const Generator*>>& others) {
  ckpt.rng["default"] = default_generator().state();
  for (const auto& [name, gen] : others) {
    EMBER_CHECK(gen != nullptr, "capture_rng: generator '", name, "' is null");
    EMBER_CHECK(!name.empty() && name != "default",
                "capture_rng: a generator needs a name other than "
                "\"default\" (which is default_generator()), got '",
                name, "'");
    ckpt.rng[name] = gen->state();
  }
}

void restore_rng(const Checkpoint& ckpt, const std::vector<std::pair<std::string, Generator*>>& others) {
  auto find = [&](const std::string& name) {
    auto it = ckpt.rng.find(name);
    EMBER_CHECK(it != ckpt.rng.end(), "restore_rng: the checkpoint holds no state for generator '", name, "'");
    return it->second;
  };
  // Look everything up before changing anything.
  const RngState def = find("default");
  std::vector<RngState> states;
  for (const auto& [name, gen] : others) {
    EMBER_CHECK(gen != nullptr, "restore_rng: generator '", name, "' is null");
    states.push_back(find(name));
  }
  default_generator().set_state(def);
  for (size_t i = 0; i < others.size(); ++i) others[i].second->set_state(states[i]);
}

}  // namespace ember::serialize
