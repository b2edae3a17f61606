// Experiment configs: JSON parsing, overrides, validation, to_json and the data-availability
// check, all driven by the schema table in train/config_schema.cpp.
#include <ember/train/config.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include <ember/core/error.h>
#include <ember/train/config_schema.h>

namespace ember::train {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Where each key's value came from ("runs.json", "override 'optim.lr=0.1'"); keys absent from
// the map kept their defaults. Cross-field errors name the origin of the keys involved.
using Origins = std::map<std::string, std::string>;

[[noreturn]] void fail(const std::string& message) { EMBER_FAIL(message); }

// Every problem of a config, so that one run reports them all: each key, override and cross-field
// rule is checked under `check`, which keeps the message of an ember::Error and goes on.
struct Problems {
  std::vector<std::string> messages;
  template <typename F> void check(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      messages.push_back(e.message());
    }
  }
  // One problem is thrown as it is; several as a count (after the config's source) and one line each.
  void throw_if_any(const std::string& source) const {
    if (messages.empty()) return;
    if (messages.size() == 1) fail(messages.front());
    std::string text = source + ": " + std::to_string(messages.size()) + " problems:";
    for (const auto& m : messages) text += "\n  " + m;
    fail(text);
  }
};

// Compact JSON of `v` appended to `out`, stopping once `out` is longer than `limit`. Not json::dump:
// that recurses once per nesting level (a config nesting 100000 arrays overflowed the stack) and
// writes all of a large value only for it to be cut; each level here adds a character, so the
// recursion stays within `limit` levels.
void quote_json(const json& v, std::string& out, size_t limit) {
  if (v.is_array() || v.is_object()) {
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (v.is_object()) out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
      quote_json(it.value(), out, limit);
    }
    out += v.is_array() ? ']' : '}';
  } else {
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);  // never throw on bad UTF-8
  }
}

// A found value as messages quote it: compact JSON, cut short when long.
std::string found_text(const json& v) {
  constexpr size_t kMaxChars = 60;
  std::string s;
  quote_json(v, s, kMaxChars);
  return s.size() <= kMaxChars ? s : s.substr(0, kMaxChars) + "...";
}

std::string format_number(double v) { return json(v).dump(); }

// The integer a JSON number holds exactly (3 and 3.0, not 3.5), or nothing.
std::optional<int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; every double below it with no fraction fits int64.
    if (std::isfinite(d) && d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<uint64_t> as_uint64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return std::nullopt;  // a negative integer
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= 0 && d < 18446744073709551616.0) return static_cast<uint64_t>(d);
  }
  return std::nullopt;
}

bool in_range(const KeySpec& s, double x) {
  if (s.lo && (s.lo->open ? !(x > s.lo->value) : !(x >= s.lo->value))) return false;
  if (s.hi && (s.hi->open ? !(x < s.hi->value) : !(x <= s.hi->value))) return false;
  return true;
}

// A finite number within the key's range, or nothing.
std::optional<double> as_ranged_number(const KeySpec& s, const json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d) || !in_range(s, d)) return std::nullopt;
  return d;
}

