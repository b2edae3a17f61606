// Experiment configs (train/config.h, train/config_schema.h): a table of bad configs with the
// exact pieces each message must hold, round trips through to_json, overrides of every kind,
// defaults, malformed JSON positions, the data-availability check on temporary directories, and
// the schema against docs/config.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/train/config.h>
#include <ember/train/config_schema.h>
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::error_of;
using namespace ember::train;
using json = nlohmann::json;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// A config where every key differs from its default and the cross-field rules still hold.
ExperimentConfig all_non_default() {
  ExperimentConfig c;
  c.description = "every key set";
  c.name = "wrn-16.4_b";
  c.seed = 18446744073709551615ull;  // the largest uint64: must survive JSON
  c.device = "cuda:1";
  c.epochs = 200;
  c.model = {ModelKind::wide_resnet, 16, 4, 0.3};
  c.data.dataset = DatasetKind::cifar100;
  c.data.path = "/tmp/some dir/c100";
  c.data.batch_size = 128;
  c.data.global_batch_size = 1024;
  c.data.test_batch_size = 500;
  c.data.workers = 0;
  c.data.augment = true;
  c.data.resident = true;
  c.data.limit_train = 1000;
  c.data.limit_test = 200;
  c.optim.name = OptimizerKind::adamw;
  c.optim.lr = 0.1 + 0.2;  // 0.30000000000000004: needs the shortest round-trip digits
  c.optim.momentum = 0.9;
  c.optim.nesterov = true;
  c.optim.weight_decay = 5e-4;
  c.optim.betas = {0.8, 0.99};
  c.optim.eps = 1e-6;
  c.optim.lr_scaling = LrScaling::sqrt;
  c.optim.reference_batch_size = 128;
  c.schedule.name = ScheduleKind::multistep;
  c.schedule.step_size = 7;
  c.schedule.gamma = 0.2;
  c.schedule.milestones = {60, 120, 160};
  c.schedule.t_max = 50;
  c.schedule.eta_min = 1e-5;
  c.schedule.max_lr = 0.4;
  c.schedule.pct_start = 0.25;
  c.schedule.warmup_epochs = 5;
  c.early_stop.target_accuracy = 0.95;
  c.early_stop.patience = 3;
  c.early_stop.min_delta = 0.001;
  c.checkpoint.every_epochs = 10;
  c.checkpoint.keep_last = 0;
  c.checkpoint.keep_best = false;
  c.checkpoint.resume = "auto";
  c.output.dir = "out/runs";
  c.output.run_dir = "out/runs/wrn";
  c.output.log_interval = 2.5;
  c.output.tensorboard = true;
  c.train.accumulation_steps = 4;
  c.train.on_nonfinite = NonFinitePolicy::skip;
  c.train.deterministic = true;
  c.precision = Precision::fp16;
  c.memory_format = MemoryFormat::channels_last;
  c.optim.clip_grad_norm = 1.5;
  c.parallel.mode = ParallelMode::ddp;
  c.parallel.devices = {"cuda:0", "cpu"};
  c.parallel.backend = "tcp";
  c.parallel.algorithm = "ring";
  c.parallel.bucket_cap_mb = 4.5;
  c.parallel.timeout_s = 60;
  c.parallel.sync_batchnorm = true;
  c.parallel.zero = 1;
  c.profile.enabled = true;
  c.profile.wait = 2;
  c.profile.warmup = 0;
  c.profile.active = 5;
  c.profile.record_shapes = true;
  c.profile.memory = false;
  c.parallel.comm_hook = "fp16";
  return c;
}

// The value at a dotted path of a JSON document.
const json& at_path(const json& doc, std::string path) {
  for (auto& ch : path)
    if (ch == '.') ch = '/';
  return doc.at(json::json_pointer("/" + path));
}

}  // namespace

