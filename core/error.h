#pragma once
// Errors and check macros. EMBER_CHECK is for user errors and is always on; EMBER_ASSERT guards
// internal invariants. Both throw ember::Error carrying the failed expression, file and line.
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

/// The one exception type ember throws. what() holds "message (expr at file:line)".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what), message_(what) {}
  /// what() = "<message> [<where>]"; message() is the text alone.
  Error(const std::string& message, const std::string& where)
      : std::runtime_error(message + " [" + where + "]"), message_(message) {}
  /// The message without the source location of the check that threw (what programs show users;
  /// what() keeps the location for bug reports).
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest> void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
/// Builds the message and throws. Kept out of line of the check so the fast path stays small.
template <typename... Args>
[[noreturn]] void throw_error(const char* kind, const char* expr, const char* file, int line, const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  if (sizeof...(args) == 0) os << kind << " failed";
  std::ostringstream where;
  where << kind << "(" << expr << ") at " << file << ":" << line;
  throw Error(os.str(), where.str());
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

/// Unconditional error with a message.
#define EMBER_FAIL(...) ::ember::detail::throw_error("EMBER_FAIL", "", __FILE__, __LINE__, __VA_ARGS__)
