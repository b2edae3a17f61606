// TensorBoard event files (train/tensorboard.h): CRC-32C of known vectors, TensorFlow's masked
// CRC, the TFRecord framing and the protobuf encoding against bytes computed by hand or written by
// the tensorboard package's own Python writer (the hex strings below, produced once with
// tensorboard 2.21: RecordWriter(b).write(b"ember"); Event(wall_time=1.5, step=7, a scalar value as
// a DT_FLOAT tensor).SerializeToString()), and a writer's file read back by a small protobuf reader here. The
// tensorboard package itself reads the files in tests/peer/tensorboard_reader.py.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/train/tensorboard.h>
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string bytes(std::initializer_list<int> b) {
  std::string out;
  for (int c : b) out += static_cast<char>(c);
  return out;
}

// A protobuf message read back: each field number's values in order (varints as numbers, fixed64
// and fixed32 as their raw bytes, length-delimited as their bytes).
struct Field {
  uint32_t wire = 0;
  uint64_t varint = 0;
  std::string data;
};
using Message = std::multimap<uint32_t, Field>;

uint64_t read_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    REQUIRE(at < s.size());
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  FAIL("varint longer than 10 bytes");
  return 0;
}

Message parse(const std::string& s) {
  Message m;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = read_varint(s, at);
    Field f;
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.wire == 0) {
      f.varint = read_varint(s, at);
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      REQUIRE(at + n <= s.size());
      f.data = s.substr(at, n);
      at += n;
    } else {
      REQUIRE(f.wire == 2);
      const uint64_t n = read_varint(s, at);
      REQUIRE(at + n <= s.size());
      f.data = s.substr(at, n);
      at += n;
    }
    m.emplace(static_cast<uint32_t>(key >> 3), f);
  }
  return m;
}

const Field& one(const Message& m, uint32_t field) {
  REQUIRE(m.count(field) == 1);
  return m.find(field)->second;
}

double as_double(const std::string& raw) {
  REQUIRE(raw.size() == 8);
  double d = 0;
  std::memcpy(&d, raw.data(), 8);  // little-endian host, as the wire format
  return d;
}

struct ReadEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag, plugin;
  double value = 0;
  std::string plugin_content;
};