TEST_CASE("config: bad configs name the source, the key path, what was expected and what was found", "[cpu]") {
  struct Bad {
    std::string file;
    std::vector<std::string> overrides;
    std::vector<std::string> must_contain;
  };
  const std::vector<Bad> cases = {
      // Unknown keys: full path plus the nearest valid key, or the keys of the enclosing object.
      {R"({"optim": {"lrr": 0.1}})", {}, {"runs.json: optim.lrr: unknown key; did you mean optim.lr?"}},
      {R"({"optm": {"lr": 0.1}})", {}, {"runs.json: optm: unknown key; did you mean optim?"}},
      {R"({"lr": 0.1})", {}, {"runs.json: lr: unknown key; did you mean optim.lr?"}},
      {R"({"data": {"batch": 32}})", {}, {"runs.json: data.batch: unknown key; did you mean data.batch_size?"}},
      {R"({"optim": {"foo": 1}})",
       {},
       {"runs.json: optim.foo: unknown key; valid keys of optim: name, lr, momentum, nesterov, weight_decay, betas, "
        "eps"}},
      {R"({"zzz": 1})",
       {},
       {"runs.json: zzz: unknown key; valid top-level keys: description, name, seed, device, epochs, precision, "
        "memory_format, "
        "model, data, optim, schedule, early_stop, checkpoint, output, train, parallel, profile"}},
      {R"({"optim.lr": 0.1})", {}, {"runs.json: \"optim.lr\": unknown key", "{\"optim\": {...}}"}},
      {"{}", {"optim.lrr=0.1"}, {"override 'optim.lrr=0.1': optim.lrr: unknown key; did you mean optim.lr?"}},
      {"{}", {"optm.lr=0.1"}, {"override 'optm.lr=0.1': optm.lr: unknown key; did you mean optim.lr?"}},
      {"{}", {"optim.lr.x=1"}, {"override 'optim.lr.x=1': optim.lr.x: unknown key; optim.lr is a single value"}},
      {"{}", {"optim=3"}, {"override 'optim=3': optim: an object; override one of its keys: optim.name, optim.lr,"}},
      {"{}", {"provenance.commit=abc"}, {"override 'provenance.commit=abc': provenance.commit: unknown key"}},
      // Override syntax.
      {"{}", {"optim.lr"}, {"override 'optim.lr': expected key.path=value"}},
      {"{}", {"=3"}, {"override '=3': empty key path"}},
      // Types and ranges.
      {R"({"data": {"batch_size": -3}})", {}, {"runs.json: data.batch_size: expected an integer >= 1, found -3"}},
      {"{}", {"epochs=ten"}, {"override 'epochs=ten': epochs: expected an integer >= 1, found \"ten\""}},
      {R"({"epochs": 3.5})", {}, {"runs.json: epochs: expected an integer >= 1, found 3.5"}},
      {R"({"epochs": "10"})", {}, {"runs.json: epochs: expected an integer >= 1, found \"10\""}},
      {R"({"epochs": 1e30})", {}, {"runs.json: epochs: expected an integer >= 1, found 1e+30"}},
      {R"({"data": {"limit_train": true}})", {}, {"data.limit_train: expected an integer >= 0, found true"}},
      {R"({"optim": {"lr": 0}})", {}, {"runs.json: optim.lr: expected a number > 0, found 0"}},
      {R"({"model": {"dropout": 1.0}})", {}, {"model.dropout: expected a number in [0, 1), found 1.0"}},
      {R"({"schedule": {"gamma": 0}})", {}, {"schedule.gamma: expected a number in (0, 1], found 0"}},
      {R"({"seed": -1})", {}, {"runs.json: seed: expected a non-negative integer (at most 2^64-1), found -1"}},
      {R"({"seed": 18446744073709551616})",
       {},
       {"seed: expected a non-negative integer", "found 1.8446744073709552e+19"}},
      {"{}",
       {"optim.nesterov=yes"},
       {"override 'optim.nesterov=yes': optim.nesterov: expected true or false, found \"yes\""}},
      {R"({"optim": {"name": "rmsprop"}})",
       {},
       {"runs.json: optim.name: expected one of sgd, adam, adamw, found \"rmsprop\""}},
      {"{}",
       {"schedule.name=linear"},
       {"schedule.name: expected one of none, step, multistep, cosine, onecycle, found \"linear\""}},
      {R"({"optim": {"betas": [0.9]}})",
       {},
       {"optim.betas: expected a list of two numbers, each in [0, 1), found [0.9]"}},
      {R"({"optim": {"betas": [0.9, 1.0]}})",
       {},
       {"optim.betas: expected a list of two numbers, each in [0, 1), found [0.9,1.0]"}},
      {R"({"early_stop": {"target_accuracy": 1.5}})",
       {},
       {"early_stop.target_accuracy: expected null or a number in (0, 1], found 1.5"}},
      {R"({"schedule": {"milestones": 30}})",
       {},
       {"schedule.milestones: expected a strictly ascending list", "found 30"}},
      // Rules beyond the type.
      {R"({"schedule": {"milestones": [60, 30]}})",
       {},
       {"runs.json: schedule.milestones: expected a strictly ascending list of integers, each >= 1, found [60,30]"}},
      {"{}", {"schedule.milestones=[0,30]"}, {"schedule.milestones: expected a strictly ascending", "found [0,30]"}},
      {R"({"model": {"depth": 27}})", {}, {"model.depth: expected an integer >= 10 of the form 6k+4", "found 27"}},
      {R"({"name": "my run"})",
       {},
       {"runs.json: name: expected a non-empty name of letters, digits, '-', '_' and '.', found \"my run\""}},
      {"{}", {"name="}, {"override 'name=': name: expected a non-empty name", "found \"\""}},
      {R"({"device": "gpu"})", {}, {"runs.json: device: expected auto, cpu, cuda or cuda:N, found \"gpu\""}},
      {"{}", {"device=cuda:"}, {"device: expected auto, cpu, cuda or cuda:N, found \"cuda:\""}},
      {"{}", {"output.dir="}, {"output.dir: expected a non-empty directory path, found \"\""}},
      {"{}", {"description=caf\xe9"}, {"override 'description=caf\xe9': description: expected UTF-8 text"}},
      {"{}", {"epochs=\xff"}, {"epochs: expected an integer >= 1, found \""}},
      // Object keys that hold something else, and the top level.
      {R"({"optim": 3})", {}, {"runs.json: optim: expected an object, found 3"}},
      {R"({"provenance": "abc"})", {}, {"runs.json: provenance: expected an object, found \"abc\""}},
      {"[1, 2]", {}, {"runs.json: expected a JSON object at the top level, found [1,2]"}},
      // Cross-field rules, naming where each value came from.
      {R"({"optim": {"nesterov": true}})",
       {},
       {"runs.json: optim.nesterov: true needs optim.momentum > 0, found optim.momentum = 0.0"}},
      {R"({"optim": {"momentum": 0.9, "nesterov": true}})",
       {"optim.momentum=0"},
       {"runs.json: optim.nesterov: true needs optim.momentum > 0, found optim.momentum = 0.0 "
        "(optim.momentum set by override 'optim.momentum=0')"}},
      {R"({"schedule": {"name": "onecycle", "warmup_epochs": 2}})",
       {},
       {"runs.json: schedule.warmup_epochs: expected 0 with schedule.name = onecycle", "found 2"}},
      {R"({"data": {"dataset": "cifar10"}})",
       {},
       {"runs.json: model.name: mnist_cnn takes 1x28x28 images (data.dataset mnist), found data.dataset = cifar10"}},
      {"{}",
       {"model.name=resnet18"},
       {"override 'model.name=resnet18': model.name: resnet18 takes 3x32x32 images", "found data.dataset = mnist"}},
  };
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    std::string overrides;
    for (const auto& o : c.overrides) overrides += " '" + o + "'";
    INFO("file: " << c.file << "\noverrides:" << overrides);
    const std::string msg = error_of([&] { parse_config(c.file, c.overrides, "runs.json"); });
    INFO("message: " << msg);
    for (const auto& piece : c.must_contain) CHECK(msg.find(piece) != std::string::npos);
  }
}

