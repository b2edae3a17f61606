#pragma once
// Checkpoints: one file holding everything a training run needs to continue exactly where it
// stopped — model and optimizer state dicts, the LR schedule's state, RNG states, the epoch, the
// sampler's position, and free-form metadata.
//
// File format (version 1; every integer little-endian):
//
//   offset 0   header, 48 bytes
//              [0, 8)   magic "EMBERCKP"
//              [8, 12)  u32 format version (kCheckpointVersion)
//              [12,16)  u32 reserved (0)
//              [16,24)  u64 number of entries
//              [24,32)  u64 T: bytes in the entry table
//              [32,40)  u64 P: bytes in the payload
//              [40,44)  u32 CRC-32 of the entry table
//              [44,48)  u32 CRC-32 of header bytes [0, 44)
//   offset 48  entry table, T bytes; per entry:
//              u32 name length, name bytes (UTF-8), u32 dtype code (f32=1 f64=2 f16=3 bf16=4 i32=5
//              i64=6 u8=7 bool=8), u32 ndim, ndim x i64 sizes, u64 payload offset, u64 byte length,
//              u32 CRC-32 of the entry's bytes
//   offset 48+T  payload, P bytes: each entry's raw row-major little-endian elements, starting at
//              a multiple of 64 bytes (zero padding between entries)
//   offset 48+T+P  u32 CRC-32 (zlib crc32) of the whole payload
//
// Writing goes to "<path>.tmp", which is fsync'd, renamed over <path>, and the directory fsync'd:
// a crash or a failed write leaves the previous <path> untouched. Loading checks the magic, the
// version, every length and entry bound and every checksum, and an error names the file, the entry
// and the byte range that is wrong.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/core/state_dict.h>

namespace ember::serialize {

/// The format version this build writes and reads.
constexpr uint32_t kCheckpointVersion = 1;
/// Size of the fixed header at the start of every checkpoint file.
constexpr uint64_t kCheckpointHeaderBytes = 48;

/// Everything one checkpoint holds. Sections are saved under prefixed entry names ("model/...",
/// "optimizer/...", "scheduler/...", "sampler/...", "grad_scaler/...", "rng/<name>", "meta/<key>", plus the scalars
/// "epoch", "global_step" and "sampler_position").
struct Checkpoint {
  StateDict model;  // Module::state_dict()
  StateDict optimizer;  // the optimizer's state dict
  StateDict scheduler;  // the LR schedule's state dict
  StateDict sampler;  // the sampler's/loader's own state (seed, epoch, ...), when it has one
  StateDict grad_scaler;  // amp::GradScaler::state_dict() under mixed precision (empty otherwise)
  /// Generator states by name; capture_rng() fills "default" from default_generator().
  std::map<std::string, RngState> rng;
  int64_t epoch = 0;  // epochs completed
  int64_t global_step = 0;  // optimizer steps taken
  int64_t sampler_position = 0;  // samples already consumed in the current epoch (0 between epochs)
  /// Free-form text (model name, flags, git hash, ...).
  std::map<std::string, std::string> metadata;
};

/// Records default_generator() as rng["default"] and each (name, generator) pair as rng[name].
void capture_rng(Checkpoint& ckpt, const std::vector<std::pair<std::string, const Generator*>>& others = {});
/// Restores default_generator() from rng["default"] and each named generator from rng[name]; an
/// error names any generator the checkpoint does not hold (nothing is changed then).
void restore_rng(const Checkpoint& ckpt, const std::vector<std::pair<std::string, Generator*>>& others = {});

/// Writes `ckpt` to `path` atomically (see the top of this file). Tensors may live on any device;
/// undefined tensors and empty names are errors naming the entry. Throws ember::Error naming the
/// path and the system error when the file cannot be written; <path> is then unchanged.
void save_checkpoint(const Checkpoint& ckpt, const std::string& path);
/// Reads and verifies a checkpoint; every tensor is placed on `device`.
Checkpoint load_checkpoint(const std::string& path, Device device = Device::cpu());

/// The layer underneath: any named tensors in the same file format (ordered by name).
void save_tensors(const StateDict& entries, const std::string& path);
StateDict load_tensors(const std::string& path, Device device = Device::cpu());

}  // namespace ember::serialize
