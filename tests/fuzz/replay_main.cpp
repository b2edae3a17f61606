// The replay driver: runs a fuzz harness's fuzz_one (tests/fuzz/fuzz_*.cpp, compiled without
// libFuzzer) on every file under the directories or files given, in name order. This is how the
// seed corpus (tests/fuzz/corpus/<name>/) and every crash the fuzzers found
// (tests/fuzz/regressions/<name>/) run in the regular test suite.
//
//   ember_fuzz_replay_<name> DIR_OR_FILE...
//
// A file named valid-* must load (fuzz_one returns true) and one named invalid-* must be refused
// with ember::Error; any other file only has to keep the contract (fuzz_support.h). Exits 0 when
// every file did, 1 naming the file otherwise (a contract violation aborts with its description).
// A path that does not exist is skipped, but there must be at least one file in all.
//
// Each input runs on a thread with a 512 KiB stack (kStackBytes): a reader's stack use must not
// grow with its input, and a small stack makes a recursion per nesting level crash on an input
// of a few KB instead of a few hundred. And as under libFuzzer's -malloc_limit_mb (run_fuzzers.sh),
// a single allocation over 256 MiB (EMBER_FUZZ_MALLOC_LIMIT_MB) aborts naming its size: a corrupt
// length field must not be believed. That check replaces malloc & co. in this program, so it is
// left out of sanitizer builds, whose runtimes own malloc (libFuzzer's limit applies there).
#include <errno.h>
#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define EMBER_FUZZ_NO_ENTRY
#include "fuzz_support.h"

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EMBER_REPLAY_MALLOC_LIMIT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define EMBER_REPLAY_MALLOC_LIMIT 0
#endif
#endif
#if !defined(EMBER_REPLAY_MALLOC_LIMIT) && defined(__GLIBC__)
#define EMBER_REPLAY_MALLOC_LIMIT 1
#endif

#if EMBER_REPLAY_MALLOC_LIMIT
// glibc's own allocator, under the names it exports for this purpose.
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {

size_t malloc_limit() {
  static const size_t limit = [] {
    const char* mb = std::getenv("EMBER_FUZZ_MALLOC_LIMIT_MB");
    return (mb != nullptr && *mb != '\0' ? std::strtoull(mb, nullptr, 10) : 256) << 20;
  }();
  return limit;
}

void check_size(size_t n) {
  if (n <= malloc_limit()) return;
  char msg[160];
  const int len = std::snprintf(msg, sizeof msg,
                                "replay: an allocation of %zu bytes, over the %zu MiB limit "
                                "(EMBER_FUZZ_MALLOC_LIMIT_MB): out of memory\n",
                                n, malloc_limit() >> 20);
  if (len > 0) (void)!::write(2, msg, static_cast<size_t>(len));
  std::abort();
}

}  // namespace

extern "C" {
void* malloc(size_t n) {
  check_size(n);
  return __libc_malloc(n);
}
void* calloc(size_t count, size_t n) {
  if (n != 0 && count > SIZE_MAX / n) return nullptr;
  check_size(count * n);
  return __libc_calloc(count, n);
}
void* realloc(void* p, size_t n) {
  check_size(n);
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  check_size(n);
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  check_size(n);
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  check_size(n);
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}
#endif

namespace {

constexpr size_t kStackBytes = 512 * 1024;

struct Run {
  const std::vector<uint8_t>* bytes;
  bool loaded = false;
  std::string escaped;  // what() of an exception that left fuzz_one
};

void* run_one(void* arg) {
  auto* r = static_cast<Run*>(arg);
  try {
    r->loaded = ember::fuzz::fuzz_one(r->bytes->data(), r->bytes->size());
  } catch (const std::exception& e) {
    r->escaped = e.what();
  }
  return nullptr;
}

// fuzz_one on a thread of its own with a kStackBytes stack.
Run replay(const std::vector<uint8_t>& bytes) {
  Run r{&bytes, false, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, run_one, &r);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    run_one(&r);  // no thread to be had: run it here, on the main stack
  } else {
    pthread_join(t, nullptr);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      // tests/fuzz/regressions/<name>/ exists once a fuzzer has found something there.
      std::fprintf(stderr, "replay: %s: none (no such file or directory)\n", argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input files under the paths given\n");
    return 1;
  }
  int failed = 0, loaded = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: %s: cannot read\n", f.c_str());
      return 1;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    ember::fuzz::last_error().clear();
    const Run r = replay(bytes);
    if (!r.escaped.empty()) {
      std::fprintf(stderr, "replay: %s: an exception escaped the harness: %s\n", f.c_str(), r.escaped.c_str());
      ++failed;
      continue;
    }
    const bool ok = r.loaded;
    loaded += ok ? 1 : 0;
    const std::string name = f.filename().string();
    if (name.rfind("valid-", 0) == 0 && !ok) {
      std::fprintf(stderr, "replay: %s: expected to load (valid-*), it was refused: %s\n", f.c_str(),
                   ember::fuzz::last_error().c_str());
      ++failed;
    } else if (name.rfind("invalid-", 0) == 0 && ok) {
      std::fprintf(stderr, "replay: %s: expected to be refused (invalid-*), it loaded\n", f.c_str());
      ++failed;
    }
  }
  std::fprintf(stderr, "replay: %zu files, %d loaded, %zu refused, %d failed\n", files.size(), loaded,
               files.size() - static_cast<size_t>(loaded), failed);
  return failed == 0 ? 0 : 1;
}