TEST_CASE("config: every problem of a config and its overrides is reported in one error", "[cpu]") {
  // Three bad keys in the file (one nested), an unknown one, and two bad overrides: one run names all seven.
  const std::string file = R"({"epochs": "ten", "optim": {"lrr": 0.1, "lr": -1}, "data": {"batch_size": -3},
                               "zzz": 1})";
  const std::string msg = error_of([&] { parse_config(file, {"seed=x", "optim.momentum=1"}, "runs.json"); });
  INFO(msg);
  CHECK(msg.rfind("runs.json: 7 problems:\n", 0) == 0);
  for (const std::string piece :
       {"\n  runs.json: epochs: expected an integer >= 1, found \"ten\"", "\n  runs.json: optim.lrr: unknown key",
        "\n  runs.json: optim.lr: expected a number > 0", "\n  runs.json: data.batch_size: expected an integer >= 1",
        "\n  runs.json: zzz: unknown key", "\n  override 'seed=x': seed: expected",
        "\n  override 'optim.momentum=1': optim.momentum: expected"})
    CHECK(msg.find(piece) != std::string::npos);
  // One problem stays a single line, as before; the rules between keys wait until every key is valid
  // (a refused data.dataset would otherwise also report mnist_cnn against the default dataset).
  CHECK(error_of([] {
          parse_config(R"({"epochs": 0})", {}, "runs.json");
        }).rfind("runs.json: epochs: expected an integer >= 1, found 0\n", 0) == 0);
  const std::string two = error_of([] { parse_config(R"({"data": {"dataset": "svhn"}, "seed": -1})", {}, "r.json"); });
  CHECK(two.rfind("r.json: 2 problems:", 0) == 0);
  CHECK(two.find("model.name") == std::string::npos);
}

