// Run records (train/metrics.h): exact round trips of metrics lines and summaries (random bit
// patterns included), errors naming source, line and key for every required key missing or
// mistyped, and atomic file writes that leave nothing half-written behind.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/error.h>
#include <ember/train/metrics.h>
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

void spit(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  REQUIRE(f.good());
}

// A finite double from random bits: covers subnormals, huge and tiny exponents, both signs.
double random_double(std::mt19937_64& rng) {
  for (;;) {
    const double d = std::bit_cast<double>(rng());
    if (std::isfinite(d)) return d;
  }
}

EpochMetrics random_metrics(std::mt19937_64& rng) {
  EpochMetrics m;
  m.epoch = static_cast<int64_t>(rng());
  for (double* f :
       {&m.train_loss, &m.test_loss, &m.test_acc, &m.epoch_seconds, &m.images_per_second, &m.lr, &m.eval_seconds,
        &m.data_wait_seconds, &m.h2d_seconds, &m.forward_seconds, &m.backward_seconds, &m.optimizer_seconds})
    *f = random_double(rng);
  m.h2d_copied = true;  // written (and read back) only with a copy
  return m;
}

// Keys of metrics.jsonl in struct order, each with a valid value text.
const std::vector<std::pair<std::string, std::string>> kLineFields = {{"epoch", "7"},
                                                                      {"train_loss", "0.5"},
                                                                      {"test_loss", "0.25"},
                                                                      {"test_acc", "0.875"},
                                                                      {"epoch_seconds", "2.5"},
                                                                      {"images_per_second", "400"},
                                                                      {"lr", "0.125"},
                                                                      {"eval_seconds", "0.5"},
                                                                      {"data_wait_seconds", "0.0625"},
                                                                      {"h2d_seconds", "0.03125"},
                                                                      {"forward_seconds", "0.75"},
                                                                      {"backward_seconds", "1.25"},
                                                                      {"optimizer_seconds", "0.25"}};
const std::vector<std::string> kRequiredLineKeys = {"epoch",         "train_loss",        "test_loss", "test_acc",
                                                    "epoch_seconds", "images_per_second", "lr",        "eval_seconds"};

// A metrics line built by hand (independently of to_json_line): `skip` leaves a key out,
// `replace` gives one key another value text.
std::string make_line(const std::string& skip = "", const std::string& replace_key = "",
                      const std::string& replace_value = "") {
  std::string s = "{";
  for (const auto& [k, v] : kLineFields) {
    if (k == skip) continue;
    if (s.size() > 1) s += ", ";
    s += "\"" + k + "\": " + (k == replace_key ? replace_value : v);
  }
  return s + "}";
}

RunSummary sample_summary() {
  RunSummary s;
  s.name = "cifar \"wide\" <resnet> & co";
  s.device = "cuda:1";
  s.world_size = 4;
  s.global_batch_size = 512;
  s.lr = 0.1 * 2;
  s.restarts = 2;
  s.epochs_run = 17;
  s.best_test_acc = 0.9431;
  s.best_epoch = 15;
  s.stopped_early = true;
  s.stop_reason = "patience";
  s.stop_detail = "no improvement of test_acc for 3 epochs";
  s.total_seconds = 1234.5678901234567;
  s.images_per_second = 1.0 / 3.0;
  s.time_to_target_seconds = 987.25;
  s.target_accuracy = 0.93;
  return s;
}

}  // namespace

TEST_CASE("to_json_line and parse_epoch_metrics round-trip every field bit for bit", "[cpu]") {
  std::mt19937_64 rng(20240611);
  std::vector<EpochMetrics> cases;
  EpochMetrics edge;
  edge.epoch = std::numeric_limits<int64_t>::max();
  edge.train_loss = 0.1;
  edge.test_loss = 1.0 / 3.0;
  edge.test_acc = std::numeric_limits<double>::denorm_min();
  edge.epoch_seconds = std::numeric_limits<double>::max();
  edge.images_per_second = std::numeric_limits<double>::min();
  edge.lr = -0.0;
  edge.eval_seconds = 1e300;
  cases.push_back(edge);
  edge.epoch = std::numeric_limits<int64_t>::min();
  cases.push_back(edge);
  for (int i = 0; i < 500; ++i) cases.push_back(random_metrics(rng));
  for (const EpochMetrics& m : cases) {
    const std::string line = to_json_line(m);
    INFO(line);
    const EpochMetrics back = parse_epoch_metrics(line, "mem", 1);
    CHECK(back == m);
    // == cannot see the sign of zero; the re-written line can.
    CHECK(to_json_line(back) == line);
  }
}