ReadEvent read_event(const std::string& data) {
  const Message e = parse(data);
  ReadEvent r;
  r.wall_time = as_double(one(e, 1).data);
  if (e.count(2)) r.step = static_cast<int64_t>(one(e, 2).varint);
  if (e.count(3)) r.file_version = one(e, 3).data;
  if (e.count(5)) {
    const Message summary = parse(one(e, 5).data);
    const Message value = parse(one(summary, 1).data);
    r.tag = one(value, 1).data;
    const Message meta = parse(one(value, 9).data);
    const Message plugin = parse(one(meta, 1).data);
    r.plugin = one(plugin, 1).data;
    if (plugin.count(2)) r.plugin_content = one(plugin, 2).data;
    const Message tensor = parse(one(value, 8).data);
    if (one(tensor, 1).varint == 1 && tensor.count(5)) {  // DT_FLOAT, packed float_val (the hparams tensor: none)
      const std::string raw = one(tensor, 5).data;
      REQUIRE(raw.size() == 4);
      float f = 0;
      std::memcpy(&f, raw.data(), 4);
      r.value = f;
    }
  }
  return r;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C of known vectors and TensorFlow's masked CRC", "[cpu]") {
  CHECK(tfrecord::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(tfrecord::crc32c("", 0) == 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(tfrecord::crc32c(zeros.data(), 32) == 0x8A9136AAu);  // RFC 3720, B.4
  CHECK(tfrecord::crc32c(ones.data(), 32) == 0x62A8AB43u);
  // Continuing a CRC over a second part gives the CRC of the whole.
  CHECK(tfrecord::crc32c("6789", 4, tfrecord::crc32c("12345", 5)) == 0xE3069283u);
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8: 0xE3069283 -> 0xc78ab0e5 (tensorboard's masked_crc32c).
  CHECK(tfrecord::masked_crc32c("123456789", 9) == 0xc78ab0e5u);
}

TEST_CASE("tensorboard: a TFRecord is framed as TensorFlow writes it, and read back", "[cpu]") {
  // tensorboard's RecordWriter, writing b"ember": length 5, masked CRC of the length, data, masked CRC.
  const std::string want = unhex("0500000000000000eab2043e656d626572245d90d7");
  CHECK(tfrecord::frame("ember") == want);
  const std::string stream = tfrecord::frame("ember") + tfrecord::frame("") + tfrecord::frame(std::string(300, 'x'));
  tfrecord::ReadResult r = tfrecord::read_records(stream);
  CHECK_FALSE(r.truncated);
  REQUIRE(r.records.size() == 3);
  CHECK(r.records[0] == "ember");
  CHECK(r.records[1].empty());
  CHECK(r.records[2] == std::string(300, 'x'));
  // Cut anywhere inside the last record: the whole ones before it still read.
  for (size_t cut : {stream.size() - 1, stream.size() - 300, stream.size() - 310, want.size() + 16 + 3}) {
    INFO(cut);
    r = tfrecord::read_records(stream.substr(0, cut));
    CHECK(r.truncated);
    CHECK(r.records.size() == 2);
  }
  // A flipped data byte is a CRC error naming the record's offset.
  std::string bad = stream;
  bad[want.size() + 16 + 12 + 5] ^= 1;
  CHECK_THAT(error_of([&] { tfrecord::read_records(bad); }),
             Catch::Contains("TFRecord at byte 37: the data's CRC does not match"));
}

TEST_CASE("tensorboard: protobuf varints, keys and fields match hand-computed bytes", "[cpu]") {
  std::string s;
  pb::put_varint(s, 0);
  CHECK(s == bytes({0x00}));
  s.clear();
  pb::put_varint(s, 1);
  CHECK(s == bytes({0x01}));
  s.clear();
  pb::put_varint(s, 127);
  CHECK(s == bytes({0x7F}));
  s.clear();
  pb::put_varint(s, 128);
  CHECK(s == bytes({0x80, 0x01}));
  s.clear();
  pb::put_varint(s, 300);  // the protobuf documentation's example
  CHECK(s == bytes({0xAC, 0x02}));
  s.clear();
  pb::put_varint(s, static_cast<uint64_t>(-1));  // a negative int64: ten bytes
  CHECK(s == bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
  s.clear();
  pb::put_key(s, 1, 0);
  pb::put_key(s, 5, 2);
  pb::put_key(s, 16, 0);  // field 16: the key needs two bytes
  CHECK(s == bytes({0x08, 0x2A, 0x80, 0x01}));
  s.clear();
  pb::put_varint_field(s, 2, 7);
  CHECK(s == bytes({0x10, 0x07}));
  s.clear();
  pb::put_double_field(s, 1, 1.0);
  CHECK(s == bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F}));
  s.clear();
  pb::put_bytes_field(s, 3, "brain.Event:2");
  CHECK(s == bytes({0x1A, 0x0D}) + "brain.Event:2");
  s.clear();
  pb::put_bytes_field(s, 2, "");
  CHECK(s == bytes({0x12, 0x00}));
}

TEST_CASE("tensorboard: events encode as protobuf's own serializer writes them", "[cpu]") {
  // Event(wall_time=1.5, step=7, summary: tag "loss/train_loss", a 0-d DT_FLOAT tensor 0.25,
  // plugin "scalars", data class SCALAR), serialized by the tensorboard package's protobuf.
  CHECK(tb_event::scalar("loss/train_loss", 0.25, 7, 1.5) ==
        unhex("09000000000000f83f10072a2e0a2c0a0f6c6f73732f747261696e5f6c6f7373420a080112002a040000803e4a0d0a090a077"
              "363616c6172732001"));
  CHECK(tb_event::file_version(2.0) == bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x1A, 0x0D}) + "brain.Event:2");
  // HParams: a SessionStartInfo with each kind of value under plugin "hparams".
  const ReadEvent h = read_event(
      tb_event::hparams({{"optim.lr", 0.1}, {"precision", std::string("bf16")}, {"data.augment", true}}, 100.0, 101.0));
  CHECK(h.tag == "_hparams_/session_start_info");
  CHECK(h.plugin == "hparams");
  CHECK(h.wall_time == 101.0);
  const Message plugin_data = parse(h.plugin_content);
  const Message start = parse(one(plugin_data, 3).data);  // session_start_info
  CHECK(as_double(one(start, 5).data) == 100.0);  // start_time_secs
  std::map<std::string, Message> hp;
  for (auto [it, end] = start.equal_range(1); it != end; ++it) {
    const Message entry = parse(it->second.data);
    hp[one(entry, 1).data] = parse(one(entry, 2).data);
  }
  REQUIRE(hp.size() == 3);
  CHECK(as_double(one(hp["optim.lr"], 2).data) == 0.1);  // number_value
  CHECK(one(hp["precision"], 3).data == "bf16");  // string_value
  CHECK(one(hp["data.augment"], 4).varint == 1);  // bool_value
}

