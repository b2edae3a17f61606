// Checkpoint files (train/checkpoint.h): round trips of every dtype and layout, the on-disk format
// parsed independently here (with an independent CRC-32), corruption of every single byte,
// truncation at every length, wrong magic and version, and failed saves that must leave the
// previous file intact.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/serialize/checkpoint.h>
#include "support/error_of.h"
#include "support/reference.h"
#include "support/skip.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::error_of;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::TempDir;
using ember::testing::TempStorage;
using ember::testing::to_f64;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(f.good());
}
uint32_t le32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b.at(at + i)) << (8 * i);
  return v;
}
uint64_t le64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b.at(at + i)) << (8 * i);
  return v;
}
void put_le32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}

// Bitwise CRC-32 (IEEE, reflected, as zlib's crc32): an implementation independent of the one
// the library calls.
uint32_t crc32_ref(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

// Raw bytes of a contiguous CPU tensor.
std::vector<uint8_t> raw(const Tensor& t) {
  REQUIRE(t.device().is_cpu());
  REQUIRE(t.is_contiguous());
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.numel() * static_cast<int64_t>(t.element_size()));
}

// A small checkpoint with every section filled.
serialize::Checkpoint small_checkpoint() {
  serialize::Checkpoint ck;
  ck.model["fc.weight"] = random_tensor({3, 5}, DType::f32, 1);
  ck.model["fc.bias"] = random_tensor({3}, DType::f32, 2);
  ck.model["bn.num_batches_tracked"] = random_tensor({}, DType::i64, 3, 0, 100);
  ck.optimizer["state.0.momentum_buffer"] = random_tensor({3, 5}, DType::f32, 4);
  ck.optimizer["param_groups.0.lr"] = random_tensor({}, DType::f64, 5);
  ck.scheduler["last_epoch"] = random_tensor({}, DType::i64, 6, 0, 10);
  ck.sampler["seed"] = random_tensor({}, DType::i64, 7, 0, 1000);
  ck.grad_scaler["scale"] = full({}, 32768.0);
  ck.rng["default"] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  ck.rng["dropout"] = {42, 7};
  ck.epoch = 3;
  ck.global_step = 12345678901LL;
  ck.sampler_position = 640;
  ck.metadata["model"] = "mnist_cnn";
  ck.metadata["binary"] = std::string("a\0b\xff", 4);
  ck.metadata["empty"] = "";
  return ck;
}

// random_tensor for any dtype; booleans (which random_tensor would make all true) come from the
// sign of random floats, in the same layouts.
Tensor any_random(const Shape& sizes, DType dt, uint64_t seed, Layout layout = Layout::Contiguous) {
  if (dt != DType::boolean) {
    const double lo = dt == DType::u8 ? 0 : -1000, hi = 1000;
    return random_tensor(sizes, dt, seed, lo, hi, layout);
  }
  const int64_t nd = static_cast<int64_t>(sizes.size());
  if (layout == Layout::Transposed && nd >= 2) {
    Shape swapped = sizes;
    std::swap(swapped[nd - 1], swapped[nd - 2]);
    return lt(random_tensor(swapped, DType::f32, seed), 0.0).transpose(-1, -2);
  }
  if (layout == Layout::Strided && nd >= 1) {
    Shape wide = sizes;
    wide[nd - 1] *= 2;
    return lt(random_tensor(wide, DType::f32, seed), 0.0).slice(-1, 0, wide[nd - 1], 2);
  }
  return lt(random_tensor(sizes, DType::f32, seed), 0.0);
}

void check_same_tensor(const Tensor& got, const Tensor& want) {
  INFO("shape " << want.shape_str() << " dtype " << dtype_name(want.dtype()));
  REQUIRE(got.defined());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.sizes() == want.sizes());
  CHECK(got.device() == Device::cpu());
  CHECK(to_f64(got) == to_f64(want));  // exact: the bytes must come back unchanged
}

void check_same_dict(const StateDict& got, const StateDict& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO("entry " << name);
    REQUIRE(got.count(name) == 1);
    check_same_tensor(got.at(name), t);
  }
}

}  // namespace

