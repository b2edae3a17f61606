#pragma once
// Shared by the fuzz harnesses in tests/fuzz/ (docs/fuzzing.md).
//
// Each harness defines `bool fuzz_one(const uint8_t* data, size_t size)`: it hands the bytes to
// one of ember's readers and returns true when they loaded, false when the reader raised
// ember::Error with a message naming the file (or source) it read. Anything else breaks the
// contract and aborts with a description: another exception type, an error that does not say
// which file, a crash, a hang, a sanitizer report. The same source is compiled twice:
//   - with libFuzzer (-fsanitize=fuzzer, EMBER_FUZZ=ON): LLVMFuzzerTestOneInput calls fuzz_one;
//   - in the regular build, with replay_main.cpp: every file of the seed corpus and of the
//     regression inputs is replayed by a ctest test (tests/fuzz/CMakeLists.txt); a seed named
//     valid-* must load, one named invalid-* must be refused.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <ember/core/error.h>

namespace ember::fuzz {

bool fuzz_one(const uint8_t* data, size_t size);

/// Reports a broken contract and aborts (libFuzzer then saves the input as a crash).
[[noreturn]] inline void violation(const std::string& what) {
  std::fprintf(stderr, "ember fuzz: contract violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// The user line of the last ember::Error a harness caught (the replay driver shows it).
inline std::string& last_error() {
  static std::string text;
  return text;
}

/// The error must name `needle` (the file's path, or the config's source) in its user line.
inline void expect_names(const Error& e, const std::string& needle) {
  last_error() = e.message();
  if (e.message().find(needle) == std::string::npos)
    violation("the error does not name '" + needle + "': " + e.message());
}

/// A scratch directory for the whole process (the readers take paths): under /dev/shm when it is
/// writable, else $TMPDIR or /tmp; removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* t = std::getenv("TMPDIR");
      base = t != nullptr && *t != '\0' ? t : "/tmp";
    }
    std::string templ = base + "/ember-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) violation("cannot create a scratch directory under " + base);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

/// Writes the bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) violation("cannot write the scratch file " + path);
  if (size > 0 && std::fwrite(data, 1, size, f) != size) violation("cannot write the scratch file " + path);
  if (std::fclose(f) != 0) violation("cannot close the scratch file " + path);
  return path;
}

}  // namespace ember::fuzz

// libFuzzer's entry point, in each harness's source (the replay driver defines EMBER_FUZZ_NO_ENTRY
// and calls fuzz_one itself).
#ifndef EMBER_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)ember::fuzz::fuzz_one(data, size);
  return 0;
}
#endif