TEST_CASE("tensorboard: the scalars of an epoch are the numbers of its metrics line", "[cpu]") {
  EpochMetrics m;
  m.epoch = 2;
  m.train_loss = 0.5;
  m.test_loss = 0.25;
  m.test_acc = 0.875;
  m.lr = 0.1;
  m.forward_seconds = 1.5;
  std::map<std::string, double> tags;
  for (const auto& [tag, v] : tensorboard_scalars(m)) tags[tag] = v;
  CHECK(tags.at("loss/train_loss") == 0.5);
  CHECK(tags.at("loss/test_loss") == 0.25);
  CHECK(tags.at("accuracy/test_acc") == 0.875);
  CHECK(tags.at("optim/lr") == 0.1);
  CHECK(tags.at("phase/forward_seconds") == 1.5);
  CHECK(tags.count("throughput/images_per_second") == 1);
  CHECK(tags.count("time/epoch_seconds") == 1);
  // No DDP, no fp16, no copy, nothing measured on a GPU: those tags are absent, not 0.
  for (const char* absent : {"comm/comm_seconds", "comm/comm_exposed_seconds", "amp/loss_scale", "amp/skipped_steps",
                             "phase/h2d_seconds", "gpu/gpu_util_percent"})
    CHECK(tags.count(absent) == 0);
  m.comm_exposed_seconds = 0.125;
  m.loss_scale = 65536;
  m.skipped_steps = 3;
  m.gpu_util_percent = 34;
  tags.clear();
  for (const auto& [tag, v] : tensorboard_scalars(m)) tags[tag] = v;
  CHECK(tags.at("comm/comm_exposed_seconds") == 0.125);
  CHECK(tags.at("comm/comm_seconds") == 0);
  CHECK(tags.at("amp/loss_scale") == 65536);
  CHECK(tags.at("amp/skipped_steps") == 3);
  CHECK(tags.at("gpu/gpu_util_percent") == 34);
  CHECK(tags.count("gpu/gpu_power_watts") == 0);
  // Every tag's key is a key of the metrics line with the same value.
  for (const auto& [tag, v] : tensorboard_scalars(m)) {
    const std::string key = tag.substr(tag.find('/') + 1);
    INFO(tag);
    CHECK(to_json_line(m).find("\"" + key + "\":") != std::string::npos);
  }
}