TEST_CASE("checkpoint: tensors of every dtype and layout round-trip exactly", "[cpu][checkpoint]") {
  TempDir dir;
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8,  DType::boolean};
  StateDict entries;
  uint64_t seed = 100;
  for (DType dt : dtypes) {
    const std::string n = dtype_name(dt);
    entries[n + "/contiguous"] = any_random({7, 13}, dt, seed++);
    entries[n + "/transposed"] = any_random({5, 3, 11}, dt, seed++, Layout::Transposed);
    entries[n + "/strided"] = any_random({9, 7}, dt, seed++, Layout::Strided);
    entries[n + "/sliced"] = any_random({6, 10}, dt, seed++).slice(1, 1, 10, 3);
    entries[n + "/expanded"] = any_random({1, 5}, dt, seed++).expand({4, 5});
    entries[n + "/scalar"] = any_random({}, dt, seed++);
    entries[n + "/empty"] = any_random({0, 3}, dt, seed++);
    entries[n + "/odd"] = any_random({1, 3, 1, 129}, dt, seed++);
  }
  const std::string path = dir.file("all.ckpt");
  serialize::save_tensors(entries, path);
  check_same_dict(serialize::load_tensors(path), entries);
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("checkpoint: special float values and a parameter keep their exact bits", "[cpu][checkpoint]") {
  TempDir dir;
  Tensor special =
      from_vector<double>({0.0, -0.0, 1e-45, -3.4e38, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0}, {7}, {.dtype = DType::f32});
  Tensor param = random_tensor({4, 4}, DType::f32, 9).requires_grad_();
  serialize::save_tensors({{"special", special}, {"param", param}}, dir.file("s.ckpt"));
  StateDict back = serialize::load_tensors(dir.file("s.ckpt"));
  CHECK(raw(back.at("special")) == raw(special));
  CHECK(raw(back.at("param")) == raw(param.detach()));
  CHECK_FALSE(back.at("param").requires_grad());
}

TEST_CASE("checkpoint: the file follows the documented layout", "[cpu][checkpoint]") {
  CHECK(crc32_ref(reinterpret_cast<const uint8_t*>("123456789"), 9) == 0xCBF43926u);  // the CRC-32 check value
  TempDir dir;
  Tensor a = from_vector({1, -2, 3}, {3}, {.dtype = DType::i32});
  Tensor b = from_vector({0.5, 1.5, 2.5, 3.5}, {2, 2}, {.dtype = DType::f64});
  const std::string path = dir.file("layout.ckpt");
  serialize::save_tensors({{"a", a}, {"bb", b}}, path);
  const std::vector<uint8_t> f = read_bytes(path);

  REQUIRE(f.size() >= serialize::kCheckpointHeaderBytes);
  CHECK(std::string(f.begin(), f.begin() + 8) == "EMBERCKP");
  CHECK(le32(f, 8) == serialize::kCheckpointVersion);
  CHECK(le64(f, 16) == 2);
  const uint64_t table = le64(f, 24), payload = le64(f, 32);
  REQUIRE(f.size() == 48 + table + payload + 4);
  CHECK(le32(f, 44) == crc32_ref(f.data(), 44));
  CHECK(le32(f, 40) == crc32_ref(f.data() + 48, table));
  CHECK(le32(f, 48 + table + payload) == crc32_ref(f.data() + 48 + table, payload));

  // Entry "a": name, dtype code 5 (i32), 1 dim of 3, offset 0, 12 bytes.
  size_t p = 48;
  CHECK(le32(f, p) == 1);
  CHECK(f.at(p + 4) == 'a');
  p += 5;
  CHECK(le32(f, p) == 5);
  CHECK(le32(f, p + 4) == 1);
  CHECK(le64(f, p + 8) == 3);
  const uint64_t off_a = le64(f, p + 16), len_a = le64(f, p + 24);
  CHECK(off_a == 0);
  CHECK(len_a == 12);
  CHECK(le32(f, p + 32) == crc32_ref(f.data() + 48 + table + off_a, len_a));
  p += 36;
  // Entry "bb": dtype code 2 (f64), shape [2, 2], 64-byte aligned offset, 32 bytes.
  CHECK(le32(f, p) == 2);
  p += 6;
  CHECK(le32(f, p) == 2);
  CHECK(le32(f, p + 4) == 2);
  CHECK(le64(f, p + 8) == 2);
  CHECK(le64(f, p + 16) == 2);
  const uint64_t off_b = le64(f, p + 24), len_b = le64(f, p + 32);
  CHECK(off_b == 64);
  CHECK(len_b == 32);
  CHECK(p + 44 == 48 + table);
  // The payload holds the elements little-endian.
  const size_t pa = 48 + table + off_a;
  CHECK(le32(f, pa) == 1u);
  CHECK(le32(f, pa + 4) == 0xFFFFFFFEu);
  CHECK(le32(f, pa + 8) == 3u);
  double b1;
  std::memcpy(&b1, f.data() + 48 + table + off_b + 8, 8);
  CHECK(b1 == 1.5);
}