TEST_CASE("config: to_json round-trips the defaults and a config with every key changed", "[cpu]") {
  const ExperimentConfig defaults;
  CHECK(parse_config(to_json(defaults)) == defaults);
  CHECK(parse_config(to_json(defaults, -1)) == defaults);  // compact form too

  const ExperimentConfig changed = all_non_default();
  // Every key really differs from its default, so a key missing from the schema (or written but
  // not read back) would break the equality below.
  const json d = json::parse(to_json(defaults)), c = json::parse(to_json(changed));
  for (const auto& path : config_key_paths()) {
    INFO(path);
    // train.cuda_graphs true refuses fp16, ddp, accumulation and skip, which `changed` sets: it
    // round-trips in a config of its own below.
    if (path == "train.cuda_graphs") continue;
    CHECK(at_path(d, path) != at_path(c, path));
  }
  ExperimentConfig graphs;
  graphs.device = "cuda:1";
  graphs.train.cuda_graphs = true;
  CHECK(parse_config(to_json(graphs)) == graphs);
  const ExperimentConfig back = parse_config(to_json(changed));
  CHECK(back == changed);
  CHECK(back.optim.lr == 0.1 + 0.2);
  CHECK(back.seed == 18446744073709551615ull);
  // target_accuracy unset is written as null.
  CHECK(at_path(d, "early_stop.target_accuracy").is_null());
}

TEST_CASE("config: to_json writes every key in schema order, nested by object", "[cpu]") {
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(to_json(ExperimentConfig{}));
  std::vector<std::string> flattened;
  std::function<void(const nlohmann::ordered_json&, const std::string&)> walk = [&](const auto& node,
                                                                                    const std::string& prefix) {
    for (const auto& [k, v] : node.items()) {
      const std::string path = prefix.empty() ? k : prefix + "." + k;
      if (v.is_object()) walk(v, path);
      else flattened.push_back(path);
    }
  };
  walk(doc, "");
  CHECK(flattened == config_key_paths());
}

TEST_CASE("config: config_key_paths lists every key once", "[cpu]") {
  const auto paths = config_key_paths();
  const std::set<std::string> unique(paths.begin(), paths.end());
  CHECK(unique.size() == paths.size());
  CHECK(paths.size() == config_schema().size());
  for (const char* p : {"schedule.warmup_epochs", "optim.lr", "data.batch_size", "early_stop.target_accuracy", "seed",
                        "output.log_interval"}) {
    INFO(p);
    CHECK(unique.count(p) == 1);
  }
}

TEST_CASE("config: schema defaults equal the ExperimentConfig defaults", "[cpu]") {
  CHECK(parse_config("{}") == ExperimentConfig{});
  const json d = json::parse(to_json(ExperimentConfig{}));
  std::vector<std::string> overrides;
  for (const auto& spec : config_schema()) {
    INFO(spec.path << " default " << spec.default_json);
    CHECK(at_path(d, spec.path) == json::parse(spec.default_json));
    overrides.push_back(spec.path + "=" + spec.default_json);
  }
  // The documented defaults, given as overrides, are accepted and change nothing.
  CHECK(parse_config("{}", overrides) == ExperimentConfig{});
}

