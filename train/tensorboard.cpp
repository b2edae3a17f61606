// TensorBoard event files (train/tensorboard.h). The message layouts follow TensorFlow's
// event.proto, summary.proto, tensor.proto and TensorBoard's plugins/hparams/plugin_data.proto;
// field numbers are named where they are used.
#include <ember/train/tensorboard.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include <ember/core/error.h>

namespace ember::train {

namespace fs = std::filesystem;

namespace tfrecord {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

ReadResult read_records(const std::string& s) {
  ReadResult r;
  size_t at = 0;
  while (at < s.size()) {
    if (s.size() - at < 12) {
      r.truncated = true;
      break;
    }
    const uint64_t len = get_le(s.data() + at, 8);
    EMBER_CHECK(get_le(s.data() + at + 8, 4) == masked_crc32c(s.data() + at, 8), "TFRecord at byte ", at,
                ": the length's CRC does not match");
    if (s.size() - at - 12 < len + 4) {
      r.truncated = true;
      break;
    }
    const char* data = s.data() + at + 12;
    EMBER_CHECK(get_le(data + len, 4) == masked_crc32c(data, len), "TFRecord at byte ", at,
                ": the data's CRC does not match");
    r.records.emplace_back(data, len);
    at += 12 + len + 4;
  }
  return r;
}

}  // namespace tfrecord

namespace pb {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_varint_field(std::string& out, uint32_t field, uint64_t v) {
  put_key(out, field, 0);
  put_varint(out, v);
}

void put_double_field(std::string& out, uint32_t field, double v) {
  put_key(out, field, 1);
  const auto bits = std::bit_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((bits >> (8 * i)) & 0xFF);
}

void put_bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace pb

namespace tb_event {
namespace {

// Event: wall_time 1 (double), step 2 (int64), file_version 3, summary 5.
std::string event(double wall_time, int64_t step, const std::string& summary) {
  std::string e;
  pb::put_double_field(e, 1, wall_time);
  if (step != 0) pb::put_varint_field(e, 2, static_cast<uint64_t>(step));
  pb::put_bytes_field(e, 5, summary);
  return e;
}

// SummaryMetadata: plugin_data 1 (PluginData: plugin_name 1, content 2), data_class 4.
std::string metadata(const std::string& plugin, const std::string& content, int data_class) {
  std::string plugin_data;
  pb::put_bytes_field(plugin_data, 1, plugin);
  if (!content.empty()) pb::put_bytes_field(plugin_data, 2, content);
  std::string m;
  pb::put_bytes_field(m, 1, plugin_data);
  if (data_class != 0) pb::put_varint_field(m, 4, static_cast<uint64_t>(data_class));
  return m;
}

// Summary { repeated Value value = 1 }; Value: tag 1, tensor 8, metadata 9.
std::string summary(const std::string& tag, const std::string& tensor, const std::string& meta) {
  std::string v;
  pb::put_bytes_field(v, 1, tag);
  pb::put_bytes_field(v, 8, tensor);  // in field order, as protobuf's own serializers write
  pb::put_bytes_field(v, 9, meta);
  std::string s;
  pb::put_bytes_field(s, 1, v);
  return s;
}

// TensorProto of a 0-d value: dtype 1, tensor_shape 2 (empty: a scalar), float_val 5 (packed).
// DT_FLOAT, as tf.summary.scalar writes: TensorBoard's data server (its default loader) shows no
// DT_DOUBLE scalar at all (tensorboard 2.21, tried on 2026-11-29), so the values are rounded to
// float here; metrics.jsonl keeps the doubles.
constexpr int kDtFloat = 1;
std::string scalar_tensor(double v) {
  std::string t;
  pb::put_varint_field(t, 1, kDtFloat);
  pb::put_bytes_field(t, 2, "");
  std::string packed;
  const auto bits = std::bit_cast<uint32_t>(static_cast<float>(v));
  for (int i = 0; i < 4; ++i) packed += static_cast<char>((bits >> (8 * i)) & 0xFF);
  pb::put_bytes_field(t, 5, packed);
  return t;
}

// The hparams plugin's summaries carry a placeholder tensor: its NULL_TENSOR, an empty DT_FLOAT of
// shape (0,) (TensorShapeProto: dim 2; Dim: size 1).
std::string null_tensor() {
  std::string dim, shape, tensor;
  pb::put_varint_field(dim, 1, 0);
  pb::put_bytes_field(shape, 2, dim);
  pb::put_varint_field(tensor, 1, kDtFloat);
  pb::put_bytes_field(tensor, 2, shape);
  return tensor;
}

// google.protobuf.Value: number_value 2 (double), string_value 3, bool_value 4.
std::string proto_value(const HParamValue& v) {
  std::string out;
  if (const double* d = std::get_if<double>(&v)) pb::put_double_field(out, 2, *d);
  else if (const std::string* s = std::get_if<std::string>(&v)) pb::put_bytes_field(out, 3, *s);
  else pb::put_varint_field(out, 4, std::get<bool>(v) ? 1 : 0);
  return out;
}

}  // namespace

std::string file_version(double wall_time) {
  std::string e;
  pb::put_double_field(e, 1, wall_time);
  pb::put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  constexpr int kDataClassScalar = 1;
  return event(wall_time, step, summary(tag, scalar_tensor(value), metadata("scalars", "", kDataClassScalar)));
}

std::string hparams(const std::vector<std::pair<std::string, HParamValue>>& hparams, double start_time,
                    double wall_time) {
  // SessionStartInfo: hparams 1 (map<string, Value>: entries with key 1, value 2), start_time_secs 5.
  std::string start;
  for (const auto& [key, value] : hparams) {
    std::string entry;
    pb::put_bytes_field(entry, 1, key);
    pb::put_bytes_field(entry, 2, proto_value(value));
    pb::put_bytes_field(start, 1, entry);
  }
  pb::put_double_field(start, 5, start_time);
  // HParamsPluginData: version 1 (0, left out), session_start_info 3.
  std::string plugin_data;
  pb::put_bytes_field(plugin_data, 3, start);
  return event(wall_time, 0,
               summary("_hparams_/session_start_info", null_tensor(), metadata("hparams", plugin_data, 0)));
}

std::string session_end(SessionStatus status, double end_time, double wall_time) {
  // SessionEndInfo: status 1 (enum), end_time_secs 2; HParamsPluginData: session_end_info 4.
  std::string end;
  pb::put_varint_field(end, 1, static_cast<uint64_t>(status));
  pb::put_double_field(end, 2, end_time);
  std::string plugin_data;
  pb::put_bytes_field(plugin_data, 4, end);
  return event(wall_time, 0, summary("_hparams_/session_end_info", null_tensor(), metadata("hparams", plugin_data, 0)));
}

int64_t step_of(const std::string& e) {
  size_t i = 0;
  const auto varint = [&](const char* what) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      EMBER_CHECK(i < e.size() && shift < 64, "TensorBoard event: a truncated ", what, " at byte ", i, " of ",
                  e.size());
      const auto b = static_cast<unsigned char>(e[i++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  int64_t step = 0;
  while (i < e.size()) {
    const size_t at = i;
    const uint64_t key = varint("field key");
    const uint64_t field = key >> 3, type = key & 7;
    uint64_t skip = 0;
    if (type == 0) {
      const uint64_t v = varint("varint");
      if (field == 2) step = static_cast<int64_t>(v);
    } else if (type == 1) {
      skip = 8;
    } else if (type == 5) {
      skip = 4;
    } else if (type == 2) {
      skip = varint("length");
    } else {
      EMBER_FAIL("TensorBoard event: wire type ", type, " of field ", field, " at byte ", at,
                 " is not one ember reads");
    }
    EMBER_CHECK(skip <= e.size() - i, "TensorBoard event: field ", field, " at byte ", at, " runs past the end (", skip,
                " bytes, ", e.size() - i, " left)");
    i += skip;
  }
  return step;
}

}  // namespace tb_event

std::vector<std::pair<std::string, double>> tensorboard_scalars(const EpochMetrics& m) {
  std::vector<std::pair<std::string, double>> out;
  const bool ddp = m.comm_seconds != 0 || m.comm_exposed_seconds != 0, fp16 = m.loss_scale != 0;
  for (const auto& [key, value] : metric_values(m)) {
    const std::string k = key;
    std::string group;
    if (k == "train_loss" || k == "test_loss") group = "loss";
    else if (k == "test_acc") group = "accuracy";
    else if (k == "lr") group = "optim";
    else if (k == "images_per_second") group = "throughput";
    else if (k == "epoch_seconds" || k == "eval_seconds") group = "time";
    else if (k.rfind("comm_", 0) == 0) group = ddp ? "comm" : "";
    else if (k == "loss_scale" || k == "skipped_steps") group = fp16 ? "amp" : "";
    else if (k == "nonfinite_steps") group = "amp";
    else if (k.rfind("gpu_", 0) == 0) group = "gpu";
    else if (k == "cpu_seconds" || k == "loader_cpu_seconds" || k == "pool_wait_seconds") group = "cpu";
    else group = "phase";
    if (!group.empty()) out.emplace_back(group + "/" + k, value);
  }
  return out;
}

namespace {

void flatten(const nlohmann::ordered_json& obj, const std::string& prefix, const std::vector<std::string>& skip,
             std::vector<std::pair<std::string, HParamValue>>& out) {
  for (const auto& [key, v] : obj.items()) {
    if (prefix.empty() && std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    const std::string path = prefix + key;
    if (v.is_object()) flatten(v, path + ".", {}, out);
    else if (v.is_boolean()) out.emplace_back(path, v.get<bool>());
    else if (v.is_number()) out.emplace_back(path, v.get<double>());
    else if (v.is_string()) out.emplace_back(path, v.get<std::string>());
    else if (v.is_array()) out.emplace_back(path, v.dump());
  }
}

}  // namespace

std::vector<std::pair<std::string, HParamValue>> flatten_hparams(const std::string& json_text,
                                                                 const std::vector<std::string>& skip) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  EMBER_CHECK(j.is_object(), "flatten_hparams: not a JSON object");
  std::vector<std::pair<std::string, HParamValue>> out;
  flatten(j, "", skip, out);
  return out;
}

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  EMBER_CHECK(!ec, "TensorBoard: cannot create '", dir, "': ", ec.message());
  const double t = now_seconds();
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host_name() + "." +
                            std::to_string(::getpid())))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int err = errno;
  EMBER_CHECK(fd_ >= 0, "TensorBoard: cannot create '", path_, "': ", std::strerror(err));
  pending_ = tfrecord::frame(tb_event::file_version(t));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (...) {  // a destructor must not throw; flush() in the run's path reports errors
  }
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  pending_ += tfrecord::frame(tb_event::scalar(tag, value, step, now_seconds()));
}

void TensorBoardWriter::add_hparams(const std::vector<std::pair<std::string, HParamValue>>& hparams) {
  const double t = now_seconds();
  pending_ += tfrecord::frame(tb_event::hparams(hparams, t, t));
}

void TensorBoardWriter::add_session_end(SessionStatus status) {
  const double t = now_seconds();
  pending_ += tfrecord::frame(tb_event::session_end(status, t, t));
}

void TensorBoardWriter::add_epoch(const EpochMetrics& m, int64_t step) {
  for (const auto& [tag, value] : tensorboard_scalars(m)) add_scalar(tag, value, step);
}

void TensorBoardWriter::flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t w = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    const int err = w < 0 ? errno : EIO;
    EMBER_CHECK(w > 0, "TensorBoard: writing '", path_, "' failed: ", std::strerror(err));
    done += static_cast<size_t>(w);
  }
  pending_.clear();
}

int64_t prune_event_files(const std::string& dir, int64_t max_step) {
  int64_t dropped = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) != 0 || !entry.is_regular_file(ec)) continue;
    const std::string path = entry.path().string();
    std::ifstream in(path, std::ios::binary);
    EMBER_CHECK(in.good(), "TensorBoard: cannot read '", path, "' to drop the epochs the resume replaces");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string kept;
    int64_t n = 0;
    try {
      const tfrecord::ReadResult r = tfrecord::read_records(bytes);
      for (const std::string& rec : r.records) {
        if (tb_event::step_of(rec) > max_step) ++n;
        else kept += tfrecord::frame(rec);
      }
      if (r.truncated) ++n;
    } catch (const Error& e) {
      EMBER_FAIL("TensorBoard: '", path, "': ", e.what(), " (the file is left as it was)");
    }
    if (n == 0) continue;
    write_file_atomic(path, kept);
    dropped += n;
  }
  EMBER_CHECK(!ec, "TensorBoard: cannot list '", dir, "': ", ec.message());
  return dropped;
}

}  // namespace ember::train