TEST_CASE("checkpoint: every section, the RNG states, counters and metadata round-trip", "[cpu][checkpoint]") {
  TempDir dir;
  const serialize::Checkpoint ck = small_checkpoint();
  const std::string path = dir.file("full.ckpt");
  serialize::save_checkpoint(ck, path);
  const serialize::Checkpoint back = serialize::load_checkpoint(path, Device::cpu());
  check_same_dict(back.model, ck.model);
  check_same_dict(back.optimizer, ck.optimizer);
  check_same_dict(back.scheduler, ck.scheduler);
  check_same_dict(back.sampler, ck.sampler);
  check_same_dict(back.grad_scaler, ck.grad_scaler);
  CHECK(back.rng == ck.rng);
  CHECK(back.epoch == 3);
  CHECK(back.global_step == 12345678901LL);
  CHECK(back.sampler_position == 640);
  CHECK(back.metadata == ck.metadata);
  CHECK(back.metadata.at("binary").size() == 4);
}

TEST_CASE("checkpoint: capture_rng and restore_rng replay the same random numbers", "[cpu][checkpoint]") {
  Generator other(77);
  manual_seed(1234);
  (void)rand({10}, {.dtype = DType::f32});  // move both off their starting offsets
  (void)rand({6}, {.dtype = DType::f32}, other);
  serialize::Checkpoint ck;
  serialize::capture_rng(ck, {{"other", &other}});
  const std::vector<float> want_default = rand({33}, {.dtype = DType::f32}).to_vector<float>();
  const std::vector<float> want_other = rand({5}, {.dtype = DType::f32}, other).to_vector<float>();

  TempDir dir;
  serialize::save_checkpoint(ck, dir.file("rng.ckpt"));
  manual_seed(999);  // scramble both
  other.manual_seed(5);
  const serialize::Checkpoint back = serialize::load_checkpoint(dir.file("rng.ckpt"));
  serialize::restore_rng(back, {{"other", &other}});
  CHECK(rand({33}, {.dtype = DType::f32}).to_vector<float>() == want_default);
  CHECK(rand({5}, {.dtype = DType::f32}, other).to_vector<float>() == want_other);

  // A generator the checkpoint lacks is an error naming it, and nothing is changed.
  Generator missing(3);
  const uint64_t offset_before = default_generator().offset();
  const std::string err = error_of([&] { serialize::restore_rng(back, {{"augment", &missing}}); });
  CHECK_THAT(err, Catch::Contains("'augment'"));
  CHECK(default_generator().offset() == offset_before);
}

TEST_CASE("checkpoint: corrupting any single byte is detected and located", "[cpu][checkpoint]") {
  TempDir dir(TempStorage::kMemory);  // a file per corrupted byte: milliseconds in memory, seconds on disk
  const std::string good = dir.file("good.ckpt"), bad = dir.file("bad.ckpt");
  serialize::save_checkpoint(small_checkpoint(), good);
  const std::vector<uint8_t> f = read_bytes(good);
  const uint64_t table = le64(f, 24), payload = le64(f, 32);
  const size_t payload_start = 48 + table;
  int undetected = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    std::vector<uint8_t> c = f;
    c[i] ^= static_cast<uint8_t>(1u << (i % 8));
    write_bytes(bad, c);
    const std::string err = error_of([&] { (void)serialize::load_checkpoint(bad); });
    if (err.empty()) {
      if (undetected++ < 5) FAIL_CHECK("flipping a bit of byte " << i << " was not detected");
      continue;
    }
    INFO("byte " << i << ": " << err);
    CHECK_THAT(err, Catch::Contains(bad));
    if (i < 8) {
      CHECK_THAT(err, Catch::Contains("not an ember checkpoint"));
    } else if (i < 12) {
      CHECK_THAT(err, Catch::Contains("format version"));
    } else if (i < 48) {
      CHECK_THAT(err, Catch::Contains("header (bytes [0, 44))"));
    } else if (i < payload_start) {
      CHECK_THAT(err, Catch::Contains("entry table"));
    } else if (i < payload_start + payload) {
      // Inside an entry: the error names the entry and its file byte range; in padding: the payload.
      const bool names_entry =
          err.find("entry '") != std::string::npos && err.find("file bytes [") != std::string::npos;
      const bool names_payload = err.find("payload (bytes [") != std::string::npos;
      CHECK((names_entry || names_payload));
    } else {
      CHECK_THAT(err, Catch::Contains("payload"));
    }
  }
  CHECK(undetected == 0);
}