TEST_CASE("config: overrides of every kind are typed by the schema and applied in order after the file", "[cpu]") {
  const std::string file = R"({"epochs": 5, "optim": {"lr": 0.5, "momentum": 0.9}, "data": {"dataset": "synthetic"},
                              "model": {"name": "resnet18"}})";
  const ExperimentConfig c = parse_config(file, {"optim.lr=0.1",  // float over the file's value
                                                 "epochs=3.0",  // integer written as 3.0
                                                 "epochs=7",  // a later override wins
                                                 "seed=18446744073709551615",  // uint64
                                                 "optim.nesterov=true",  // bool
                                                 "data.augment=false",
                                                 "device=cuda:1",  // bare string
                                                 "name=\"quoted-name\"",  // JSON string literal
                                                 "description=two words",  // bare string with a space
                                                 "optim.name=adam",  // enum
                                                 "schedule.name=multistep",
                                                 "schedule.milestones=[30, 60]",  // int list
                                                 "optim.betas=[0.5,0.75]",  // float pair
                                                 "early_stop.target_accuracy=0.9",  // optional float
                                                 "output.log_interval=1",  // an integer literal for a float key
                                                 "data.path="});  // empty string
  CHECK(c.optim.lr == 0.1);
  CHECK(c.optim.momentum == 0.9);  // from the file, untouched
  CHECK(c.epochs == 7);
  CHECK(c.seed == 18446744073709551615ull);
  CHECK(c.optim.nesterov);
  CHECK_FALSE(c.data.augment);
  CHECK(c.device == "cuda:1");
  CHECK(c.name == "quoted-name");
  CHECK(c.description == "two words");
  CHECK(c.optim.name == OptimizerKind::adam);
  CHECK(c.schedule.name == ScheduleKind::multistep);
  CHECK(c.schedule.milestones == std::vector<int64_t>{30, 60});
  CHECK(c.optim.betas == std::pair<double, double>{0.5, 0.75});
  REQUIRE(c.early_stop.target_accuracy.has_value());
  CHECK(*c.early_stop.target_accuracy == 0.9);
  CHECK(c.output.log_interval == 1.0);
  CHECK(c.data.path.empty());
  // null clears an optional; a list can be emptied.
  const ExperimentConfig cleared =
      parse_config(to_json(c), {"early_stop.target_accuracy=null", "schedule.milestones=[]"});
  CHECK_FALSE(cleared.early_stop.target_accuracy.has_value());
  CHECK(cleared.schedule.milestones.empty());
}

TEST_CASE("config: every list key takes a bare comma list as an override", "[cpu]") {
  const ExperimentConfig c = parse_config("{}", {"schedule.name=multistep", "schedule.milestones=30, 60,90",
                                                 "optim.betas=0.5,0.75", "parallel.devices=cpu,cpu"});
  CHECK(c.schedule.milestones == std::vector<int64_t>{30, 60, 90});
  CHECK(c.optim.betas == std::pair<double, double>{0.5, 0.75});
  CHECK(c.parallel.devices == std::vector<std::string>{"cpu", "cpu"});
  CHECK(parse_config("{}", {"schedule.milestones=45"}).schedule.milestones == std::vector<int64_t>{45});
  // A bare list that is not one of numbers is quoted as given.
  CHECK_THAT(
      error_of([] { parse_config("{}", {"schedule.milestones=30,x"}); }),
      Catch::Contains("schedule.milestones: expected a strictly ascending list") && Catch::Contains("found \"30,x\""));
  CHECK_THAT(error_of([] { parse_config("{}", {"optim.betas=0.9"}); }),
             Catch::Contains("optim.betas: expected a list of two numbers") && Catch::Contains("found [0.9]"));
}

TEST_CASE("config: integral floats are integers, other numbers are not", "[cpu]") {
  const ExperimentConfig c = parse_config(R"({"epochs": 3.0, "seed": 1e3, "data": {"batch_size": 32}})");
  CHECK(c.epochs == 3);
  CHECK(c.seed == 1000);
  CHECK(c.data.batch_size == 32);
  CHECK(parse_config(R"({"seed": 0})").seed == 0);
  CHECK_THROWS_AS(parse_config(R"({"seed": 0.5})"), ember::Error);
}