TEST_CASE("tensorboard: flatten_hparams turns a config into key paths", "[cpu]") {
  const auto hp = flatten_hparams(
      R"({"name": "r", "provenance": {"git": "abc"}, "optim": {"lr": 0.1, "betas": [0.9, 0.999]},
          "data": {"augment": false, "path": ""}, "early_stop": {"target_accuracy": null}})",
      {"provenance"});
  REQUIRE(hp.size() == 5);
  CHECK(hp[0] == std::pair<std::string, HParamValue>{"name", std::string("r")});
  CHECK(hp[1] == std::pair<std::string, HParamValue>{"optim.lr", 0.1});
  CHECK(hp[2] == std::pair<std::string, HParamValue>{"optim.betas", std::string("[0.9,0.999]")});
  CHECK(hp[3] == std::pair<std::string, HParamValue>{"data.augment", false});
  CHECK(hp[4] == std::pair<std::string, HParamValue>{"data.path", std::string("")});
  CHECK_THAT(error_of([] { flatten_hparams("[1]"); }), Catch::Contains("not a JSON object"));
}

TEST_CASE("tensorboard: the writer's file holds file_version, hparams and scalars, flushed per call", "[cpu]") {
  TempDir dir;
  const std::string logdir = (dir.path() / "runs" / "a").string();
  std::string path;
  {
    TensorBoardWriter w(logdir);
    path = w.path();
    const std::string name = fs::path(path).filename().string();
    CHECK(fs::path(path).parent_path() == fs::path(logdir));
    CHECK(name.rfind("events.out.tfevents.", 0) == 0);
    CHECK(name.size() > std::string("events.out.tfevents.").size() + std::to_string(::getpid()).size());
    CHECK(name.substr(name.size() - std::to_string(::getpid()).size() - 1) == "." + std::to_string(::getpid()));
    // file_version is on disk at once.
    tfrecord::ReadResult r = tfrecord::read_records(read_text(path));
    REQUIRE(r.records.size() == 1);
    CHECK(read_event(r.records[0]).file_version == "brain.Event:2");
    w.add_hparams({{"optim.lr", 0.1}});
    EpochMetrics m;
    m.epoch = 1;
    m.train_loss = 1.0 / 3.0;  // TensorBoard's scalars are floats: the file holds it rounded
    m.test_acc = 0.5;
    w.add_epoch(m, 40);
    CHECK(tfrecord::read_records(read_text(path)).records.size() == 1);  // queued, not written
    w.flush();
    r = tfrecord::read_records(read_text(path));
    CHECK_FALSE(r.truncated);
    REQUIRE(r.records.size() == 2 + tensorboard_scalars(m).size());
    CHECK(read_event(r.records[1]).plugin == "hparams");
    std::map<std::string, ReadEvent> by_tag;
    for (size_t i = 2; i < r.records.size(); ++i) {
      ReadEvent e = read_event(r.records[i]);
      CHECK(e.plugin == "scalars");
      CHECK(e.step == 40);
      by_tag[e.tag] = e;
    }
    CHECK(by_tag.at("loss/train_loss").value == static_cast<double>(1.0f / 3.0f));
    CHECK(by_tag.at("accuracy/test_acc").value == 0.5);
    m.epoch = 2;
    w.add_epoch(m, 80);
  }  // the destructor flushes
  const tfrecord::ReadResult r = tfrecord::read_records(read_text(path));
  CHECK(r.records.size() == 2 + 2 * tensorboard_scalars(EpochMetrics{}).size());
  CHECK(read_event(r.records.back()).step == 80);
}

TEST_CASE("tensorboard: a directory that cannot be made is an error naming it", "[cpu]") {
  TempDir dir;
  const std::string file = (dir.path() / "f").string();
  { std::ofstream(file) << "x"; }
  CHECK_THAT(error_of([&] { TensorBoardWriter w(file + "/sub"); }),
             Catch::Contains("TensorBoard: cannot create '" + file + "/sub'"));
}

TEST_CASE("tensorboard: session_end_info holds the status and end time under the hparams plugin", "[cpu]") {
  for (const auto& [status, code] : {std::pair{SessionStatus::success, 1}, std::pair{SessionStatus::failure, 2}}) {
    const ReadEvent e = read_event(tb_event::session_end(status, 200.0, 201.0));
    CHECK(e.tag == "_hparams_/session_end_info");
    CHECK(e.plugin == "hparams");
    CHECK(e.wall_time == 201.0);
    const Message end = parse(one(parse(e.plugin_content), 4).data);  // HParamsPluginData.session_end_info
    CHECK(one(end, 1).varint == static_cast<uint64_t>(code));  // status: STATUS_SUCCESS 1, STATUS_FAILURE 2
    CHECK(as_double(one(end, 2).data) == 200.0);  // end_time_secs
  }
}

