#pragma once
// Scratch files for tests: a fresh directory that is removed with everything in it at scope exit,
// and reading back a file a test (or the code under test) wrote into it.
//
//   ember::testing::TempDir dir;                                  // under the system temp dir
//   ember::testing::TempDir shm(ember::testing::TempStorage::kMemory);  // /dev/shm when usable
//   save_checkpoint(ck, dir.file("a.ckpt"));
//   CHECK(ember::testing::read_text(dir.path() / "log.txt") == "...");
//
// The directory is made with mkdtemp, so two TempDirs (in one process, or in concurrent test
// processes) never share or remove each other's directory, and nothing existing is ever deleted.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <ember/core/error.h>

namespace ember::testing {

/// Where a TempDir is created.
enum class TempStorage {
  kDisk,  ///< under std::filesystem::temp_directory_path() ($TMPDIR or /tmp)
  kMemory,  ///< under /dev/shm when it exists and is writable (falls back to kDisk): tests that
            ///< write thousands of small files run in milliseconds there instead of seconds
};

/// A fresh, empty directory that exists for the lifetime of the object; removed recursively by
/// the destructor (which never throws: a failure is only reported on stderr). Not copyable, since
/// two owners would remove it twice.
class TempDir {
 public:
  /// Creates "<base>/ember_test_<pid>_XXXXXX"; throws ember::Error naming the base directory when
  /// it cannot be created.
  explicit TempDir(TempStorage storage = TempStorage::kDisk) {
    std::error_code ec;
    const bool shm = storage == TempStorage::kMemory && std::filesystem::is_directory("/dev/shm", ec) &&
                     ::access("/dev/shm", W_OK) == 0;
    const std::filesystem::path base = shm ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
    std::string templ = (base / ("ember_test_" + std::to_string(::getpid()) + "_XXXXXX")).string();
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const char* made = ::mkdtemp(buf.data());
    EMBER_CHECK(made != nullptr, "TempDir: cannot create a directory '", templ, "' under '", base.string(),
                "': ", std::strerror(errno));
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) std::fprintf(stderr, "TempDir: could not remove '%s': %s\n", path_.c_str(), ec.message().c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// The directory (absolute).
  const std::filesystem::path& path() const { return path_; }
  /// The directory as a string.
  std::string str() const { return path_.string(); }
  /// The path of `name` (a file name or a relative path) inside the directory; nothing is created.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// The whole content of the file at `path`, byte for byte; REQUIREs that it can be opened.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  INFO("reading " << path.string());
  REQUIRE(f.is_open());
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace ember::testing
