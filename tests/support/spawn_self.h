#pragma once
// Runs this test binary again as a child process restricted to one hidden test case: the way the
// kill / SIGTERM tests get a real process to interrupt that computes exactly what this one does.
//
//   TEST_CASE("x: child half", "[.x_child]") { ... reads EMBER_X_DIR ... }
//   const pid_t pid = ember::testing::spawn_self("[.x_child]", {"EMBER_X_DIR=" + dir.str()});
//   ... ::kill(pid, SIGTERM); ::waitpid(pid, &status, 0); ...
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace ember::testing {

/// Starts /proc/self/exe with the Catch test spec `filter` (e.g. "[.resume_child]") and returns
/// its pid; the caller waits for it. The child's environment is this process's with the
/// "NAME=value" entries of `env` added, each replacing a variable of the same name. When
/// `output_path` is not empty the child's stdout and stderr both go to that file (created or
/// truncated); otherwise they are this process's.
inline pid_t spawn_self(const std::string& filter, const std::vector<std::string>& env,
                        const std::string& output_path = "") {
  std::vector<std::string> env_store = env;
  for (const std::string& s : env) {
    INFO("spawn_self: environment entry '" << s << "'");
    REQUIRE(s.find('=') != std::string::npos);
    REQUIRE(s.find('=') > 0);
  }
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& s) {
      const std::string_view name_eq = std::string_view(s).substr(0, s.find('=') + 1);  // "NAME="
      return entry.substr(0, name_eq.size()) == name_eq;
    });
    if (!replaced) env_store.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string self = std::filesystem::read_symlink("/proc/self/exe").string(), spec = filter;
  char* argv[] = {self.data(), spec.data(), nullptr};
  posix_spawn_file_actions_t actions;
  REQUIRE(::posix_spawn_file_actions_init(&actions) == 0);
  if (!output_path.empty()) {
    REQUIRE(::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                               O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0);
    REQUIRE(::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO) == 0);
  }
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv, envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  INFO("spawn_self: posix_spawn of " << self << " " << spec << " returned " << rc);
  REQUIRE(rc == 0);
  return pid;
}

}  // namespace ember::testing
