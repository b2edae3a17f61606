#pragma once
// TensorBoard event files: events.out.tfevents.<time>.<host>.<pid>, as TensorFlow's and PyTorch's
// SummaryWriter write them, read by `tensorboard --logdir` (docs/experiments.md).
//
//   train::TensorBoardWriter tb("runs/mnist-20261129-101500");
//   tb.add_hparams({{"optim.lr", 0.1}, {"precision", std::string("bf16")}});
//   tb.add_epoch(metrics, global_step);    // every number of the metrics.jsonl line, one tag each
//   tb.flush();                            // one write(2): a killed run's file reads up to here
//
// The file is a TFRecord stream: each record is the uint64 length (little-endian), the masked
// CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data. Each record's data is a
// serialized tensorflow.Event protocol buffer; the first holds file_version "brain.Event:2".
// Scalars are Summary values with plugin "scalars" and a 0-d DT_FLOAT tensor, as tf.summary.scalar
// writes them (TensorBoard's data server shows no DT_DOUBLE scalar; metrics.jsonl keeps the
// doubles, TensorBoard gets them rounded to float); hyperparameters are the HParams plugin's
// SessionStartInfo (tag "_hparams_/session_start_info"), so TensorBoard's HPARAMS tab filters runs
// by them. The few protobuf messages and the CRC are encoded here by hand (about 150 lines, no
// protobuf or crc32c dependency); tests/train/test_tensorboard.cpp checks the bytes and
// tests/peer/tensorboard_reader.py reads the files with the tensorboard package's own reader.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ember/train/metrics.h>

namespace ember::train {

namespace tfrecord {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, continuing `crc` (0 to start):
/// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, of crc32c(data).
uint32_t masked_crc32c(const void* data, size_t n);
/// One record: length, masked CRC of the length, data, masked CRC of the data.
std::string frame(const std::string& data);

/// Reads the records of a TFRecord stream in order. A stream cut inside a record (a killed writer)
/// ends after the last whole record: `truncated` is then true. A record whose CRC does not match
/// throws an ember::Error naming the record's offset.
struct ReadResult {
  std::vector<std::string> records;
  bool truncated = false;
};
ReadResult read_records(const std::string& stream);

}  // namespace tfrecord

/// Protocol-buffer wire format, the parts the event messages need.
namespace pb {
void put_varint(std::string& out, uint64_t v);
/// Field key: (field << 3) | wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void put_key(std::string& out, uint32_t field, uint32_t wire_type);
void put_varint_field(std::string& out, uint32_t field, uint64_t v);
void put_double_field(std::string& out, uint32_t field, double v);  // fixed64, little-endian
void put_bytes_field(std::string& out, uint32_t field, const std::string& bytes);  // strings and messages
}  // namespace pb

/// A hyperparameter's value: a number, a string or a bool (google.protobuf.Value's kinds).
using HParamValue = std::variant<double, std::string, bool>;

/// How a run ended, for the HParams plugin's session_end_info (plugin_data.proto's Status): its
/// table shows it beside the run. A run stopped by a signal writes none: it is resumable, and
/// TensorBoard shows it as unknown until a later session ends it.
enum class SessionStatus { success = 1, failure = 2 };

/// The serialized tensorflow.Event messages the writer writes (exposed for the tests).
namespace tb_event {
std::string file_version(double wall_time);
std::string scalar(const std::string& tag, double value, int64_t step, double wall_time);
std::string hparams(const std::vector<std::pair<std::string, HParamValue>>& hparams, double start_time,
                    double wall_time);
std::string session_end(SessionStatus status, double end_time, double wall_time);
/// The step of a serialized Event (0 when it has none, as file_version and hparams events). A
/// message that is not valid wire format throws an ember::Error naming the byte offset.
int64_t step_of(const std::string& event);
}  // namespace tb_event

/// A resume replaces the timeline after its checkpoint: every events.out.tfevents.* file in `dir`
/// is rewritten (atomically, through a temporary file and a rename) without its events after
/// global step `max_step`, so TensorBoard does not show the epochs the resumed run trains again
/// twice. A file cut inside a record (a killed writer) loses that partial record too. Returns the
/// number of events dropped; an unreadable or corrupt file throws an ember::Error naming it and
/// is left as it was.
int64_t prune_event_files(const std::string& dir, int64_t max_step);

/// The scalar tags of one metrics.jsonl line: "<group>/<key>", key the line's key, for every
/// number the line holds except comm_* when both are 0 (no DDP), loss_scale and skipped_steps when
/// loss_scale is 0 (no fp16), and the gpu_* keys only when measured. Groups: loss, accuracy, optim,
/// throughput, time, phase, comm, amp, cpu, gpu.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const EpochMetrics& m);

/// The flattened hyperparameters of a JSON object (a run's config.json): "optim.lr" -> 0.1, ...;
/// numbers, strings and bools as they are, lists as their JSON text, nulls left out, and the
/// objects named in `skip` (top-level keys, e.g. "provenance") left out.
std::vector<std::pair<std::string, HParamValue>> flatten_hparams(const std::string& json_text,
                                                                 const std::vector<std::string>& skip = {});

class TensorBoardWriter {
 public:
  /// Creates `dir` (and its parents) and events.out.tfevents.<seconds>.<host>.<pid> in it, and
  /// writes the file_version record. An error names the path and the reason.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes (errors ignored) and closes
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }
  /// Queue records; flush() writes them.
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_hparams(const std::vector<std::pair<std::string, HParamValue>>& hparams);
  /// The HParams session_end_info: the run finished (success) or failed.
  void add_session_end(SessionStatus status);
  /// tensorboard_scalars(m) at `step`.
  void add_epoch(const EpochMetrics& m, int64_t step);
  /// Writes the queued records with one write(2) (a kill leaves the file whole up to the previous
  /// flush, or cut inside this one's records, which readers skip). Errors name the file.
  void flush();

 private:
  std::string path_;
  int fd_ = -1;
  std::string pending_;
};

}  // namespace ember::train