TEST_CASE("to_json_line writes one line with the keys in struct order", "[cpu]") {
  EpochMetrics m;
  m.epoch = 3;
  m.test_acc = 0.5;
  m.h2d_copied = true;
  const std::string line = to_json_line(m);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.front() == '{');
  CHECK(line.back() == '}');
  size_t last = 0;
  for (const auto& [key, value] : kLineFields) {
    const size_t at = line.find("\"" + key + "\":");
    INFO(key);
    REQUIRE(at != std::string::npos);
    CHECK(at >= last);
    last = at;
  }
}

TEST_CASE("to_json_line leaves h2d_seconds out of an epoch without a host-to-device copy", "[cpu]") {
  // ember's loaders deliver batches on the device: a 0 there would look measured.
  EpochMetrics m;
  m.epoch = 2;
  m.h2d_seconds = 0.25;  // not written without h2d_copied
  const std::string without = to_json_line(m);
  CHECK(without.find("h2d_seconds") == std::string::npos);
  CHECK(without.find("\"forward_seconds\":") != std::string::npos);
  const EpochMetrics back = parse_epoch_metrics(without, "m", 1);
  CHECK_FALSE(back.h2d_copied);
  CHECK(back.h2d_seconds == 0);
  m.h2d_copied = true;
  const std::string with = to_json_line(m);
  CHECK(with.find("\"h2d_seconds\":0.25") != std::string::npos);
  CHECK(parse_epoch_metrics(with, "m", 1) == m);
}

TEST_CASE("parse_epoch_metrics reads a hand-written line, ignoring unknown keys", "[cpu]") {
  std::string line = make_line();
  line.insert(1, "\"future_key\": [1, {\"x\": 2}], ");
  const EpochMetrics m = parse_epoch_metrics(line, "m.jsonl", 1);
  CHECK(m.epoch == 7);
  CHECK(m.train_loss == 0.5);
  CHECK(m.test_acc == 0.875);
  CHECK(m.images_per_second == 400.0);  // an integer literal is fine for a double field
  CHECK(m.lr == 0.125);
  CHECK(m.data_wait_seconds == 0.0625);
  CHECK(m.backward_seconds == 1.25);
  CHECK(m.optimizer_seconds == 0.25);
}

TEST_CASE("parse_epoch_metrics names source, line and key of a missing required key", "[cpu]") {
  for (const std::string& key : kRequiredLineKeys) {
    INFO(key);
    const std::string msg = error_of([&] { parse_epoch_metrics(make_line(key), "runs/a/metrics.jsonl", 12); });
    CHECK_THAT(msg, Catch::Contains("runs/a/metrics.jsonl:12") && Catch::Contains("missing key \"" + key + "\""));
  }
}

TEST_CASE("parse_epoch_metrics takes absent phase times as 0", "[cpu]") {
  // Lines written before the phase timers (e.g. the mnist example's --metrics-out) lack them.
  for (const std::string key :
       {"data_wait_seconds", "h2d_seconds", "forward_seconds", "backward_seconds", "optimizer_seconds"}) {
    const EpochMetrics m = parse_epoch_metrics(make_line(key), "m", 1);
    const EpochMetrics full = parse_epoch_metrics(make_line(), "m", 1);
    INFO(key);
    CHECK_FALSE(m == full);
    EpochMetrics expected = full;
    if (key == "data_wait_seconds") expected.data_wait_seconds = 0;
    if (key == "h2d_seconds") expected.h2d_seconds = 0, expected.h2d_copied = false;
    if (key == "forward_seconds") expected.forward_seconds = 0;
    if (key == "backward_seconds") expected.backward_seconds = 0;
    if (key == "optimizer_seconds") expected.optimizer_seconds = 0;
    CHECK(m == expected);
  }
}

TEST_CASE("parse_epoch_metrics names the key of every mistyped value", "[cpu]") {
  for (const auto& field : kLineFields) {
    const std::string& key = field.first;  // not a structured binding: the lambdas below use it (clang 14)
    INFO(key);
    const std::string msg = error_of([&] { parse_epoch_metrics(make_line("", key, "\"oops\""), "m.jsonl", 5); });
    CHECK_THAT(msg, Catch::Contains("m.jsonl:5") && Catch::Contains("\"" + key + "\"") && Catch::Contains("string"));
    CHECK_THAT(error_of([&] { parse_epoch_metrics(make_line("", key, "true"), "m.jsonl", 5); }),
               Catch::Contains("\"" + key + "\""));
  }
  CHECK_THAT(error_of([] { parse_epoch_metrics(make_line("", "epoch", "1.5"), "m.jsonl", 2); }),
             Catch::Contains("m.jsonl:2") && Catch::Contains("\"epoch\"") && Catch::Contains("integer"));
  CHECK_THAT(error_of([] { parse_epoch_metrics(make_line("", "epoch", "null"), "m.jsonl", 2); }),
             Catch::Contains("\"epoch\""));
  CHECK_THAT(error_of([] { parse_epoch_metrics(make_line("", "epoch", "18446744073709551615"), "m.jsonl", 2); }),
             Catch::Contains("\"epoch\"") && Catch::Contains("int64"));
}