TEST_CASE("config: resolve_batch_scaling splits a global batch and scales the learning rate", "[cpu]") {
  ExperimentConfig c;
  c.data.batch_size = 48;
  c.optim.lr = 0.1;
  SECTION("without either key: batch_size per process, lr as it is") {
    c.train.accumulation_steps = 2;
    const BatchScaling s = resolve_batch_scaling(c, 3);
    CHECK(s.per_process == 48);
    CHECK(s.global == 48 * 3 * 2);
    CHECK(s.lr == 0.1);
    CHECK(s.lr_text.empty());
  }
  SECTION("a global batch divides into processes x accumulation steps; batch_size is ignored") {
    c.data.global_batch_size = 512;
    CHECK(resolve_batch_scaling(c, 4).per_process == 128);
    CHECK(resolve_batch_scaling(c, 1).per_process == 512);
    c.train.accumulation_steps = 2;
    const BatchScaling s = resolve_batch_scaling(c, 4);
    CHECK(s.per_process == 64);
    CHECK(s.global == 512);
  }
  SECTION("linear and sqrt scaling against the reference batch") {
    c.data.global_batch_size = 512;
    c.optim.reference_batch_size = 256;
    c.optim.lr_scaling = LrScaling::linear;
    BatchScaling s = resolve_batch_scaling(c, 4);
    CHECK(s.lr == 0.1 * 2.0);  // a power-of-two ratio: exact
    CHECK(s.lr_text == "lr 0.1 x 512/256 (linear) = 0.2");
    c.optim.lr_scaling = LrScaling::sqrt;
    s = resolve_batch_scaling(c, 4);
    CHECK(s.lr == 0.1 * std::sqrt(2.0));
    CHECK(s.lr_text == "lr 0.1 x sqrt(512/256) = 0.141421");
    // Without a global batch the scaling follows batch_size x processes.
    c.data.global_batch_size = 0;
    c.optim.lr_scaling = LrScaling::linear;
    s = resolve_batch_scaling(c, 2);
    CHECK(s.global == 96);
    CHECK(s.lr == 0.1 * (96.0 / 256.0));
  }
  SECTION("a global batch that does not divide is an error naming the numbers and the nearest multiples") {
    c.data.global_batch_size = 61;
    c.train.accumulation_steps = 2;
    CHECK_THAT(
        error_of([&] { resolve_batch_scaling(c, 3); }),
        Catch::Matchers::StartsWith(
            "data.global_batch_size 61 does not divide into 3 processes x train.accumulation_steps 2 = 6 batches of "
            "equal size: choose a multiple of 6 (60 or 66)\n"));
    c.data.global_batch_size = 4;
    c.train.accumulation_steps = 1;
    CHECK_THAT(
        error_of([&] { resolve_batch_scaling(c, 8); }),
        Catch::Matchers::StartsWith(
            "data.global_batch_size 4 does not divide into 8 processes x train.accumulation_steps 1 = 8 batches of "
            "equal size: choose a multiple of 8 (8)\n"));
  }
}

TEST_CASE("config: the provenance object is accepted and ignored", "[cpu]") {
  const std::string file = R"({"provenance": {"commit": "abc123", "overrides": ["epochs=3"], "host": "h",
                                              "nested": {"lr": "not a key"}}, "epochs": 4})";
  ExperimentConfig expected;
  expected.epochs = 4;
  CHECK(parse_config(file) == expected);
  // A run directory's config.json (to_json plus provenance) reads back as the same config.
  json doc = json::parse(to_json(all_non_default()));
  doc["provenance"] = {{"commit", "abc123"}, {"start", "2024-01-01T00:00:00"}};
  doc["resolved"] = {{"processes", 2}, {"lr", 0.2}};  // what the run trained with: read and ignored
  CHECK(parse_config(doc.dump()) == all_non_default());
  CHECK_THAT(error_of([] { parse_config(R"({"resolved": 3})", {}, "runs.json"); }),
             Catch::Matchers::Contains("runs.json: resolved: expected an object, found 3"));
}

TEST_CASE("config: malformed JSON names the source, line and column", "[cpu]") {
  // The trailing comma's '}' is line 3, column 23.
  const std::string trailing_comma = "{\n  \"epochs\": 10,\n  \"optim\": {\"lr\": 0.1,}\n}\n";
  std::string msg = error_of([&] { parse_config(trailing_comma, {}, "runs.json"); });
  INFO(msg);
  CHECK(msg.find("runs.json:3:23: malformed JSON: ") != std::string::npos);
  // A missing comma: the parser rejects the whole token "seed" (columns 14-19) once it is read,
  // so the position is the token's last character.
  msg = error_of([&] { parse_config("{\"epochs\": 10,\n  \"a\": 1     \"seed\": 1}", {}, "cfg.json"); });
  INFO(msg);
  CHECK(msg.find("cfg.json:2:19: malformed JSON: ") != std::string::npos);
  // First character wrong; and empty input.
  CHECK(error_of([] { parse_config("x"); }).find("<string>:1:1: malformed JSON") != std::string::npos);
  CHECK(error_of([] { parse_config(""); }).find("<string>:1:1: malformed JSON") != std::string::npos);
}

TEST_CASE("config: load_config reads a file and names it in errors", "[cpu]") {
  TempDir tmp;
  const std::string path = (tmp.path() / "exp.json").string();
  std::ofstream(path) << R"({"epochs": 2, "optim": {"lrr": 1}})";
  std::string msg = error_of([&] { load_config(path); });
  CHECK(msg.find(path + ": optim.lrr: unknown key; did you mean optim.lr?") != std::string::npos);
  std::ofstream(path) << R"({"epochs": 2})";
  const ExperimentConfig c = load_config(path, {"epochs=5"});
  CHECK(c.epochs == 5);
  msg = error_of([&] { load_config((tmp.path() / "missing.json").string()); });
  CHECK(msg.find("cannot read config file '" + (tmp.path() / "missing.json").string() + "'") != std::string::npos);
  msg = error_of([&] { load_config(tmp.path().string()); });
  CHECK(msg.find("it is a directory") != std::string::npos);
}

