// Run records (train/metrics.h): metrics.jsonl lines and summary.json, written and parsed with
// nlohmann::json. Doubles go through nlohmann's shortest round-trip formatting, so a value read
// back is bit-identical to the one written. JSON has no NaN or infinity: nlohmann writes them as
// null, and the readers here take null in a floating-point field as NaN (a diverged loss must
// not make the whole run unreadable).
#include <ember/train/metrics.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include <ember/core/error.h>

namespace ember::train {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // keeps keys in the order of the structs

// A short rendering of a JSON value for error messages: its type and (truncated) text.
std::string describe(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

const Json& require_key(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  EMBER_CHECK(it != obj.end(), where, ": missing key \"", key, "\"");
  return *it;
}

double get_double(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require_key(obj, key, where);
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // written for a NaN/inf value
  EMBER_CHECK(v.is_number(), where, ": key \"", key, "\": expected a number, found ", describe(v));
  return v.get<double>();
}

int64_t get_int(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require_key(obj, key, where);
  EMBER_CHECK(v.is_number_integer(), where, ": key \"", key, "\": expected an integer, found ", describe(v));
  if (v.is_number_unsigned()) {
    EMBER_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": key \"", key,
                "\": integer ", v.dump(), " does not fit in int64");
  }
  return v.get<int64_t>();
}

bool get_bool(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require_key(obj, key, where);
  EMBER_CHECK(v.is_boolean(), where, ": key \"", key, "\": expected true or false, found ", describe(v));
  return v.get<bool>();
}

std::string get_string(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require_key(obj, key, where);
  EMBER_CHECK(v.is_string(), where, ": key \"", key, "\": expected a string, found ", describe(v));
  return v.get<std::string>();
}

// Optional fields: absent or null means unset.
std::optional<double> get_optional_double(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  EMBER_CHECK(it->is_number(), where, ": key \"", key, "\": expected a number or null, found ", describe(*it));
  return it->get<double>();
}

double get_phase_seconds(const Json& obj, const char* key, const std::string& where) {
  return obj.contains(key) ? get_double(obj, key, where) : 0.0;
}

// Deeper than any record ember writes (metrics lines and summaries nest 2 levels). The limit is
// checked while parsing: nlohmann's dump() recurses once per level, so describing a value nested
// 100000 deep in an error message overflowed the stack.
constexpr int kMaxJsonDepth = 32;

Json parse_object(const std::string& text, const std::string& where) {
  Json j;
  bool too_deep = false;
  const Json::parser_callback_t limit_depth = [&](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      too_deep = true;
    return !too_deep;  // once too deep, keep nothing more
  };
  try {
    j = Json::parse(text, limit_depth);
  } catch (const Json::parse_error& e) {
    EMBER_FAIL(where, ": not valid JSON: ", e.what());
  }
  EMBER_CHECK(!too_deep, where, ": JSON nested deeper than ", kMaxJsonDepth, " levels (ember's records nest 2)");
  EMBER_CHECK(j.is_object(), where, ": expected a JSON object, found ", describe(j));
  return j;
}

std::string sys_error(int err) { return std::strerror(err); }

}  // namespace

namespace {

/// The number fields of a metrics line after "epoch", in the order they are written. Phase times
/// are diagnostics that lines written before the phase timers existed (e.g. the mnist example's
/// --metrics-out) lack: when reading, absent means 0, present must still be a number.
struct NumberField {
  const char* key;
  double EpochMetrics::*member;
  bool phase;
};
constexpr NumberField kEpochFields[] = {
    {"train_loss", &EpochMetrics::train_loss, false},
    {"test_loss", &EpochMetrics::test_loss, false},
    {"test_acc", &EpochMetrics::test_acc, false},
    {"epoch_seconds", &EpochMetrics::epoch_seconds, false},
    {"images_per_second", &EpochMetrics::images_per_second, false},
    {"lr", &EpochMetrics::lr, false},
    {"eval_seconds", &EpochMetrics::eval_seconds, false},
    {"data_wait_seconds", &EpochMetrics::data_wait_seconds, true},
    {"h2d_seconds", &EpochMetrics::h2d_seconds, true},
    {"forward_seconds", &EpochMetrics::forward_seconds, true},
    {"backward_seconds", &EpochMetrics::backward_seconds, true},
    {"optimizer_seconds", &EpochMetrics::optimizer_seconds, true},
    {"comm_seconds", &EpochMetrics::comm_seconds, true},
    {"comm_exposed_seconds", &EpochMetrics::comm_exposed_seconds, true},
    {"loss_scale", &EpochMetrics::loss_scale, true},
    {"skipped_steps", &EpochMetrics::skipped_steps, true},
    {"nonfinite_steps", &EpochMetrics::nonfinite_steps, true},
    {"cpu_seconds", &EpochMetrics::cpu_seconds, true},
    {"loader_cpu_seconds", &EpochMetrics::loader_cpu_seconds, true},
    {"pool_wait_seconds", &EpochMetrics::pool_wait_seconds, true},
};

/// The measured-or-absent fields after them (EpochMetrics::gpu_*).
struct OptionalField {
  const char* key;
  std::optional<double> EpochMetrics::*member;
};
constexpr OptionalField kOptionalFields[] = {
    {"gpu_util_percent", &EpochMetrics::gpu_util_percent},
    {"gpu_memory_used_mb", &EpochMetrics::gpu_memory_used_mb},
    {"gpu_power_watts", &EpochMetrics::gpu_power_watts},
};

}  // namespace