TEST_CASE("parse_epoch_metrics reads null in a number field as NaN", "[cpu]") {
  // nlohmann writes NaN and infinity as null: a diverged loss must stay readable.
  EpochMetrics m;
  m.train_loss = std::numeric_limits<double>::quiet_NaN();
  m.test_loss = std::numeric_limits<double>::infinity();
  const std::string line = to_json_line(m);
  CHECK_THAT(line, Catch::Contains("\"train_loss\":null") && Catch::Contains("\"test_loss\":null"));
  const EpochMetrics back = parse_epoch_metrics(line, "m", 1);
  CHECK(std::isnan(back.train_loss));
  CHECK(std::isnan(back.test_loss));
  CHECK(back.test_acc == 0.0);
}

TEST_CASE("parse_epoch_metrics rejects text that is not a JSON object, naming source and line", "[cpu]") {
  CHECK_THAT(error_of([] { parse_epoch_metrics("{\"epoch\": 1,", "runs/b/metrics.jsonl", 3); }),
             Catch::Contains("runs/b/metrics.jsonl:3") && Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of([] { parse_epoch_metrics("[1, 2]", "runs/b/metrics.jsonl", 4); }),
             Catch::Contains("runs/b/metrics.jsonl:4") && Catch::Contains("object"));
}

TEST_CASE("metrics and summary readers refuse deeply nested JSON by name instead of overflowing the stack", "[cpu]") {
  // A value nested 100000 deep crashed ember-report: the error message rendered it with a recursive dump.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THAT(error_of([&] { parse_epoch_metrics("{\"epoch\": 1, \"train_loss\": " + deep + "}", "m.jsonl", 7); }),
             Catch::Contains("m.jsonl:7") && Catch::Contains("nested deeper than 32 levels"));
  CHECK_THAT(error_of([&] { parse_run_summary("{\"name\": " + deep + "}", "runs/x/summary.json"); }),
             Catch::Contains("runs/x/summary.json") && Catch::Contains("nested deeper"));
  // 31 levels inside the line's object are still read (and the mistyped value named).
  const std::string ok_depth = std::string(30, '[') + std::string(30, ']');
  CHECK_THAT(error_of([&] { parse_epoch_metrics(make_line("", "train_loss", ok_depth), "m.jsonl", 1); }),
             Catch::Contains("\"train_loss\"") && Catch::Contains("array"));
}

TEST_CASE("read_metrics_file skips blank lines and counts them in error line numbers", "[cpu]") {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  EpochMetrics a, b;
  a.epoch = 1;
  a.test_acc = 0.25;
  b.epoch = 2;
  b.test_acc = 0.75;
  spit(path, to_json_line(a) + "\r\n\n   \n" + to_json_line(b) + "\n");
  const std::vector<EpochMetrics> got = read_metrics_file(path);
  REQUIRE(got.size() == 2);
  CHECK(got[0] == a);
  CHECK(got[1] == b);

  spit(path, to_json_line(a) + "\n\n" + make_line("test_acc") + "\n");
  CHECK_THAT(error_of([&] { read_metrics_file(path); }),
             Catch::Contains(path + ":3") && Catch::Contains("\"test_acc\""));

  spit(path, "");
  CHECK(read_metrics_file(path).empty());

  const std::string missing = dir.file("nope/metrics.jsonl");
  CHECK_THAT(error_of([&] { read_metrics_file(missing); }), Catch::Contains(missing));
}

TEST_CASE("RunSummary round-trips through to_json, with and without the optional fields", "[cpu]") {
  RunSummary s = sample_summary();
  CHECK(parse_run_summary(to_json(s), "summary.json") == s);
  s.time_to_target_seconds.reset();
  s.target_accuracy.reset();
  const std::string text = to_json(s);
  CHECK_THAT(text, Catch::Contains("\"time_to_target_seconds\": null") && Catch::Contains("\"target_accuracy\": null"));
  CHECK(text.find('\n') != std::string::npos);  // pretty: one key per line
  CHECK(parse_run_summary(text, "summary.json") == s);
  CHECK(parse_run_summary(to_json(RunSummary{}), "s") == RunSummary{});
  // global_batch_size, lr and restarts came later: a summary written before reads them as 0.
  RunSummary old = sample_summary();
  std::istringstream in(to_json(old));
  std::string line, without;
  while (std::getline(in, line))
    if (line.find("\"global_batch_size\":") == std::string::npos && line.find("\"lr\":") == std::string::npos &&
        line.find("\"restarts\":") == std::string::npos)
      without += line + "\n";
  old.global_batch_size = 0;
  old.lr = 0;
  old.restarts = 0;
  CHECK(parse_run_summary(without, "summary.json") == old);
}