TEST_CASE("config: default_data_path per dataset", "[cpu]") {
  DataConfig d;
  CHECK(default_data_path(d) == "/usr/share/datasets/fashion-mnist");
  d.dataset = DatasetKind::cifar10;
  CHECK(default_data_path(d) == "data/cifar10");
  d.dataset = DatasetKind::cifar100;
  CHECK(default_data_path(d) == "data/cifar100");
  d.dataset = DatasetKind::synthetic;
  CHECK(default_data_path(d).empty());
  d.path = "/x/y";
  CHECK(default_data_path(d) == "/x/y");
}

TEST_CASE("config: levenshtein distances", "[cpu]") {
  CHECK(levenshtein("kitten", "sitting") == 3);
  CHECK(levenshtein("", "abc") == 3);
  CHECK(levenshtein("abc", "") == 3);
  CHECK(levenshtein("optim.lrr", "optim.lr") == 1);
  CHECK(levenshtein("flaw", "lawn") == levenshtein("lawn", "flaw"));
  CHECK(levenshtein("same", "same") == 0);
}

TEST_CASE("config: docs/config.md documents every key with its default", "[cpu]") {
  const fs::path doc_path = fs::path(EMBER_SOURCE_DIR) / "docs" / "config.md";
  std::ifstream f(doc_path);
  REQUIRE(f.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  for (const auto& spec : config_schema()) {
    INFO(spec.path);
    // The table row: | `path` | expected | `default` | meaning |
    const std::string head = "| `" + spec.path + "` |";
    auto row = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(head, 0) == 0; });
    REQUIRE(row != lines.end());
    CHECK(row->find("| `" + spec.default_json + "` |") != std::string::npos);
    CHECK(row->find("| " + expected_text(spec) + " |") != std::string::npos);
  }
  // The example config at the top of the page is valid.
  auto open = std::find(lines.begin(), lines.end(), "```json");
  REQUIRE(open != lines.end());
  auto close = std::find(open, lines.end(), "```");
  REQUIRE(close != lines.end());
  std::string example;
  for (auto it = open + 1; it != close; ++it) example += *it + "\n";
  const ExperimentConfig c = parse_config(example, {}, "docs/config.md");
  CHECK(c.model.name == ModelKind::resnet18);
  CHECK(c.schedule.milestones == std::vector<int64_t>{80, 120});
}

TEST_CASE("config: parallel keys - device lists from a file or a bare override, and their errors", "[cpu]") {
  CHECK(parse_config("{}", {"parallel.devices=cpu,cpu"}).parallel.devices == std::vector<std::string>{"cpu", "cpu"});
  CHECK(parse_config("{}", {"parallel.devices=[\"cuda:0\", \"cuda:1\"]"}).parallel.devices ==
        std::vector<std::string>{"cuda:0", "cuda:1"});
  const ExperimentConfig f = parse_config(
      R"({"parallel": {"mode": "dp", "devices": ["cpu", "cpu", "cpu"]}, "train": {"accumulation_steps": 2}})");
  CHECK(f.parallel.mode == ParallelMode::dp);
  CHECK(f.parallel.devices.size() == 3);
  CHECK(f.train.accumulation_steps == 2);
  CHECK_THAT(error_of([] { parse_config("{}", {"parallel.devices=cpu,gpu"}); }),
             Catch::Contains("parallel.devices: expected a list of devices, each cpu, cuda or cuda:N, found "
                             "[\"cpu\",\"gpu\"]"));
  CHECK_THAT(error_of([] { parse_config(R"({"parallel": {"devices": "cpu"}})", {}, "runs.json"); }),
             Catch::Contains("runs.json: parallel.devices: expected a list of devices"));
  CHECK_THAT(error_of([] { parse_config("{}", {"parallel.mode=ddpp"}); }),
             Catch::Contains("parallel.mode: expected one of none, dp, ddp"));
  CHECK_THAT(error_of([] { parse_config("{}", {"train.accumulation_steps=0"}); }),
             Catch::Contains("train.accumulation_steps: expected an integer >= 1, found 0"));
}