TEST_CASE("checkpoint: a payload corruption names the entry and its byte range", "[cpu][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("c.ckpt");
  Tensor w = random_tensor({100}, DType::f32, 11);
  serialize::save_tensors({{"aaa", random_tensor({3}, DType::f32, 10)}, {"weights", w}}, path);
  std::vector<uint8_t> f = read_bytes(path);
  const uint64_t table = le64(f, 24);
  // "weights" is the second entry: 64-byte aligned after 12 bytes of "aaa", so payload [64, 464).
  const size_t start = 48 + table + 64;
  f[start + 123] ^= 0x40;
  write_bytes(path, f);
  const std::string err = error_of([&] { (void)serialize::load_tensors(path); });
  CHECK_THAT(err, Catch::Contains("entry 'weights'"));
  CHECK_THAT(err, Catch::Contains("file bytes [" + std::to_string(start) + ", " + std::to_string(start + 400) + ")"));
  CHECK_THAT(err, Catch::Contains("CRC-32"));
}

TEST_CASE("checkpoint: truncation at every length is an error", "[cpu][checkpoint]") {
  TempDir dir(TempStorage::kMemory);  // a file per length: milliseconds in memory, seconds on disk
  const std::string good = dir.file("good.ckpt"), cut = dir.file("cut.ckpt");
  serialize::save_checkpoint(small_checkpoint(), good);
  const std::vector<uint8_t> f = read_bytes(good);
  for (size_t n = 0; n < f.size(); ++n) {
    write_bytes(cut, std::vector<uint8_t>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n)));
    const std::string err = error_of([&] { (void)serialize::load_checkpoint(cut); });
    INFO("truncated to " << n << " of " << f.size() << " bytes: " << err);
    REQUIRE_FALSE(err.empty());
    if (n < 8) {
      CHECK_THAT(err, Catch::Contains("not an ember checkpoint"));
    } else {
      CHECK_THAT(err, Catch::Contains("truncated"));
      if (n >= 48) CHECK_THAT(err, Catch::Contains("the file has " + std::to_string(n)));
    }
  }
  // Extra bytes after the end are an error too.
  std::vector<uint8_t> longer = f;
  longer.push_back(0);
  write_bytes(cut, longer);
  CHECK_THAT(error_of([&] { (void)serialize::load_checkpoint(cut); }), Catch::Contains("1 unexpected bytes"));
}

TEST_CASE("checkpoint: wrong magic, wrong version and missing files are named", "[cpu][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  serialize::save_checkpoint(small_checkpoint(), path);
  const std::vector<uint8_t> f = read_bytes(path);

  std::vector<uint8_t> magic = f;
  std::memcpy(magic.data(), "PK\x03\x04zip!", 8);
  write_bytes(path, magic);
  std::string err = error_of([&] { (void)serialize::load_checkpoint(path); });
  CHECK_THAT(err, Catch::Contains("not an ember checkpoint"));
  CHECK_THAT(err, Catch::Contains("\"EMBERCKP\""));
  CHECK_THAT(err, Catch::Contains("PK\\x03\\x04zip!"));

  std::vector<uint8_t> version = f;
  put_le32(version, 8, 7);
  put_le32(version, 44, crc32_ref(version.data(), 44));  // a well-formed file of a future version
  write_bytes(path, version);
  err = error_of([&] { (void)serialize::load_checkpoint(path); });
  CHECK_THAT(err, Catch::Contains("format version 7"));
  CHECK_THAT(err, Catch::Contains("reads version 1"));

  err = error_of([&] { (void)serialize::load_checkpoint(dir.file("nope.ckpt")); });
  CHECK_THAT(err, Catch::Contains("nope.ckpt"));
  CHECK_THAT(err, Catch::Contains("No such file"));
}