// Checks `v` against key `s` and stores it in `cfg`; errors start with `origin`.
void set_value(const KeySpec& s, const json& v, ExperimentConfig& cfg, const std::string& origin) {
  auto bad = [&] { fail(origin + ": " + s.path + ": expected " + expected_text(s) + ", found " + found_text(v)); };
  // An Enum key's text must be one of its choices, whether the field holds the enum or the text.
  std::optional<size_t> choice;
  if (s.kind == KeyKind::Enum) {
    if (!v.is_string()) bad();
    const auto at = std::find(s.choices.begin(), s.choices.end(), v.get<std::string>());
    if (at == s.choices.end()) bad();
    choice = static_cast<size_t>(at - s.choices.begin());
  }
  std::visit(
      [&](auto field) {
        if constexpr (std::is_same_v<decltype(field), EnumField>) {
          field.set(cfg, *choice);
        } else {
          using T = std::remove_reference_t<decltype(field(cfg))>;
          if constexpr (std::is_same_v<T, int64_t>) {
            const auto i = as_int64(v);
            if (!i || !in_range(s, static_cast<double>(*i))) bad();
            field(cfg) = *i;
          } else if constexpr (std::is_same_v<T, uint64_t>) {
            const auto u = as_uint64(v);
            if (!u) bad();
            field(cfg) = *u;
          } else if constexpr (std::is_same_v<T, double>) {
            const auto d = as_ranged_number(s, v);
            if (!d) bad();
            field(cfg) = *d;
          } else if constexpr (std::is_same_v<T, bool>) {
            if (!v.is_boolean()) bad();
            field(cfg) = v.get<bool>();
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (!v.is_string()) bad();
            field(cfg) = v.get<std::string>();
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            if (!v.is_array()) bad();
            std::vector<int64_t> out;
            for (const auto& e : v) {
              const auto i = as_int64(e);
              if (!i || !in_range(s, static_cast<double>(*i))) bad();
              out.push_back(*i);
            }
            field(cfg) = std::move(out);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            if (!v.is_array()) bad();
            std::vector<std::string> out;
            for (const auto& e : v) {
              if (!e.is_string()) bad();
              out.push_back(e.get<std::string>());
            }
            field(cfg) = std::move(out);
          } else if constexpr (std::is_same_v<T, std::pair<double, double>>) {
            if (!v.is_array() || v.size() != 2) bad();
            const auto a = as_ranged_number(s, v[0]), b = as_ranged_number(s, v[1]);
            if (!a || !b) bad();
            field(cfg) = {*a, *b};
          } else {
            static_assert(std::is_same_v<T, std::optional<double>>);
            if (v.is_null()) {
              field(cfg) = std::nullopt;
            } else {
              const auto d = as_ranged_number(s, v);
              if (!d) bad();
              field(cfg) = *d;
            }
          }
        }
      },
      s.field);
  if (s.valid && !s.valid(cfg)) bad();
}

// Key `s` of `cfg` as the JSON to_json writes.
ordered_json get_value(const KeySpec& s, ExperimentConfig& cfg) {
  return std::visit(
      [&](auto field) -> ordered_json {
        if constexpr (std::is_same_v<decltype(field), EnumField>) {
          return ordered_json(s.choices.at(field.get(cfg)));
        } else {
          const auto& value = field(cfg);
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::pair<double, double>>) {
            return ordered_json::array({value.first, value.second});
          } else if constexpr (std::is_same_v<T, std::optional<double>>) {
            return value ? ordered_json(*value) : ordered_json(nullptr);
          } else {
            return ordered_json(value);
          }
        }
      },
      s.field);
}

bool is_object_path(const std::string& path) {
  const auto& objs = config_object_paths();
  return std::find(objs.begin(), objs.end(), path) != objs.end();
}

void read_object(const json& obj, const std::string& prefix, const std::string& source, ExperimentConfig& cfg,
                 Origins& origins, Problems& problems);

// One key of an object (see read_object); throws on the first problem of a value, collects those
// of a nested object's keys.
void read_key(const std::string& key, const json& value, const std::string& prefix, const std::string& source,
              ExperimentConfig& cfg, Origins& origins, Problems& problems) {
  const std::string path = prefix.empty() ? key : prefix + "." + key;
  if (prefix.empty() && (key == "provenance" || key == "resolved")) {
    // Written by ember-train into a run's config.json; carries no settings.
    if (!value.is_object()) fail(source + ": " + key + ": expected an object, found " + found_text(value));
    return;
  }
  if (key.find('.') != std::string::npos && find_key_spec(path)) {
    fail(source + ": \"" + key + "\": unknown key; a file nests objects instead of dotted keys: write " + path +
         " as {\"" + path.substr(0, path.find('.')) + "\": {...}}");
  }
  if (const KeySpec* spec = find_key_spec(path)) {
    set_value(*spec, value, cfg, source);
    origins[path] = source;
  } else if (is_object_path(path)) {
    if (!value.is_object()) fail(source + ": " + path + ": expected an object, found " + found_text(value));
    read_object(value, path, source, cfg, origins, problems);
  } else {
    fail(source + ": " + path + ": unknown key" + unknown_key_hint(path));
  }
}