TEST_CASE("config: every enum key parses once into its enum and writes back its spelling", "[cpu]") {
  int checked = 0;
  for (const KeySpec& s : config_schema()) {
    if (s.kind != KeyKind::Enum) continue;
    for (const std::string& choice : s.choices) {
      // The model and the dataset must fit each other (mnist_cnn takes MNIST's images).
      std::vector<std::string> overrides = {s.path + "=" + choice};
      if (s.path == "model.name" && choice != "mnist_cnn") overrides.push_back("data.dataset=synthetic");
      if (s.path == "data.dataset" && choice != "mnist") overrides.push_back("model.name=cifar_cnn");
      INFO(s.path << "=" << choice);
      const ExperimentConfig c = parse_config("{}", overrides);
      const json written = json::parse(to_json(c));
      CHECK(at_path(written, s.path) == choice);
      ++checked;
    }
  }
  CHECK(checked == 3 + 2 + 4 + 4 + 3 + 3 + 5 + 2 + 3 + 3 + 2 + 3);  // precision ... parallel.comm_hook
  // The enums behind them, value by value.
  CHECK(parse_config("{}", {"optim.lr_scaling=sqrt"}).optim.lr_scaling == LrScaling::sqrt);
  CHECK(parse_config("{}", {"precision=bf16"}).precision == Precision::bf16);
  CHECK(parse_config("{}", {"memory_format=channels_last"}).memory_format == MemoryFormat::channels_last);
  CHECK(parse_config("{}", {"model.name=wide_resnet", "data.dataset=cifar100"}).model.name == ModelKind::wide_resnet);
  CHECK(parse_config("{}", {"model.name=resnet18", "data.dataset=cifar100"}).data.dataset == DatasetKind::cifar100);
  CHECK(parse_config("{}", {"optim.name=adamw"}).optim.name == OptimizerKind::adamw);
  CHECK(parse_config("{}", {"schedule.name=onecycle"}).schedule.name == ScheduleKind::onecycle);
  CHECK(parse_config("{}", {"train.on_nonfinite=skip"}).train.on_nonfinite == NonFinitePolicy::skip);
  CHECK(parse_config("{}", {"parallel.mode=dp"}).parallel.mode == ParallelMode::dp);
  CHECK(std::string(config_name(ScheduleKind::multistep)) == "multistep");
  CHECK(parse_config_name<OptimizerKind>("adam", "optim.name") == OptimizerKind::adam);
  CHECK_THAT(error_of([] { parse_config_name<Precision>("fp8", "precision"); }),
             Catch::StartsWith("precision: expected one of fp32, bf16, fp16, found \"fp8\""));
}

TEST_CASE("config: train.cuda_graphs refuses what a captured step cannot hold, naming both keys", "[cpu]") {
  struct Case {
    std::vector<std::string> overrides;
    std::vector<std::string> must_contain;
  };
  const std::vector<Case> cases = {
      {{"device=cpu"},
       {"override 'train.cuda_graphs=true': train.cuda_graphs: true needs a CUDA device", "device = cpu",
        "(device set by override 'device=cpu')"}},
      {{"parallel.mode=ddp"}, {"train.cuda_graphs: true is not supported with parallel.mode = ddp yet"}},
      {{"parallel.mode=dp"}, {"parallel.mode = dp"}},
      {{"precision=fp16"},
       {"train.cuda_graphs: true cannot be used with precision fp16", "GradScaler", "found_inf",
        "use precision bf16 or fp32"}},
      {{"train.accumulation_steps=2"}, {"train.cuda_graphs: true needs train.accumulation_steps = 1, found 2"}},
      {{"train.on_nonfinite=skip"}, {"train.cuda_graphs: true needs train.on_nonfinite = stop"}},
      {{"profile.enabled=true"}, {"train.cuda_graphs: true cannot be profiled"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> overrides = {"train.cuda_graphs=true"};
    overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
    INFO(c.overrides.front());
    const std::string msg = error_of([&] { parse_config("{}", overrides, "runs.json"); });
    INFO("message: " << msg);
    for (const auto& piece : c.must_contain) CHECK(msg.find(piece) != std::string::npos);
  }
  // Allowed: bf16, adam, the defaults' device auto, a GPU.
  for (const std::vector<std::string>& ok :
       {std::vector<std::string>{"precision=bf16", "optim.name=adam"}, std::vector<std::string>{"device=cuda:0"}}) {
    std::vector<std::string> overrides = {"train.cuda_graphs=true"};
    overrides.insert(overrides.end(), ok.begin(), ok.end());
    CHECK(parse_config("{}", overrides, "runs.json").train.cuda_graphs);
  }
  CHECK_FALSE(ExperimentConfig{}.train.cuda_graphs);
}