TEST_CASE("checkpoint: load_checkpoint names unexpected and missing entries", "[cpu][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("e.ckpt");
  serialize::save_tensors({{"epoch", random_tensor({}, DType::i64, 1, 0, 9)},
                           {"global_step", random_tensor({}, DType::i64, 2, 0, 9)},
                           {"sampler_position", random_tensor({}, DType::i64, 3, 0, 9)},
                           {"weights", random_tensor({2}, DType::f32, 4)}},
                          path);
  CHECK_THAT(error_of([&] { (void)serialize::load_checkpoint(path); }), Catch::Contains("unexpected entry 'weights'"));
  serialize::save_tensors({{"model/w", random_tensor({2}, DType::f32, 4)}}, path);
  CHECK_THAT(error_of([&] { (void)serialize::load_checkpoint(path); }), Catch::Contains("missing entry 'epoch'"));
  serialize::save_tensors({{"epoch", random_tensor({2}, DType::i64, 1, 0, 9)}}, path);
  CHECK_THAT(error_of([&] { (void)serialize::load_checkpoint(path); }), Catch::Contains("'epoch' should be a 0-d i64"));
}

namespace {
// A saved checkpoint whose bytes a failed save must leave as they are, and a larger one to save over it.
struct SavedCheckpoint {
  TempDir dir;
  std::string path = dir.file("keep.ckpt");
  serialize::Checkpoint first = small_checkpoint();
  std::vector<uint8_t> before;
  serialize::Checkpoint big;
  SavedCheckpoint() {
    serialize::save_checkpoint(first, path);
    before = read_bytes(path);
    big.model["huge"] = random_tensor({1 << 18}, DType::f32, 5);  // 1 MiB
  }
};
}  // namespace

TEST_CASE("checkpoint: a failed save leaves the previous file intact", "[cpu][checkpoint]") {
  SavedCheckpoint saved;
  TempDir& dir = saved.dir;
  const std::string& path = saved.path;
  const serialize::Checkpoint& first = saved.first;
  const std::vector<uint8_t>& before = saved.before;
  const serialize::Checkpoint& big = saved.big;

  SECTION("an invalid entry fails before any file is touched") {
    serialize::Checkpoint bad = first;
    bad.model["undefined"] = Tensor();
    CHECK_THAT(error_of([&] { serialize::save_checkpoint(bad, path); }), Catch::Contains("'model/undefined'"));
  }
  SECTION("the write fails half way (file size limit)") {
    // RLIMIT_FSIZE makes write() fail with EFBIG part way through the payload, as a full disk
    // would; SIGXFSZ must be ignored for that (its default action kills the process).
    struct rlimit old {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    const std::string err = error_of([&] { serialize::save_checkpoint(big, path); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK_THAT(err, Catch::Contains(path + ".tmp"));
    CHECK_THAT(err, Catch::Contains("failed after"));
  }
  SECTION("the temporary file cannot be created") {
    fs::create_directories(path + ".tmp");  // a directory in the way of <path>.tmp
    CHECK_THAT(error_of([&] { serialize::save_checkpoint(big, path); }),
               Catch::Contains("cannot create temporary file"));
    fs::remove(path + ".tmp");
  }
  SECTION("the target directory does not exist") {
    const std::string missing = dir.file("no/such/dir/x.ckpt");
    CHECK_THAT(error_of([&] { serialize::save_checkpoint(big, missing); }), Catch::Contains("no/such/dir/x.ckpt.tmp"));
  }
  CHECK(read_bytes(path) == before);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const serialize::Checkpoint back = serialize::load_checkpoint(path);
  check_same_dict(back.model, first.model);
  CHECK(back.epoch == first.epoch);
  // And a later good save replaces it.
  serialize::save_checkpoint(big, path);
  check_same_dict(serialize::load_checkpoint(path).model, big.model);
}

TEST_CASE("checkpoint: a save onto a full disk (ENOSPC) leaves the previous file intact", "[cpu][checkpoint]") {
  // <path>.tmp is a link to /dev/full, where every write fails with ENOSPC: the save opens and
  // truncates it as its temporary like any file, and the first write fails as on a full disk.
  if (::access("/dev/full", W_OK) != 0) EMBER_SKIP("/dev/full is not writable here: no full disk to write to");
  SavedCheckpoint saved;
  const std::string& path = saved.path;
  fs::create_symlink("/dev/full", path + ".tmp");
  const std::string err = error_of([&] { serialize::save_checkpoint(saved.big, path); });
  CHECK_THAT(err, Catch::Contains(path + ".tmp") && Catch::Contains("No space left on device"));
  CHECK_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));  // the temporary (the link) removed
  CHECK(read_bytes(path) == saved.before);
  check_same_dict(serialize::load_checkpoint(path).model, saved.first.model);
}