// Reads the keys of JSON object `obj` found at `prefix` ("" = the top level) into `cfg`.
void read_object(const json& obj, const std::string& prefix, const std::string& source, ExperimentConfig& cfg,
                 Origins& origins, Problems& problems) {
  for (auto it = obj.begin(); it != obj.end(); ++it)  // not a structured binding: the lambda uses it (clang 14)
    problems.check([&] { read_key(it.key(), it.value(), prefix, source, cfg, origins, problems); });
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The value text of an override as JSON, typed by the key: strings may be given bare
// (device=cuda:1) or as JSON literals (name="a b"); other kinds are parsed as JSON, and text that
// is not JSON stays a string so the type error quotes it ("found \"ten\"").
json override_value(const KeySpec& s, const std::string& text, const std::string& origin) {
  if (s.kind == KeyKind::String || s.kind == KeyKind::Enum) {
    if (text.empty() || text.front() != '"') {
      // A file's strings are checked by the JSON parser; a bare override's are not, and to_json
      // could not write them back.
      try {
        (void)json(text).dump();
      } catch (const json::type_error&) {
        fail(origin + ": " + s.path + ": expected UTF-8 text, found invalid bytes");
      }
      return json(text);
    }
    json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded() || !v.is_string())
      fail(origin + ": " + s.path + ": expected a JSON string literal after '\"', found " + text);
    return v;
  }
  if (s.kind == KeyKind::StringList && trim(text).rfind('[', 0) != 0) {
    // parallel.devices=cpu,cpu: bare comma-separated items.
    json list = json::array();
    std::string item;
    for (std::istringstream in(text); std::getline(in, item, ',');) list.push_back(trim(item));
    return list;
  }
  if ((s.kind == KeyKind::IntList || s.kind == KeyKind::FloatPair) && trim(text).rfind('[', 0) != 0) {
    // schedule.milestones=30,60 and optim.betas=0.9,0.999 as their JSON arrays, like the string lists.
    json v = json::parse("[" + text + "]", nullptr, /*allow_exceptions=*/false);
    return v.is_discarded() ? json(text) : v;
  }
  json v = json::parse(trim(text), nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? json(text) : v;
}

void apply_override(const std::string& text, ExperimentConfig& cfg, Origins& origins) {
  const std::string origin = "override '" + text + "'";
  const size_t eq = text.find('=');
  EMBER_CHECK(eq != std::string::npos, origin, ": expected key.path=value (e.g. optim.lr=0.1)");
  const std::string path = trim(text.substr(0, eq));
  EMBER_CHECK(!path.empty(), origin, ": empty key path; expected key.path=value (e.g. optim.lr=0.1)");
  const KeySpec* spec = find_key_spec(path);
  if (!spec) {
    if (is_object_path(path)) {
      std::string keys;
      for (const auto& s : config_schema())
        if (s.path.rfind(path + ".", 0) == 0) keys += (keys.empty() ? "" : ", ") + s.path;
      fail(origin + ": " + path + ": an object; override one of its keys: " + keys);
    }
    fail(origin + ": " + path + ": unknown key" + unknown_key_hint(path));
  }
  set_value(*spec, override_value(*spec, text.substr(eq + 1), origin), cfg, origin);
  origins[path] = origin;
}

// Rules between keys, checked once the file and every override are applied.
void check_cross_fields(const ExperimentConfig& c, const Origins& origins, Problems& problems) {
  auto origin = [&](const std::string& path) {
    auto it = origins.find(path);
    return it == origins.end() ? std::string() : it->second;
  };
  // The message starts with where `primary` was set (or `other`, when primary kept its default)
  // and names the other key's origin when it differs.
  auto add_pair_problem = [&](const std::string& primary, const std::string& other, const std::string& text) {
    const std::string o1 = origin(primary), o2 = origin(other);
    std::string msg = (o1.empty() ? (o2.empty() ? "defaults" : o2) : o1) + ": " + primary + ": " + text;
    if (!o1.empty() && !o2.empty() && o1 != o2) msg += " (" + other + " set by " + o2 + ")";
    problems.messages.push_back(msg);
  };
  if (c.optim.nesterov && c.optim.momentum <= 0) {
    add_pair_problem("optim.nesterov", "optim.momentum",
                     "true needs optim.momentum > 0, found optim.momentum = " + format_number(c.optim.momentum));
  }
  if (c.schedule.name == ScheduleKind::onecycle && c.schedule.warmup_epochs > 0) {
    add_pair_problem("schedule.warmup_epochs", "schedule.name",
                     "expected 0 with schedule.name = onecycle (it has its own warm-up), found " +
                         std::to_string(c.schedule.warmup_epochs));
  }
  // train.cuda_graphs: what a captured step cannot hold (docs/cuda_graphs.md).
  if (c.train.cuda_graphs) {
    const std::string key = "train.cuda_graphs";
    if (c.device == "cpu")
      add_pair_problem(key, "device", "true needs a CUDA device (CUDA graphs capture GPU work), found device = cpu");
    if (c.parallel.mode != ParallelMode::none)
      add_pair_problem(key, "parallel.mode",
                       std::string("true is not supported with parallel.mode = ") + config_name(c.parallel.mode) +
                           " yet (the gradient reduction is not capturable); use parallel.mode none");
    if (c.precision == Precision::fp16)
      add_pair_problem(key, "precision",
                       "true cannot be used with precision fp16: its GradScaler reads found_inf on the host every "
                       "step; use precision bf16 or fp32");
    if (c.train.accumulation_steps != 1)
      add_pair_problem(key, "train.accumulation_steps",
                       "true needs train.accumulation_steps = 1, found " + std::to_string(c.train.accumulation_steps) +
                           " (one captured step per batch)");
    if (c.train.on_nonfinite != NonFinitePolicy::stop)
      add_pair_problem(key, "train.on_nonfinite",
                       "true needs train.on_nonfinite = stop (skip reads each loss on the host before its backward)");
    if (c.profile.enabled)
      add_pair_problem(key, "profile.enabled",
                       "true cannot be profiled: a replay is one launch; set profile.enabled false");
  }
  // The model zoo's input shapes: mnist_cnn takes 1x28x28, the others 3x32x32 (CIFAR, synthetic).
  const bool mnist_images = c.data.dataset == DatasetKind::mnist;
  if ((c.model.name == ModelKind::mnist_cnn) != mnist_images) {
    add_pair_problem("model.name", "data.dataset",
                     std::string(config_name(c.model.name)) +
                         (mnist_images ? " takes 3x32x32 images (data.dataset cifar10, cifar100 or synthetic)"
                                       : " takes 1x28x28 images (data.dataset mnist)") +
                         ", found data.dataset = " + config_name(c.data.dataset));
  }
}

// 1-based line and column of byte `pos` (1-based, as nlohmann's parse_error::byte counts: the
// last character read) in `text`.
std::pair<size_t, size_t> line_column(const std::string& text, size_t pos) {
  const size_t index = std::min(pos == 0 ? 0 : pos - 1, text.size());
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + index, '\n'));
  const size_t nl = index == 0 ? std::string::npos : text.rfind('\n', index - 1);
  const size_t column = nl == std::string::npos ? index + 1 : index - nl;
  return {line, column};
}

}  // namespace

