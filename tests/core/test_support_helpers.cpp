// The shared test helpers in tests/support that other tests lean on to be right: TempDir
// (fresh, distinct, where asked, removed with its content), read_text (byte exact), bytes_of
// (row-major bytes of any view, bit patterns not values), error_of, and spawn_self (environment
// entries replaced by exact name, output redirected).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/kernels/factory.h>
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/spawn_self.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::TempDir;
using ember::testing::TempStorage;
namespace fs = std::filesystem;

TEST_CASE("TempDir: a fresh empty directory per object, removed with its content at scope exit", "[cpu][support]") {
  fs::path first, second;
  {
    TempDir a, b;
    first = a.path();
    second = b.path();
    CHECK(first != second);
    for (const TempDir* d : {&a, &b}) {
      REQUIRE(fs::is_directory(d->path()));
      CHECK(fs::is_empty(d->path()));
      CHECK(d->path().is_absolute());
      CHECK(d->path().parent_path() == fs::temp_directory_path());
      CHECK(d->str() == d->path().string());
    }
    CHECK(a.file("x/y.txt") == (first / "x" / "y.txt").string());
    CHECK_FALSE(fs::exists(a.file("x/y.txt")));  // file() only names a path
    fs::create_directories(first / "nested" / "deeper");
    std::ofstream(first / "nested" / "deeper" / "f.bin") << "content";
  }
  CHECK_FALSE(fs::exists(first));
  CHECK_FALSE(fs::exists(second));
}

TEST_CASE("TempDir: kMemory lives in /dev/shm when it is writable, else under the temp dir", "[cpu][support]") {
  TempDir mem(TempStorage::kMemory);
  std::error_code ec;
  const bool shm = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0;
  CHECK(mem.path().parent_path() == (shm ? fs::path("/dev/shm") : fs::temp_directory_path()));
  CHECK(fs::is_directory(mem.path()));
}

TEST_CASE("read_text: returns the file's bytes unchanged", "[cpu][support]") {
  TempDir dir;
  const std::string bytes("a\r\nb\0c\xff\n", 9);  // CR LF, an embedded NUL, a high byte
  std::ofstream(dir.path() / "t", std::ios::binary) << bytes;
  CHECK(ember::testing::read_text(dir.path() / "t") == bytes);
  std::ofstream(dir.path() / "empty", std::ios::binary).flush();
  CHECK(ember::testing::read_text(dir.file("empty")).empty());
}

TEST_CASE("bytes_of: row-major bytes of any view, bit patterns, not values", "[cpu][support]") {
  const Tensor m = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor t = m.transpose(0, 1);  // (3, 2): 1 4 2 5 3 6 in row-major order
  const std::vector<float> expected = {1, 4, 2, 5, 3, 6};
  std::vector<uint8_t> want(expected.size() * sizeof(float));
  std::memcpy(want.data(), expected.data(), want.size());
  CHECK(ember::testing::bytes_of(t) == want);
  // +0 and -0 compare equal as numbers; their bytes differ, which is what "bit for bit" needs.
  CHECK(ember::testing::bytes_of(from_vector(std::vector<float>{0.0f}, {1})) !=
        ember::testing::bytes_of(from_vector(std::vector<float>{-0.0f}, {1})));
}

TEST_CASE("error_of: returns the message of the ember::Error thrown", "[cpu][support]") {
  const std::string msg = ember::testing::error_of([] { EMBER_CHECK(1 + 1 == 3, "arithmetic at ", 42); });
  CHECK_THAT(msg, Catch::Contains("arithmetic at 42"));
}

// The child half of the spawn_self test: writes the variables it sees to EMBER_SPAWN_TEST_OUT and
// a line to stdout. Hidden: run only by the test below.
TEST_CASE("spawn_self: child that reports its environment", "[.support_child]") {
  const char* out = std::getenv("EMBER_SPAWN_TEST_OUT");
  REQUIRE(out != nullptr);
  int replaced_entries = 0;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "EMBER_SPAWN_TEST_REPLACE=", 25) == 0) ++replaced_entries;
  auto get = [](const char* name) { return std::string(std::getenv(name) ? std::getenv(name) : "<unset>"); };
  std::ofstream(out) << get("EMBER_SPAWN_TEST_REPLACE") << " " << replaced_entries << " "
                     << get("EMBER_SPAWN_TEST_REPLACE_LONGER") << " " << get("EMBER_SPAWN_TEST_KEEP") << "\n";
  std::printf("child stdout line\n");
  std::fflush(stdout);
}

TEST_CASE("spawn_self: replaces variables by exact name, keeps the rest, redirects output", "[cpu][support]") {
  TempDir dir;
  REQUIRE(::setenv("EMBER_SPAWN_TEST_REPLACE", "old", 1) == 0);
  REQUIRE(::setenv("EMBER_SPAWN_TEST_REPLACE_LONGER", "longer", 1) == 0);  // shares the prefix: kept
  REQUIRE(::setenv("EMBER_SPAWN_TEST_KEEP", "kept", 1) == 0);
  const std::string report = dir.file("env.txt"), output = dir.file("child.out");
  const pid_t pid = ember::testing::spawn_self(
      "[.support_child]", {"EMBER_SPAWN_TEST_REPLACE=new", "EMBER_SPAWN_TEST_OUT=" + report}, output);
  ::unsetenv("EMBER_SPAWN_TEST_REPLACE");
  ::unsetenv("EMBER_SPAWN_TEST_REPLACE_LONGER");
  ::unsetenv("EMBER_SPAWN_TEST_KEEP");
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child output:\n" << ember::testing::read_text(output));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(ember::testing::read_text(report) == "new 1 longer kept\n");
  CHECK_THAT(ember::testing::read_text(output), Catch::Contains("child stdout line"));
}
