// Fuzz harness: the checkpoint reader (serialize/checkpoint.h load_checkpoint, and load_tensors
// underneath). The input is the file. A checkpoint that loads is saved again and must load back
// bit for bit the same; a refusal is an ember::Error naming the file.
//
// Nearly every byte of a checkpoint is covered by a CRC-32, so random mutations would stop at the
// header's checksum. Under libFuzzer a custom mutator therefore rewrites the checksums of a mutated
// input (header, entry table, each entry whose bytes lie inside the payload, the payload trailer)
// in 7 of 8 mutations: the inputs stay real files, and the parser behind the checks gets fuzzed.
#include <zlib.h>

#include <cstring>
#include <vector>

#include <ember/serialize/checkpoint.h>

#include "fuzz_support.h"

namespace ember::fuzz {

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> b(static_cast<size_t>(t.numel()) * t.element_size());
  if (!b.empty()) std::memcpy(b.data(), t.contiguous().data_ptr(), b.size());
  return b;
}

bool same(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.dtype() != ib->second.dtype() ||
        ia->second.sizes() != ib->second.sizes() || bytes_of(ia->second) != bytes_of(ib->second))
      return false;
  }
  return true;
}

bool same(const serialize::Checkpoint& a, const serialize::Checkpoint& b) {
  return same(a.model, b.model) && same(a.optimizer, b.optimizer) && same(a.scheduler, b.scheduler) &&
         same(a.sampler, b.sampler) && same(a.grad_scaler, b.grad_scaler) && a.rng == b.rng && a.epoch == b.epoch &&
         a.global_step == b.global_step && a.sampler_position == b.sampler_position && a.metadata == b.metadata;
}

}  // namespace

bool fuzz_one(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("input.ckpt", data, size);
  serialize::Checkpoint ck;
  try {
    ck = serialize::load_checkpoint(path);
  } catch (const Error& e) {
    expect_names(e, path);
    return false;
  }
  const std::string again = (scratch_dir() / "again.ckpt").string();
  serialize::save_checkpoint(ck, again);
  if (!same(ck, serialize::load_checkpoint(again)))
    violation("a loaded checkpoint, saved and loaded again, differs from what was loaded");
  return true;
}

}  // namespace ember::fuzz

#ifdef EMBER_LIBFUZZER
namespace {

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t crc(const uint8_t* p, uint64_t n) {
  return static_cast<uint32_t>(::crc32(::crc32(0, nullptr, 0), p, static_cast<uInt>(n)));
}

// Rewrites every checksum the layout of `p` lets us find (serialize/checkpoint.h's format).
void fix_checksums(uint8_t* p, size_t size) {
  if (size < 48 || std::memcmp(p, "EMBERCKP", 8) != 0) return;
  const uint64_t table_bytes = get_u64(p + 24), payload_bytes = get_u64(p + 32);
  const bool whole = table_bytes <= size && payload_bytes <= size && 48 + table_bytes + payload_bytes + 4 <= size;
  if (whole) {
    uint8_t* table = p + 48;
    const uint8_t* payload = table + table_bytes;
    uint64_t pos = 0;
    auto have = [&](uint64_t n) { return n <= table_bytes - pos; };
    for (uint64_t count = get_u64(p + 16), i = 0; i < count; ++i) {
      if (!have(4)) break;
      const uint64_t name_len = get_u32(table + pos);
      pos += 4;
      if (!have(name_len + 8)) break;
      pos += name_len + 4;  // name, dtype
      const uint64_t ndim = get_u32(table + pos);
      pos += 4;
      if (ndim > 64 || !have(ndim * 8 + 20)) break;
      pos += ndim * 8;
      const uint64_t offset = get_u64(table + pos), length = get_u64(table + pos + 8);
      pos += 16;
      if (offset <= payload_bytes && length <= payload_bytes - offset)
        put_u32(table + pos, crc(payload + offset, length));
      pos += 4;
    }
    put_u32(p + 40, crc(table, table_bytes));
    put_u32(p + 48 + table_bytes + payload_bytes, crc(payload, payload_bytes));
  }
  put_u32(p + 44, crc(p, 44));
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) fix_checksums(data, size);
  return size;
}
#endif