std::vector<std::pair<const char*, double>> metric_values(const EpochMetrics& m) {
  std::vector<std::pair<const char*, double>> out;
  for (const NumberField& f : kEpochFields)
    if (f.member != &EpochMetrics::h2d_seconds || m.h2d_copied) out.emplace_back(f.key, m.*f.member);
  for (const OptionalField& f : kOptionalFields)
    if (m.*f.member) out.emplace_back(f.key, *(m.*f.member));
  return out;
}

std::string to_json_line(const EpochMetrics& m) {
  OrderedJson j;
  j["epoch"] = m.epoch;
  for (const auto& [key, value] : metric_values(m)) j[key] = value;
  return j.dump();  // compact: one line
}

EpochMetrics parse_epoch_metrics(const std::string& line, const std::string& source, int64_t line_no) {
  const std::string where = source + ":" + std::to_string(line_no);
  const Json j = parse_object(line, where);
  EpochMetrics m;
  m.epoch = get_int(j, "epoch", where);
  for (const NumberField& f : kEpochFields)
    m.*f.member = f.phase ? get_phase_seconds(j, f.key, where) : get_double(j, f.key, where);
  m.h2d_copied = j.contains("h2d_seconds");
  for (const OptionalField& f : kOptionalFields)
    if (j.contains(f.key)) m.*f.member = get_double(j, f.key, where);
  return m;
}

std::vector<EpochMetrics> read_metrics_file(const std::string& path) {
  std::ifstream f(path);
  const int err = errno;
  EMBER_CHECK(f.is_open(), "cannot open metrics file '", path, "': ", sys_error(err));
  std::vector<EpochMetrics> out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(f, line)) {
    ++line_no;  // counts blank lines too, so the number matches what an editor shows
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    out.push_back(parse_epoch_metrics(line, path, line_no));
  }
  EMBER_CHECK(!f.bad(), "reading metrics file '", path, "' failed after line ", line_no);
  return out;
}

std::string to_json(const RunSummary& s) {
  OrderedJson j;
  j["name"] = s.name;
  j["device"] = s.device;
  j["world_size"] = s.world_size;
  j["global_batch_size"] = s.global_batch_size;
  j["lr"] = s.lr;
  j["restarts"] = s.restarts;
  j["epochs_run"] = s.epochs_run;
  j["best_test_acc"] = s.best_test_acc;
  j["best_epoch"] = s.best_epoch;
  j["stopped_early"] = s.stopped_early;
  j["stop_reason"] = s.stop_reason;
  j["stop_detail"] = s.stop_detail;
  j["total_seconds"] = s.total_seconds;
  j["images_per_second"] = s.images_per_second;
  j["time_to_target_seconds"] = s.time_to_target_seconds ? OrderedJson(*s.time_to_target_seconds) : OrderedJson();
  j["target_accuracy"] = s.target_accuracy ? OrderedJson(*s.target_accuracy) : OrderedJson();
  return j.dump(2) + "\n";
}

RunSummary parse_run_summary(const std::string& json_text, const std::string& source) {
  const Json j = parse_object(json_text, source);
  RunSummary s;
  s.name = get_string(j, "name", source);
  s.device = get_string(j, "device", source);
  s.world_size = get_int(j, "world_size", source);
  EMBER_CHECK(s.world_size >= 1, source, ": key \"world_size\": expected >= 1, found ", s.world_size);
  if (j.contains("global_batch_size")) s.global_batch_size = get_int(j, "global_batch_size", source);
  if (j.contains("lr")) s.lr = get_double(j, "lr", source);
  if (j.contains("restarts")) s.restarts = get_int(j, "restarts", source);
  s.epochs_run = get_int(j, "epochs_run", source);
  s.best_test_acc = get_double(j, "best_test_acc", source);
  s.best_epoch = get_int(j, "best_epoch", source);
  s.stopped_early = get_bool(j, "stopped_early", source);
  s.stop_reason = get_string(j, "stop_reason", source);
  s.stop_detail = get_string(j, "stop_detail", source);
  s.total_seconds = get_double(j, "total_seconds", source);
  s.images_per_second = get_double(j, "images_per_second", source);
  s.time_to_target_seconds = get_optional_double(j, "time_to_target_seconds", source);
  s.target_accuracy = get_optional_double(j, "target_accuracy", source);
  return s;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = errno;
  EMBER_CHECK(fd >= 0, "cannot write '", path, "': creating '", tmp, "' failed: ", sys_error(err));
  // On any failure below the half-written temporary is removed and `path` keeps its old content.
  auto fail = [&](const std::string& what, int e) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    EMBER_FAIL("cannot write '", path, "': ", what, ": ", sys_error(e));
  };
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    err = errno;
    if (w < 0 && err == EINTR) continue;
    if (w <= 0) fail("writing '" + tmp + "'", w < 0 ? err : EIO);
    p += w;
    left -= static_cast<size_t>(w);
  }
  // fsync before the rename: otherwise a crash could leave the new name pointing at empty data.
  if (::fsync(fd) != 0) fail("fsync of '" + tmp + "'", errno);
  const int rc = ::close(fd);
  err = errno;
  fd = -1;
  if (rc != 0) fail("closing '" + tmp + "'", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming '" + tmp + "' to it", errno);
}

}  // namespace ember::train
