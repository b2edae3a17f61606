#pragma once
// The experiment-config schema: one table row per key (path, kind, range, default, doc, the
// struct field it fills). Everything in train/config.cpp is driven by it (validation of a file,
// typing of overrides, to_json, config_key_paths) and docs/config.md is written from it; the
// tests check that the doc, the table and the ExperimentConfig defaults agree.
// Deliberately free of nlohmann::json so it can be installed and included without it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <ember/train/config.h>

namespace ember::train {

/// What a key's value is. Int: int64 (3.0 accepted, 3.5 not); UInt64: non-negative integer up to
/// 2^64-1; Float: any finite number; Enum: a string out of `choices`; IntList: JSON array of
/// integers; FloatPair: JSON array of exactly two numbers; OptionalFloat: null or a number;
/// StringList: JSON array of strings (an override may also say a,b,c).
enum class KeyKind { Int, UInt64, Float, Bool, String, Enum, IntList, FloatPair, OptionalFloat, StringList };

/// One end of a numeric range; `open` excludes the value itself.
struct Bound {
  double value = 0;
  bool open = false;
};

/// An enum field (model.name, optim.name, precision, ...): its value as the index of its spelling
/// in KeySpec::choices, which lists ConfigNames<E> in the enum's order.
struct EnumField {
  size_t (*get)(const ExperimentConfig&) = nullptr;
  void (*set)(ExperimentConfig&, size_t) = nullptr;
};

/// The struct field a key fills: a function giving a reference into the config (its type tells
/// the C++ type of the value), or an EnumField. An Enum key whose field is a std::string
/// (parallel.backend, parallel.algorithm: the names parallel::InitOptions takes) holds the spelling.
using FieldRef =
    std::variant<int64_t& (*)(ExperimentConfig&), uint64_t& (*)(ExperimentConfig&), double& (*)(ExperimentConfig&),
                 bool& (*)(ExperimentConfig&), std::string& (*)(ExperimentConfig&),
                 std::vector<int64_t>& (*)(ExperimentConfig&), std::pair<double, double>& (*)(ExperimentConfig&),
                 std::optional<double>& (*)(ExperimentConfig&), std::vector<std::string>& (*)(ExperimentConfig&),
                 EnumField>;

/// One key of the schema.
struct KeySpec {
  std::string path{};  // "optim.lr"
  KeyKind kind = KeyKind::String;
  std::optional<Bound> lo{}, hi{};  // numeric kinds; per element for IntList / FloatPair
  std::vector<std::string> choices{};  // Enum
  std::string default_json{};  // the ExperimentConfig default, as to_json writes it
  std::string doc{};  // one line for docs/config.md
  FieldRef field{};
  /// A rule beyond kind and range (6k+4 depths, the device syntax, ascending milestones), checked
  /// on the config after the value is stored; nullptr: none. `rule` then replaces the generated
  /// expected-text in messages.
  bool (*valid)(const ExperimentConfig&) = nullptr;
  std::string rule{};
};

/// The schema, in documentation order (top-level keys first, then each object's keys).
const std::vector<KeySpec>& config_schema();
/// The key with this exact path, or nullptr.
const KeySpec* find_key_spec(std::string_view path);
/// The objects that hold keys ("model", "data", ...), in schema order.
const std::vector<std::string>& config_object_paths();
/// What a valid value looks like, as error messages and docs/config.md say it:
/// "an integer >= 1", "a number in [0, 1)", "one of sgd, adam, adamw", ...
std::string expected_text(const KeySpec& spec);

/// Edit distance (insertions, deletions, substitutions) between two strings.
size_t levenshtein(std::string_view a, std::string_view b);
/// The text after "<path>: unknown key" for a path that is not in the schema: "; did you mean
/// optim.lr?" when a key is close enough, else the valid keys of the nearest enclosing object.
std::string unknown_key_hint(const std::string& path);

}  // namespace ember::train