TEST_CASE("parse_run_summary names the source and the key of every missing or mistyped field", "[cpu]") {
  const std::string good = to_json(sample_summary());
  for (const std::string key : {"name", "device", "world_size", "epochs_run", "best_test_acc", "best_epoch",
                                "stopped_early", "stop_reason", "stop_detail", "total_seconds", "images_per_second"}) {
    INFO(key);
    // Drop the key's line (pretty JSON: one key per line); every line but the last ends in ','.
    std::istringstream in(good);
    std::string line, without;
    while (std::getline(in, line))
      if (line.find("\"" + std::string(key) + "\":") == std::string::npos) without += line + "\n";
    CHECK_THAT(error_of([&] { parse_run_summary(without, "runs/x/summary.json"); }),
               Catch::Contains("runs/x/summary.json") && Catch::Contains("missing key \"" + std::string(key) + "\""));
    // The same key with an array value.
    std::string mistyped;
    std::istringstream in2(good);
    while (std::getline(in2, line)) {
      if (line.find("\"" + std::string(key) + "\":") != std::string::npos) line = "  \"" + std::string(key) + "\": [],";
      mistyped += line + "\n";
    }
    CHECK_THAT(error_of([&] { parse_run_summary(mistyped, "runs/x/summary.json"); }),
               Catch::Contains("runs/x/summary.json") && Catch::Contains("\"" + std::string(key) + "\"") &&
                   Catch::Contains("array"));
  }
  // Optional fields may be absent; present, they must be numbers or null.
  RunSummary s = sample_summary();
  s.time_to_target_seconds.reset();
  s.target_accuracy.reset();
  std::string text = to_json(s);
  const size_t cut = text.find(",\n  \"time_to_target_seconds\"");
  REQUIRE(cut != std::string::npos);
  CHECK(parse_run_summary(text.substr(0, cut) + "\n}", "s") == s);
  std::string bad = to_json(sample_summary());
  bad.replace(bad.find("0.93"), 4, "\"high\"");
  CHECK_THAT(error_of([&] { parse_run_summary(bad, "s.json"); }), Catch::Contains("\"target_accuracy\""));
  s.world_size = 0;
  CHECK_THAT(error_of([&] { parse_run_summary(to_json(s), "s.json"); }), Catch::Contains("\"world_size\""));
  CHECK_THAT(error_of([&] { parse_run_summary(good.substr(0, good.size() / 2), "runs/x/summary.json"); }),
             Catch::Contains("runs/x/summary.json") && Catch::Contains("not valid JSON"));
}

TEST_CASE("write_file_atomic writes and replaces whole files and leaves no temporary", "[cpu]") {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  write_file_atomic(path, "first\n");
  CHECK(read_text(path) == "first\n");
  std::string big(1 << 20, 'x');
  big.back() = '\n';
  write_file_atomic(path, big);
  CHECK(read_text(path) == big);
  write_file_atomic(path, "");
  CHECK(read_text(path).empty());
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("write_file_atomic names the path it cannot write and keeps the old content", "[cpu]") {
  TempDir dir;
  const std::string no_dir = dir.file("missing/summary.json");
  CHECK_THAT(error_of([&] { write_file_atomic(no_dir, "x"); }), Catch::Contains(no_dir));

  // A directory in the way: the temporary is written, the rename fails and is cleaned up.
  const std::string blocked = dir.file("blocked");
  fs::create_directories(fs::path(blocked) / "child");
  CHECK_THAT(error_of([&] { write_file_atomic(blocked, "x"); }), Catch::Contains(blocked));
  CHECK_FALSE(fs::exists(blocked + ".tmp"));
  CHECK(fs::is_directory(fs::path(blocked) / "child"));

  // A full disk: the temporary is a link to /dev/full (every write fails with ENOSPC); the old
  // summary stays as it was.
  if (::access("/dev/full", W_OK) == 0) {
    const std::string summary = dir.file("summary.json");
    write_file_atomic(summary, "old");
    fs::create_symlink("/dev/full", summary + ".tmp");
    CHECK_THAT(error_of([&] { write_file_atomic(summary, std::string(1 << 16, 'x')); }),
               Catch::Contains(summary) && Catch::Contains("No space left on device"));
    CHECK(read_text(summary) == "old");
  }
}
