#pragma once
// Errors and check macros. EMBER_CHECK is for user errors and is always on; EMBER_ASSERT guards
// internal invariants (a failure is a bug in ember); EMBER_DEBUG_ASSERT is EMBER_ASSERT in debug
// builds and nothing in release builds, for invariants checked on a hot path.
//
// Every check throws ember::Error. Its what() is two lines:
//
//   matmul: expected a 2-D tensor for 'a', got shape [3, 4, 5]
//     at autograd/ops_nn.cpp:33
//
// The first line is for the user: what was expected, what was found and where, in the user's terms.
// The second is for bug reports: the source location, relative to ember's source root, and for a
// check written without a message (and for internal asserts) the failed condition.
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

/// The one exception type ember throws.
class Error : public std::runtime_error {
 public:
  /// An error without a source location: what() == message().
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  /// An error thrown by a check: what() == message + "\n  at <file>:<line>" (+ " (<condition>)").
  Error(const std::string& message, const std::string& file, int line, const std::string& condition = "")
      : std::runtime_error(message + "\n  at " + file + ":" + std::to_string(line) +
                           (condition.empty() ? "" : " (" + condition + ")")),
        message_(message),
        file_(file),
        condition_(condition),
        line_(line) {}
  /// The user's line: what went wrong, without the source location (what programs print).
  const std::string& message() const { return message_; }
  /// Source file of the check that threw, relative to ember's source root ("" when none).
  const std::string& file() const { return file_; }
  /// Source line of the check that threw (0 when none).
  int line() const { return line_; }
  /// The failed condition, kept for internal assertions and failed library calls (a bug or the
  /// system, not the user's input); "" for a user-facing check.
  const std::string& condition() const { return condition_; }

 private:
  std::string message_;
  std::string file_;
  std::string condition_;
  int line_ = 0;
};

/// What a program prints for an exception it cannot go on after. A user-facing check's error
/// (EMBER_CHECK, EMBER_FAIL: bad input, a full disk, a dead peer) is the user's line alone; an
/// internal assertion or failed library call, any other exception, and every error while EMBER_DEBUG
/// is set (and not "0") keep the source location a bug report needs.
inline std::string error_text(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  const char* debug = std::getenv("EMBER_DEBUG");
  const bool want_location = debug != nullptr && *debug != '\0' && std::string(debug) != "0";
  if (error == nullptr || want_location || !error->condition().empty()) return e.what();
  return error->message();
}

namespace detail {
/// `file` as written by __FILE__, made relative to ember's source root. The library is compiled with
/// -fmacro-prefix-map, which already strips the root; headers compiled into a user's program name the
/// installed (".../include/ember/core/x.h") or build-tree (".../include-root/ember/core/x.h") path.
inline std::string source_relative(const char* file) {
  const std::string f(file);
  for (const char* marker : {"/include-root/ember/", "/include/ember/"}) {
    const size_t at = f.rfind(marker);
    if (at != std::string::npos) return f.substr(at + std::char_traits<char>::length(marker));
  }
  return f;
}

inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest> void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}

/// Builds the message and throws. Kept out of line of the check so the fast path stays small.
/// `kind` is the macro's name; the condition is shown only when the check has no message or is an
/// internal assertion.
template <typename... Args>
[[noreturn]] void throw_error(const char* kind, const char* expr, const char* file, int line, const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  const std::string k(kind);
  const bool internal = k == "EMBER_ASSERT" || k == "EMBER_DEBUG_ASSERT";
  std::string condition;
  if (sizeof...(args) == 0) {
    os << k << "(" << expr << ") failed";
  } else if (internal || (k != "EMBER_CHECK" && k != "EMBER_FAIL")) {
    condition = k + "(" + expr + ")";  // bugs and library calls: the expression helps the report
  }
  throw Error(os.str(), source_relative(file), line, condition);
}
}  // namespace detail
}  // namespace ember

/// User-facing check: EMBER_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got ", a.shape_str())
#define EMBER_CHECK(cond, ...)                                                               \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::ember::detail::throw_error("EMBER_CHECK", #cond, __FILE__, __LINE__, ##__VA_ARGS__); \
  } while (0)

/// Internal invariant; a failure is a bug in ember, not in the caller.
#define EMBER_ASSERT(cond, ...)                                                                                   \
  do {                                                                                                            \
    if (!(cond)) [[unlikely]]                                                                                     \
      ::ember::detail::throw_error("EMBER_ASSERT", #cond, __FILE__, __LINE__, "internal error: ", ##__VA_ARGS__); \
  } while (0)

/// EMBER_ASSERT in debug builds only: for invariants the front functions already guarantee, checked
/// again on a hot path (inside kernels' launchers and loops).
#ifdef NDEBUG
#define EMBER_DEBUG_ASSERT(cond, ...) \
  do {                                \
    (void)sizeof(!(cond));            \
  } while (0)
#else
#define EMBER_DEBUG_ASSERT(cond, ...)                                               \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      ::ember::detail::throw_error("EMBER_DEBUG_ASSERT", #cond, __FILE__, __LINE__, \
                                   "internal error: ", ##__VA_ARGS__);              \
  } while (0)
#endif

/// Unconditional error with a message.
#define EMBER_FAIL(...) ::ember::detail::throw_error("EMBER_FAIL", "", __FILE__, __LINE__, __VA_ARGS__)