ExperimentConfig parse_config(const std::string& json_text, const std::vector<std::string>& overrides,
                              const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    const auto [line, column] = line_column(json_text, e.byte);
    // nlohmann's text is "[json.exception.parse_error.101] parse error at line L, column C: what";
    // keep only "what".
    std::string what = e.what();
    if (size_t at = what.find("column "); at != std::string::npos && what.find(": ", at) != std::string::npos)
      what = what.substr(what.find(": ", at) + 2);
    fail(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": malformed JSON: " + what);
  } catch (const json::exception& e) {
    fail(source + ": malformed JSON: " + e.what());  // e.g. a number too large for a double
  }
  if (!doc.is_object()) fail(source + ": expected a JSON object at the top level, found " + found_text(doc));
  ExperimentConfig cfg;
  Origins origins;
  Problems problems;
  read_object(doc, "", source, cfg, origins, problems);
  for (const auto& o : overrides) problems.check([&] { apply_override(o, cfg, origins); });
  // Rules between keys only once every key holds what its file or override said (a key that was
  // refused keeps its default, which could break a rule the config itself does not).
  if (problems.messages.empty()) check_cross_fields(cfg, origins, problems);
  problems.throw_if_any(source);
  return cfg;
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  EMBER_CHECK(!fs::is_directory(path, ec), "cannot read config file '", path, "': it is a directory");
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.is_open(), "cannot read config file '", path, "': ", std::strerror(errno));
  std::ostringstream text;
  text << f.rdbuf();
  EMBER_CHECK(!f.bad(), "cannot read config file '", path, "': read error");
  return parse_config(text.str(), overrides, path);
}

