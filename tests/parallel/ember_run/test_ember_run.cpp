// build/bin/ember-run run as a user runs it, launching ember_run_child (beside this file): the
// variables each rank gets, the "[rank k] " prefixes on the right stream, --log-dir, a failing or
// killed rank stopping the others and setting the exit status, SIGTERM/SIGINT forwarding, and
// bad command lines. Every run is bounded: ember-run is killed after kRunLimit.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ember/core/device.h>

#include "support/temp_dir.h"

#ifndef EMBER_RUN_PROGRAM
#error "EMBER_RUN_PROGRAM (the path of ember-run) must be defined by the build"
#endif

extern char** environ;

using Catch::Matchers::Contains;
using ember::testing::read_text;
using ember::testing::TempDir;

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRunLimit = std::chrono::seconds(20);

struct Result {
  int status = -1;  // waitpid's
  std::string out, err;
  double seconds = 0;
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
};

/// Runs ember-run with `args`; EMBER_RUN_TEST_DIR=`dir` and the entries of `env` ("NAME=value")
/// added to its environment. `during(pid)` runs on a second thread while the output is read.
/// `wrapper` (a program's absolute path and its arguments) runs ember-run as its last argument.
Result run(const std::vector<std::string>& args, const TempDir& dir, const std::vector<std::string>& env = {},
           const std::function<void(pid_t)>& during = {}, const std::vector<std::string>& wrapper = {}) {
  std::vector<std::string> argv_s = wrapper;
  argv_s.push_back(EMBER_RUN_PROGRAM);
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s{"EMBER_RUN_TEST_DIR=" + dir.str()};
  env_s.insert(env_s.end(), env.begin(), env.end());
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);  // later duplicates lose in getenv
  std::vector<char*> argv, envp;
  for (std::string& s : argv_s) argv.push_back(s.data());
  for (std::string& s : env_s) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  // A default SIGINT/SIGTERM disposition and mask, whatever the test runner has.
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const auto start = Clock::now();
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  REQUIRE(rc == 0);

  std::thread side;
  if (during) side = std::thread(during, pid);
  Result r;
  std::vector<pollfd> fds{{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[] = {&r.out, &r.err};
  bool killed = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (!killed && Clock::now() - start > kRunLimit) {
      ::kill(pid, SIGKILL);  // ember-run hangs: fail, but end (its children end by their own limit)
      killed = true;
    }
    if (::poll(fds.data(), fds.size(), 100) < 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  REQUIRE(::waitpid(pid, &r.status, 0) == pid);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (side.joinable()) side.join();
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK_FALSE(killed);
  return r;
}

/// The child program with its mode and arguments.
std::vector<std::string> child(std::vector<std::string> args) {
  args.insert(args.begin(), EMBER_RUN_CHILD);
  return args;
}
std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Waits (bounded) until `ranks` have written their ready file; returns their pids.
// Also runs on run()'s side thread, so it makes no Catch2 assertion (they are not thread-safe:
// ThreadSanitizer saw read_text's REQUIRE race with the main thread's); a rank whose file does not
// hold its pid within the 10 s is left out.
std::vector<pid_t> wait_ready(const TempDir& dir, const std::vector<int>& ranks) {
  std::vector<pid_t> pids;
  const auto until = Clock::now() + std::chrono::seconds(10);
  for (int r : ranks) {
    const auto path = dir.path() / ("ready_" + std::to_string(r));
    pid_t pid = 0;
    while (Clock::now() < until) {
      std::ifstream f(path);
      if (f >> pid && pid > 0) break;
      pid = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// True when no process has the pid any more (ember-run reaped it).
bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// True once `pid`, not ember-run's child (an orphan init adopts), has ended within `limit`: gone,
/// or a zombie its new parent has not reaped yet.
bool ended_within(pid_t pid, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("ember-run: every rank gets its variables, and its lines come back prefixed", "[multiproc]") {
  TempDir dir;
  // Stale variables of an outer Slurm job: the torchrun variables ember-run sets win.
  const Result r = run(child({"print"}), dir, {"SLURM_PROCID=7", "SLURM_NTASKS=9", "RANK=5", "WORLD_SIZE=6"}),
               ranks3 =
                   run(cat({"--nproc-per-node", "3"}, child({"print"})), dir, {"SLURM_PROCID=7", "SLURM_NTASKS=9"});
  CHECK(r.code() == 0);
  CHECK_THAT(r.out, Contains("[rank 0] rank=0 world=1 local=0 local_world=1 addr=127.0.0.1 port="));
  REQUIRE(ranks3.code() == 0);
  INFO("stdout:\n" << ranks3.out << "\nstderr:\n" << ranks3.err);
  const std::regex info_line(
      R"(\[rank (\d)\] rank=(\d) world=3 local=(\d) local_world=3 addr=127\.0\.0\.1 port=(\d+) source=torchrun)");
  std::set<int> ranks;
  std::set<std::string> ports;
  for (const std::string& line : lines_of(ranks3.out)) {
    CHECK(line.rfind("[rank ", 0) == 0);  // every line prefixed, none split or merged
    CHECK_THAT(line, !Contains("stderr of"));
    std::smatch m;
    if (std::regex_match(line, m, info_line)) {
      CHECK(m[1] == m[2]);
      CHECK(m[2] == m[3]);
      ranks.insert(std::stoi(m[1]));
      ports.insert(m[4]);
    }
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
  REQUIRE(ports.size() == 1);  // one rendezvous port for the job
  const int port = std::stoi(*ports.begin());
  CHECK(port >= 1);
  CHECK(port <= 65535);
  for (int k = 0; k < 3; ++k) {
    const std::string p = "[rank " + std::to_string(k) + "] ";
    CHECK_THAT(ranks3.err, Contains(p + "stderr of rank " + std::to_string(k) + "\n"));
    CHECK_THAT(ranks3.out, Contains(p + "first of two lines\n" + p + "second of two lines\n"));
    CHECK_THAT(ranks3.out, Contains(p + "no newline at the end\n"));  // a last partial line is ended
  }
  CHECK(lines_of(ranks3.err).size() == 3);  // nothing but the three ranks' stderr lines
}

TEST_CASE("ember-run: --nnodes/--node-rank/--master-* give this node's slice of the job", "[multiproc]") {
  TempDir dir;
  const Result r = run(cat({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port=29555",
                            "--nproc_per_node=2"},
                           child({"print"})),
                       dir);
  REQUIRE(r.code() == 0);
  CHECK_THAT(r.out,
             Contains("[rank 2] rank=2 world=4 local=0 local_world=2 addr=127.0.0.1 port=29555 source=torchrun"));
  CHECK_THAT(r.out,
             Contains("[rank 3] rank=3 world=4 local=1 local_world=2 addr=127.0.0.1 port=29555 source=torchrun"));
  CHECK_THAT(r.out, !Contains("[rank 0]"));
}

TEST_CASE("ember-run: --log-dir writes one log per rank", "[multiproc]") {
  TempDir dir;
  const std::string logs = dir.file("logs/run1");  // created, parents included
  const Result r = run(cat({"--log-dir", logs, "--nproc-per-node", "2"}, child({"print"})), dir);
  REQUIRE(r.code() == 0);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Contains("output in " + logs + "/rank_{0..1}.log"));
  for (int k = 0; k < 2; ++k) {
    const std::string log = read_text(logs + "/rank_" + std::to_string(k) + ".log");
    CHECK_THAT(log, Contains("rank=" + std::to_string(k) + " world=2"));
    CHECK_THAT(log, Contains("stderr of rank " + std::to_string(k) + "\n"));  // both streams
    CHECK_THAT(log, Contains("first of two lines\nsecond of two lines\n"));
    CHECK_THAT(log, !Contains("[rank"));
  }

  // A failure: its log's last lines are shown, since they are not on the terminal.
  TempDir dir2;
  const Result f = run(cat({"--log-dir", logs, "--nproc-per-node", "2"}, child({"exit", "1", "6"})), dir2);
  CHECK(f.code() == 6);
  CHECK_THAT(f.err, Contains("the end of " + logs + "/rank_1.log:\n[rank 1] rank 1: exiting with 6\n"));
  CHECK_THAT(read_text(logs + "/rank_1.log"), Contains("rank 1: exiting with 6"));
  CHECK_THAT(read_text(logs + "/rank_0.log"), !Contains("rank=0"));  // truncated, not appended
}

TEST_CASE("ember-run: a rank's exit status ends the job and becomes ember-run's", "[multiproc]") {
  TempDir dir;
  const Result r = run(cat({"--nproc-per-node", "3"}, child({"exit", "1", "3"})), dir);
  CHECK(r.code() == 3);
  const std::vector<pid_t> sleepers = wait_ready(dir, {0, 2});  // they slept (30 s unless stopped)
  CHECK(sleepers.size() == 2);
  CHECK(r.seconds < 10);
  const std::regex msg(R"(ember-run: rank 1 \(pid \d+\) exited with status 3; stopping the other 2 ranks\n)");
  CHECK(std::regex_search(r.err, msg));
  CHECK_THAT(r.err, Contains("exiting with status 3: rank 1"));
  for (pid_t p : sleepers) CHECK(gone(p));

  // Ranks killed by the SIGTERM ember-run forwards: 128 + SIGTERM, as from a rank's own failure.
  TempDir ok;
  CHECK(run(cat({"--nproc-per-node", "2"}, child({"exit", "9", "0"})), ok, {}, [&](pid_t launcher) {
          wait_ready(ok, {0, 1});
          ::kill(launcher, SIGTERM);
        }).code() == 128 + SIGTERM);
}

TEST_CASE("ember-run: what a failed rank started is killed too, after the rank itself has exited", "[multiproc]") {
  // The rank starts a process that ignores SIGTERM, records its pid and exits with 3 at once: its
  // process group outlives it. ember-run signalled only ranks still running, and it stayed.
  TempDir dir;
  const Result r = run({"--nproc-per-node", "1", "/bin/sh", "-c",
                        "(trap '' TERM; exec sleep 300) & echo $! > \"$EMBER_RUN_TEST_DIR/orphan\"; exit 3"},
                       dir);
  CHECK(r.code() == 3);
  pid_t orphan = 0;
  std::ifstream(dir.path() / "orphan") >> orphan;
  REQUIRE(orphan > 0);
  CHECK(ended_within(orphan, std::chrono::seconds(5)));
  if (!ended_within(orphan, std::chrono::seconds(0))) ::kill(orphan, SIGKILL);  // leave nothing behind
  CHECK_THAT(r.err, Contains("rank 0 left processes running in its process group"));
}

TEST_CASE("ember-run: started with SIGCHLD ignored, it still sees its ranks end", "[multiproc]") {
  // Ignored SIGCHLD is inherited through exec; the kernel then reaps children itself and sends no
  // SIGCHLD, and ember-run waited for ranks that had long ended.
  TempDir dir;
  const Result r =
      run(cat({"--nproc-per-node", "2"}, child({"exit", "1", "3"})), dir, {}, {},
          {"/bin/bash", "-c", "trap '' CHLD; exec \"$0\" \"$@\""});  // bash: dash's trap leaves SIGCHLD as it is
  CHECK(r.code() == 3);
  CHECK(r.seconds < 10);
  CHECK_THAT(r.err, Contains("exiting with status 3: rank 1"));
}

TEST_CASE("ember-run: --max-restarts starts every rank again after a failure, up to K times", "[multiproc]") {
  // Rank 1 fails in attempts 0 and 1; attempt 2 succeeds: two restarts are needed.
  TempDir dir;
  const Result r = run(cat({"--nproc-per-node", "2", "--max-restarts", "2"}, child({"restart", "1", "3", "2"})), dir);
  CHECK(r.code() == 0);
  CHECK_THAT(r.out, Contains("[rank 1] rank 1: attempt 0 exits with 3") && Contains("attempt 1 exits with 3"));
  CHECK_THAT(r.err,
             Contains("ember-run: attempt 0 ended with status 3: rank 1") &&
                 Contains("ember-run: restarting every rank: restart 1 of 2 (EMBER_RESTART_COUNT=1, master port ") &&
                 Contains("attempt 1 ended with status 3: rank 1") &&
                 Contains("restart 2 of 2 (EMBER_RESTART_COUNT=2"));
  CHECK_THAT(r.err, !Contains("exiting with status"));
  std::smatch m0, m1;
  REQUIRE(std::regex_search(r.out, m0, std::regex(R"(\[rank 0\] rank 0: attempt 2, port (\d+))")));
  REQUIRE(std::regex_search(r.out, m1, std::regex(R"(\[rank 1\] rank 1: attempt 2, port (\d+))")));
  CHECK(m0[1] == m1[1]);  // one job, one store
  // One restart is not enough: the second failure is ember-run's status, and it says why.
  TempDir dir2;
  const Result r2 = run(cat({"--nproc-per-node", "2", "--max-restarts", "1"}, child({"restart", "1", "3", "2"})), dir2);
  CHECK(r2.code() == 3);
  CHECK_THAT(r2.err, Contains("attempt 0 ended with status 3") && Contains("restart 1 of 1") &&
                         Contains("exiting with status 3: rank 1") && Contains("no restart left (--max-restarts 1)"));
  // Without the flag a failure ends the job at once.
  TempDir dir3;
  const Result r3 = run(cat({"--nproc-per-node", "2"}, child({"restart", "1", "3", "1"})), dir3);
  CHECK(r3.code() == 3);
  CHECK_THAT(r3.err, !Contains("restarting"));
}

TEST_CASE("ember-run: a SIGKILLed rank stops the others within the grace period", "[multiproc]") {
  TempDir dir;
  const Result r = run(cat({"--nproc-per-node", "3"}, child({"kill", "1", std::to_string(SIGKILL)})), dir);
  INFO("stderr:\n" << r.err);
  CHECK(r.code() == 128 + SIGKILL);
  CHECK(
      std::regex_search(r.err, std::regex(R"(rank 1 \(pid \d+\) was killed by SIGKILL; stopping the other 2 ranks)")));
  CHECK(r.seconds < 5);  // the default grace; the sleepers end at SIGTERM already
  for (pid_t p : wait_ready(dir, {0, 2})) CHECK(gone(p));

  // Ranks that ignore SIGTERM get SIGKILL once --grace has passed.
  TempDir dir2;
  const Result s = run(cat({"--grace", "1", "--nproc-per-node", "3"}, child({"stubborn", "2", "4"})), dir2);
  INFO("stderr:\n" << s.err);
  CHECK(s.code() == 4);
  CHECK(s.seconds >= 1.0);
  CHECK(s.seconds < 6);
  for (int k : {0, 1})
    CHECK(std::regex_search(s.err, std::regex("rank " + std::to_string(k) +
                                              R"( \(pid \d+\) is still running 1 s after SIGTERM; sending SIGKILL)")));
  for (pid_t p : wait_ready(dir2, {0, 1})) CHECK(gone(p));
}

TEST_CASE("ember-run: SIGTERM and SIGINT are passed to every rank", "[multiproc]") {
  for (const int sig : {SIGTERM, SIGINT}) {
    TempDir dir;
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    const Result r = run(cat({"--nproc-per-node", "3"}, child({"wait"})), dir, {}, [&](pid_t launcher) {
      wait_ready(dir, {0, 1, 2});
      ::kill(launcher, sig);
    });
    INFO("stderr:\n" << r.err);
    for (int k = 0; k < 3; ++k)
      CHECK_THAT(r.out, Contains("[rank " + std::to_string(k) + "] rank " + std::to_string(k) + " got " + name));
    CHECK_THAT(r.err, Contains("got " + name + "; passing it to 3 ranks"));
    CHECK(r.code() == 128 + sig);  // the ranks exited 0 after the signal: ember-run still reports it
  }

  // Ranks ignoring SIGTERM: a second SIGTERM kills them.
  TempDir dir;
  const Result r = run(cat({"--nproc-per-node", "2"}, child({"wait-stubborn"})), dir, {}, [&](pid_t launcher) {
    wait_ready(dir, {0, 1});
    ::kill(launcher, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(launcher, SIGTERM);
  });
  CHECK_THAT(r.err, Contains("got SIGTERM again; killing 2 ranks"));
  CHECK(r.code() == 128 + SIGKILL);
  CHECK(r.seconds < 10);
}

TEST_CASE("ember-run: bad command lines are errors naming the flag", "[multiproc]") {
  TempDir dir;
  const std::string plain_file = dir.file("not_a_program");
  std::ofstream(plain_file) << "data\n";  // mode 0644: not executable
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string expected;
  };
  const std::string prog = EMBER_RUN_CHILD;
  const std::vector<Case> cases = {
      {{}, 2, "no PROGRAM given"},
      {{"--nproc-per-node", "3"}, 2, "no PROGRAM given"},
      {{"--bogus", prog}, 2, "unknown flag '--bogus'"},
      {{"--nproc-per-node", "0", prog}, 2, "--nproc-per-node expects a number from 1 to 1024 or 'gpu', got '0'"},
      {{"--nproc-per-node", "two", prog}, 2, "--nproc-per-node expects a number"},
      {{"--nproc-per-node"}, 2, "--nproc-per-node needs a value"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "h", prog}, 2, "--node-rank 2 is not below --nnodes 2"},
      {{"--nnodes", "2", prog}, 2, "--master-addr is required with --nnodes 2"},
      {{"--nnodes", "1:4", prog}, 2, "--nnodes 1:4: elastic ranges (MIN:MAX) are not supported"},
      {{"--master-port", "70000", prog}, 2, "--master-port expects a port from 1 to 65535, got '70000'"},
      {{"--grace", "-1", prog}, 2, "--grace expects seconds from 0 to 3600, got '-1'"},
      {{"--max-restarts", "-1", prog}, 2, "--max-restarts expects a number from 0 to 1000, got '-1'"},
      {{"--standalone", "--nnodes", "2", "--master-addr", "h", prog}, 2, "--standalone runs one node"},
      {{"/nonexistent/prog"}, 127, "PROGRAM '/nonexistent/prog' does not exist"},
      {{"ember-no-such-program-xyz"}, 127, "PROGRAM 'ember-no-such-program-xyz' was not found on PATH"},
      {{plain_file}, 126, "PROGRAM '" + plain_file + "' is not executable"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    INFO("ember-run " << joined);
    const Result r = run(c.args, dir);
    CHECK(r.code() == c.code);
    CHECK_THAT(r.err, Contains("ember-run: " + c.expected));
    CHECK(r.out.empty());
  }
  const Result help = run({"--help"}, dir);
  CHECK(help.code() == 0);
  CHECK_THAT(help.out, Contains("usage: ember-run"));
  CHECK_THAT(help.out, Contains("--log-dir"));
  // Everything after PROGRAM is the program's, flags included.
  const Result passthrough = run(child({"print", "--bogus", "--help"}), dir);
  CHECK(passthrough.code() == 0);
  CHECK_THAT(passthrough.out, Contains("[rank 0] rank=0 world=1"));
}

TEST_CASE("ember-run: --nproc-per-node gpu starts one rank per visible GPU, or says why it cannot", "[multiproc]") {
  TempDir dir;
  const Result r = run(cat({"--nproc-per-node", "gpu"}, child({"print"})), dir);
  const int gpus = ember::cuda_device_count();
  if (gpus == 0) {
    CHECK(r.code() == 2);
    CHECK_THAT(r.err, Contains("ember-run: --nproc-per-node gpu: no GPU to start a rank on: "));
    CHECK(r.err.size() > std::string("ember-run: --nproc-per-node gpu: no GPU to start a rank on: \n").size());
  } else {
    CHECK(r.code() == 0);
    CHECK_THAT(r.out, Contains("world=" + std::to_string(gpus) + " "));
    CHECK_THAT(r.out, Contains("[rank " + std::to_string(gpus - 1) + "] rank=" + std::to_string(gpus - 1)));
  }
}
