#pragma once
// example_cli.h: the command line of ember's example programs (examples/mnist, examples/cifar):
// flag parsing, usage errors and exit statuses. What they share beyond it (the flags of every run,
// the parallel set-up, --metrics-out) is in example_run.h beside it; the training itself is
// train::Trainer's.
// Header-only and written against the public API <ember/ember.h> only, so that an example still
// builds on its own against an installed ember (its CMakeLists.txt adds this folder to the include
// path).
#include <ember/ember.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember_examples {

// ---------------------------------------------------------------------------------------------
// Command line

/// A bad command line: main() prints the message and the usage text and exits with status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Missing or unreadable data: main() prints the message alone (it already says how to get the
/// data) and exits with status 1.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// V as a whole decimal integer of at least MIN_VALUE; otherwise a UsageError naming FLAG and V.
inline int64_t parse_int(const std::string& flag, const std::string& v, int64_t min_value) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) throw UsageError(flag + " expects an integer, got '" + v + "'");
  if (out < min_value) throw UsageError(flag + " must be at least " + std::to_string(min_value) + ", got " + v);
  return out;
}

/// V as a finite double, or nothing when V is empty, has trailing characters or overflows.
inline std::optional<double> parse_finite_double(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double out = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(out)) return std::nullopt;
  return out;
}

/// V as a number > 0; otherwise a UsageError that says whether V was no number or not positive.
inline double parse_positive_double(const std::string& flag, const std::string& v) {
  const std::optional<double> out = parse_finite_double(v);
  if (!out) throw UsageError(flag + " expects a number, got '" + v + "'");
  if (!(*out > 0)) throw UsageError(flag + " must be positive, got " + v);
  return *out;
}

/// Checks a --device value's spelling (auto, cpu, cuda or cuda:N) and returns it; whether the
/// device exists is pick_device()'s business, after parsing.
inline std::string parse_device_flag(const std::string& v) {
  if (v != "auto" && v != "cpu" && v != "cuda" && v.rfind("cuda:", 0) != 0)
    throw UsageError("--device expects auto, cpu, cuda or cuda:N, got '" + v + "'");
  if (v.rfind("cuda:", 0) == 0) parse_int("--device cuda:N", v.substr(5), 0);
  return v;
}

/// Called with (flag, value) for one flag of the command line; throws UsageError on a bad value.
using FlagHandler = std::function<void(const std::string& flag, const std::string& value)>;

/// One flag of the command line: its name ("--epochs"), its handler, and whether it takes a value
/// (a switch such as --data-parallel does not; its handler gets an empty value).
struct Flag {
  std::string name;
  FlagHandler handler;
  bool takes_value = true;
};

/// Walks argv[1..argc): --help or -h prints USAGE to stdout and exits 0; every other argument must
/// be one of FLAGS, with its value either inline (--flag=value) or as the next argument (none for
/// a switch), and goes to that flag's handler. Unknown flags, missing values, empty values and a
/// value given to a switch are UsageErrors naming the flag.
inline void parse_flags(int argc, char** argv, const std::string& usage, const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::fputs(usage.c_str(), stdout);
      std::exit(0);
    }
    const auto eq = flag.find('=');
    const bool has_inline = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    const Flag* f = nullptr;
    for (const Flag& candidate : flags)
      if (candidate.name == flag) f = &candidate;
    if (f == nullptr) throw UsageError("unknown flag '" + flag + "'");
    if (!f->takes_value) {
      if (has_inline) throw UsageError(flag + " takes no value, got '" + value + "'");
      f->handler(flag, value);
      continue;
    }
    if (!has_inline) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      value = argv[++i];
    }
    // The handler first: a numeric or enumerated flag says what it expects, which is more useful
    // than "needs a non-empty value"; only the free-text flags (paths) reach the check below.
    f->handler(flag, value);
    if (value.empty()) throw UsageError(flag + " needs a non-empty value");
  }
}

/// The device for a --device value: "auto" is the first usable GPU, else the CPU; any other
/// spelling must be usable in this build and on this machine, or it is a UsageError.
inline ember::Device pick_device(const std::string& spec) {
  if (spec == "auto") return ember::Device::best();
  ember::Device d(spec);
  try {
    d.validate();
  } catch (const ember::Error& e) {
    throw UsageError("--device " + spec + " cannot be used here: " + e.message());
  }
  return d;
}

/// Runs BODY (parsing and training) and turns its exceptions into the examples' exit statuses:
/// 2 for a UsageError (message, blank line, USAGE), 1 for a DataError (message) or any other
/// error ("error: " and the message, ember::error_text: the source location only for a bug or
/// with EMBER_DEBUG=1); each message goes to stderr prefixed with "PROGRAM: ".
template <class Body> int run_main(const char* program, const std::string& usage, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program, e.what(), usage.c_str());
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, ember::error_text(e).c_str());
    return 1;
  }
}

}  // namespace ember_examples