TEST_CASE("tensorboard: step_of reads an event's step and names the byte of a malformed one", "[cpu]") {
  CHECK(tb_event::step_of(tb_event::scalar("a/b", 1.0, 123456789012, 1.0)) == 123456789012);
  CHECK(tb_event::step_of(tb_event::file_version(1.0)) == 0);
  CHECK(tb_event::step_of(tb_event::hparams({{"x", 1.0}}, 1.0, 1.0)) == 0);
  const std::string e = tb_event::scalar("a/b", 1.0, 7, 1.0);
  CHECK_THAT(error_of([&] { tb_event::step_of(e.substr(0, e.size() - 3)); }), Catch::Contains("runs past the end"));
  CHECK_THAT(error_of([&] { tb_event::step_of(bytes({0x0B})); }), Catch::Contains("wire type 3 of field 1 at byte 0"));
  CHECK_THAT(error_of([&] { tb_event::step_of(bytes({0x10, 0x80})); }), Catch::Contains("truncated varint at byte 2"));
}

TEST_CASE("tensorboard: a resume drops the events after its checkpoint's step from earlier files", "[cpu]") {
  TempDir dir;
  const std::string logdir = dir.path().string();
  std::string first, second;
  EpochMetrics m;
  {
    TensorBoardWriter w(logdir);
    first = w.path();
    w.add_hparams({{"optim.lr", 0.1}});
    for (int64_t epoch = 1; epoch <= 3; ++epoch) w.add_epoch(m, epoch * 10);
  }
  // A second file (another session) cut inside its last record, as a killed writer leaves it.
  second = (fs::path(logdir) / "events.out.tfevents.1.other.2").string();
  const std::string cut = tfrecord::frame(tb_event::file_version(1.0)) +
                          tfrecord::frame(tb_event::scalar("a/b", 1, 10, 1)) +
                          tfrecord::frame(tb_event::scalar("a/b", 2, 30, 1));
  { std::ofstream(second, std::ios::binary) << cut.substr(0, cut.size() - 4); }
  { std::ofstream((fs::path(logdir) / "metrics.jsonl").string()) << "not an event file\n"; }
  const size_t per_epoch = tensorboard_scalars(m).size();

  // Steps 20 and 30 of the first file, and the second file's cut record, go.
  CHECK(prune_event_files(logdir, 10) == static_cast<int64_t>(2 * per_epoch + 1));
  tfrecord::ReadResult r = tfrecord::read_records(read_text(first));
  CHECK_FALSE(r.truncated);
  REQUIRE(r.records.size() == 2 + per_epoch);  // file_version, hparams, epoch 1
  CHECK(read_event(r.records[0]).file_version == "brain.Event:2");
  CHECK(read_event(r.records[1]).plugin == "hparams");
  for (size_t i = 2; i < r.records.size(); ++i) CHECK(read_event(r.records[i]).step == 10);
  r = tfrecord::read_records(read_text(second));
  CHECK_FALSE(r.truncated);
  CHECK(r.records.size() == 2);
  CHECK(read_text((fs::path(logdir) / "metrics.jsonl").string()) == "not an event file\n");
  CHECK(prune_event_files(logdir, 10) == 0);  // nothing left to drop: files untouched

  // A corrupt file is an error naming it, and stays as it was.
  std::string bad = read_text(first);
  bad[bad.size() - 1] ^= 0x55;  // the last record's data CRC
  { std::ofstream(first, std::ios::binary | std::ios::trunc) << bad; }
  CHECK_THAT(error_of([&] { prune_event_files(logdir, 0); }),
             Catch::Contains("'" + first + "'") && Catch::Contains("left as it was"));
  CHECK(read_text(first) == bad);
}