std::string to_json(const ExperimentConfig& config, int indent) {
  ExperimentConfig copy = config;  // the field accessors hand out mutable references
  ordered_json root = ordered_json::object();
  for (const auto& s : config_schema()) {
    ordered_json* node = &root;
    size_t start = 0;
    for (size_t dot = s.path.find('.'); dot != std::string::npos; dot = s.path.find('.', start)) {
      node = &(*node)[s.path.substr(start, dot - start)];
      start = dot + 1;
    }
    (*node)[s.path.substr(start)] = get_value(s, copy);
  }
  return root.dump(indent);
}

std::vector<std::string> config_key_paths() {
  std::vector<std::string> out;
  for (const auto& s : config_schema()) out.push_back(s.path);
  return out;
}

void throw_unknown_config_name(const std::string& key, const std::string& text,
                               const std::vector<std::string>& choices) {
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
  EMBER_FAIL(key, ": expected one of ", list, ", found \"", text, "\"");
}

BatchScaling resolve_batch_scaling(const ExperimentConfig& config, int64_t processes) {
  EMBER_CHECK(processes >= 1, "resolve_batch_scaling: expected processes >= 1, found ", processes);
  const int64_t accumulation = config.train.accumulation_steps;
  const int64_t per_step = processes * accumulation;  // batches in one optimizer step
  BatchScaling s;
  if (config.data.global_batch_size > 0) {
    const int64_t g = config.data.global_batch_size;
    const int64_t below = g / per_step * per_step, above = below + per_step;
    EMBER_CHECK(g % per_step == 0, "data.global_batch_size ", g, " does not divide into ", processes, " process",
                processes == 1 ? "" : "es", " x train.accumulation_steps ", accumulation, " = ", per_step,
                " batches of equal size: choose a multiple of ", per_step, " (",
                below > 0 ? std::to_string(below) + " or " : std::string(), above, ")");
    s.per_process = g / per_step;
  } else {
    s.per_process = config.data.batch_size;
  }
  s.global = s.per_process * per_step;
  const double base = config.optim.lr;
  const auto ratio = static_cast<double>(s.global) / static_cast<double>(config.optim.reference_batch_size);
  const std::string fraction = std::to_string(s.global) + "/" + std::to_string(config.optim.reference_batch_size);
  char text[160];
  switch (config.optim.lr_scaling) {
    case LrScaling::none:
      s.lr = base;
      break;
    case LrScaling::linear:
      s.lr = base * ratio;
      std::snprintf(text, sizeof text, "lr %g x %s (linear) = %g", base, fraction.c_str(), s.lr);
      s.lr_text = text;
      break;
    case LrScaling::sqrt:
      s.lr = base * std::sqrt(ratio);
      std::snprintf(text, sizeof text, "lr %g x sqrt(%s) = %g", base, fraction.c_str(), s.lr);
      s.lr_text = text;
      break;
  }
  return s;
}

std::string default_data_path(const DataConfig& data) {
  if (!data.path.empty()) return data.path;
  switch (data.dataset) {
    case DatasetKind::mnist:
      return "/usr/share/datasets/fashion-mnist";
    case DatasetKind::cifar10:
      return "data/cifar10";
    case DatasetKind::cifar100:
      return "data/cifar100";
    case DatasetKind::synthetic:
      return "";
  }
  return "";
}

}  // namespace ember::train
