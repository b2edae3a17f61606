// ember-run: starts one process per rank on this node, as torchrun does, and watches them.
//
//   ember-run --nproc-per-node N|gpu [--nnodes M --node-rank R --master-addr A --master-port P]
//             [--log-dir DIR] [--grace SECONDS] [--max-restarts K] PROGRAM ARGS...
//
// Each child gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, which
// parallel::discover_rank reads before any Slurm or Open MPI variable the child inherits (those
// describe the launcher's own place in an outer job, and are left alone), plus EMBER_NUM_THREADS,
// OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = cores / N where the user left them unset (the ranks of
// a node share its cores). Each output line of a
// child is copied with a "[rank k] " prefix to ember-run's stdout or stderr, whichever the child
// wrote it to (or each rank writes DIR/rank_k.log). SIGINT and SIGTERM are passed to every child
// (a second one kills them). When a child exits non-zero or dies by a signal, the others get half
// a second to end by themselves, then SIGTERM, then SIGKILL after --grace seconds, and ember-run
// exits with the first failure's status (128 + the signal for a signal). With --max-restarts K it
// first starts every rank again, up to K times (torchrun's flag): each attempt is a new job with a
// new rendezvous store (on one node a new free port), EMBER_RESTART_COUNT (and torchrun's
// TORCHELASTIC_RESTART_COUNT) telling the ranks which attempt they are; a program that resumes from
// its last checkpoint (ember-train with checkpoint.resume=auto) then goes on where it was stopped.
//
// Single-threaded: one poll() loop over the children's pipes and a signalfd (SIGCHLD, SIGINT,
// SIGTERM), so no signal handler ever runs concurrently with the bookkeeping.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>  // sigabbrev_np
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/thread_pool.h>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2, kExitLaunch = 1, kExitNotFound = 127, kExitNotExecutable = 126;
constexpr int kMaxProcsPerNode = 1024;
constexpr int kDefaultMultiNodePort = 29500;  // torchrun's: every node must agree without talking
constexpr size_t kMaxLine = 64 * 1024;  // a longer line is copied in pieces
constexpr auto kDrainAfterExit = std::chrono::seconds(2);  // a grandchild may hold a pipe open
// After a failure, the other ranks get this long to end by themselves before SIGTERM: those that
// talk to the failed rank see it at once, and their own error message is the useful one (a
// SIGTERM arriving while they print it would cut it off).
constexpr auto kSettle = std::chrono::milliseconds(500);
constexpr const char* kRankVars[] = {"MASTER_ADDR",
                                     "MASTER_PORT",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "EMBER_RESTART_COUNT",
                                     "TORCHELASTIC_RESTART_COUNT"};

void print_usage(std::FILE* out) {
  std::fputs(
      "usage: ember-run [--nproc-per-node N|gpu] [--nnodes M --node-rank R --master-addr A --master-port P]\n"
      "                 [--log-dir DIR] [--grace SECONDS] [--max-restarts K] PROGRAM [ARGS...]\n"
      "\n"
      "Starts --nproc-per-node copies of PROGRAM on this node, one per rank, with MASTER_ADDR, MASTER_PORT,\n"
      "RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE set for each (what parallel::init_process_group\n"
      "reads, as under torchrun), and EMBER_NUM_THREADS, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to\n"
      "cores / nproc-per-node unless already set. Flags are torchrun's (--nproc_per_node spellings work too).\n"
      "\n"
      "  --nproc-per-node N|gpu  ranks on this node (default 1); 'gpu': one per visible CUDA device\n"
      "  --nnodes M              nodes in the job (default 1); run ember-run once on each node\n"
      "  --node-rank R           this node's index, 0..M-1 (default 0); its ranks are R*N .. R*N+N-1\n"
      "  --master-addr A         host of node 0, where rank 0 serves the rendezvous store\n"
      "                          (default 127.0.0.1; required when M > 1)\n"
      "  --master-port P         its port (default: a free port on one node, 29500 on several)\n"
      "  --standalone            one node, free port (torchrun's flag; the default here)\n"
      "  --log-dir DIR           write each rank's stdout and stderr to DIR/rank_K.log instead of\n"
      "                          copying them here with a \"[rank K] \" prefix\n"
      "  --grace SECONDS         after a rank fails, how long the others get between SIGTERM and\n"
      "                          SIGKILL (default 5)\n"
      "  --max-restarts K        when a rank fails, stop the others and start every rank again, up to\n"
      "                          K times (default 0); the ranks see EMBER_RESTART_COUNT\n"
      "  --help                  print this and exit\n"
      "\n"
      "When a rank exits non-zero or is killed, the other ranks get 0.5 s to end by themselves, then\n"
      "SIGTERM, then SIGKILL --grace seconds later, and ember-run exits with the failed rank's status\n"
      "(128 + signal number for a signal). SIGINT/SIGTERM are passed to every rank; a second one kills\n"
      "them. Children read stdin from /dev/null. ember-run's own errors: 2 bad command line, 1 launch\n"
      "failure, 127 PROGRAM not found, 126 not executable.\n",
      out);
}

struct Args {
  int nproc = 1;
  bool nproc_gpu = false;
  int nnodes = 1, node_rank = 0;
  bool standalone = false;
  std::string master_addr;
  int master_port = -1;
  std::string log_dir;
  double grace_s = 5.0;
  int max_restarts = 0;
  std::vector<std::string> command;  // PROGRAM ARGS...
  bool help = false;
};

/// An integer in [lo, hi], or false.
bool parse_int(const std::string& s, int lo, int hi, int& out) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

// Returns an error message, or "" when the command line is well formed.
std::string parse_args(int argc, char** argv, Args& a) {
  bool seen_nnodes = false, seen_node_rank = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("-", 0) != 0) break;  // PROGRAM: everything from here on is the child's
    if (arg == "--help" || arg == "-h") {
      a.help = true;
      return "";
    }
    // "--flag=value" or "--flag value"; torchrun spells flags with '-' or '_'.
    std::string flag = arg, value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq), value = arg.substr(eq + 1), inline_value = true;
    }
    std::replace(flag.begin() + std::min<size_t>(2, flag.size()), flag.end(), '_', '-');
    if (flag == "--standalone") {
      if (inline_value) return "--standalone takes no value";
      a.standalone = true;
      continue;
    }
    static const std::vector<std::string> kValued = {"--nproc-per-node", "--nnodes",  "--node-rank", "--master-addr",
                                                     "--master-port",    "--log-dir", "--grace",     "--max-restarts"};
    if (std::find(kValued.begin(), kValued.end(), flag) == kValued.end())
      return "unknown flag '" + arg + "' (ember-run --help lists the flags)";
    if (!inline_value) {
      if (i + 1 >= argc) return flag + " needs a value";
      value = argv[++i];
    }
    if (flag == "--nproc-per-node") {
      if (value == "gpu") a.nproc_gpu = true;
      else if (value == "auto" || value == "cpu")
        return "--nproc-per-node " + value + " is not supported: give a number or 'gpu'";
      else if (!parse_int(value, 1, kMaxProcsPerNode, a.nproc))
        return "--nproc-per-node expects a number from 1 to " + std::to_string(kMaxProcsPerNode) + " or 'gpu', got '" +
               value + "'";
    } else if (flag == "--nnodes") {
      if (value.find(':') != std::string::npos)
        return "--nnodes " + value + ": elastic ranges (MIN:MAX) are not supported; give the number of nodes";
      if (!parse_int(value, 1, 1 << 20, a.nnodes)) return "--nnodes expects a positive number, got '" + value + "'";
      seen_nnodes = true;
    } else if (flag == "--node-rank") {
      if (!parse_int(value, 0, 1 << 20, a.node_rank)) return "--node-rank expects a number >= 0, got '" + value + "'";
      seen_node_rank = true;
    } else if (flag == "--master-addr") {
      if (value.empty()) return "--master-addr expects a host name or address, got ''";
      a.master_addr = value;
    } else if (flag == "--master-port") {
      if (!parse_int(value, 1, 65535, a.master_port))
        return "--master-port expects a port from 1 to 65535, got '" + value + "'";
    } else if (flag == "--log-dir") {
      if (value.empty()) return "--log-dir expects a directory, got ''";
      a.log_dir = value;
    } else if (flag == "--grace") {
      char* end = nullptr;
      a.grace_s = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(a.grace_s >= 0 && a.grace_s <= 3600))
        return "--grace expects seconds from 0 to 3600, got '" + value + "'";
    } else if (flag == "--max-restarts") {
      if (!parse_int(value, 0, 1000, a.max_restarts))
        return "--max-restarts expects a number from 0 to 1000, got '" + value + "'";
    }
  }
  for (; i < argc; ++i) a.command.emplace_back(argv[i]);
  if (a.command.empty()) return "no PROGRAM given: ember-run [flags] PROGRAM [ARGS...]";
  if (a.node_rank >= a.nnodes)
    return "--node-rank " + std::to_string(a.node_rank) + " is not below --nnodes " + std::to_string(a.nnodes);
  if (seen_node_rank && !seen_nnodes && a.node_rank > 0) return "--node-rank needs --nnodes";
  if (a.standalone && a.nnodes > 1) return "--standalone runs one node, but --nnodes is " + std::to_string(a.nnodes);
  if (a.nnodes > 1 && a.master_addr.empty())
    return "--master-addr is required with --nnodes " + std::to_string(a.nnodes) +
           ": every node must name the host of node rank 0";
  return "";
}

/// --nproc-per-node gpu: the number of CUDA devices this process can see, or an error saying why none
/// (the library's probe, as Device::best() uses it, with CUDA_VISIBLE_DEVICES when it is set).
int visible_gpus(std::string& why) {
  const int n = ember::cuda_device_count();
  if (n == 0) {
    why = ember::cuda_unavailable_reason();
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"))
      why += std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
  }
  return n;
}

/// A port nobody listens on now, found by binding port 0 on `addr`. Rank 0 binds it again a moment
/// later; another program could take it in between, which rank 0 then reports as "port in use".
int free_port(const std::string& addr, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0) {
    why = "--master-addr " + addr + " does not resolve: " + ::gai_strerror(rc);
    return -1;
  }
  int port = -1;
  for (addrinfo* ai = res; ai != nullptr && port < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    else why = "cannot bind a port on " + addr + ": " + std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return port;
}

/// PROGRAM as execve needs it: a path containing '/' as is, else the first match on PATH.
/// Returns "" and sets `status` (127 / 126) and `why` when there is nothing to run.
std::string find_program(const std::string& name, int& status, std::string& why) {
  auto runnable = [&](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return name;
    status = ::access(name.c_str(), F_OK) == 0 ? kExitNotExecutable : kExitNotFound;
    why =
        status == kExitNotFound ? "PROGRAM '" + name + "' does not exist" : "PROGRAM '" + name + "' is not executable";
    return "";
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (runnable(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  status = kExitNotFound;
  why = "PROGRAM '" + name + "' was not found on PATH (give a path, e.g. ./" + name + ")";
  return "";
}

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

/// "exited with status 3", "was killed by SIGKILL" (+ " (core dumped)").
std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  std::string s = "was killed by " + signal_text(WTERMSIG(status));
  if (WCOREDUMP(status)) s += " (core dumped)";
  return s;
}

/// The shell's convention: the exit code, or 128 + the signal number.
int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string ranks_text(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

/// Writes all of `data` to `fd`. Errors (a closed pipe) are ignored: the children must still be
/// watched and stopped when nobody reads ember-run's output any more.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

/// ember-run's own messages, on stderr, one write each (so they never split a child's line).
void say(const std::string& msg) { write_all(STDERR_FILENO, "ember-run: " + msg + "\n"); }

/// Copies one child stream line by line to `out_fd`, each line prefixed, each line one write().
class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}
  void feed(std::string_view data) {
    pending_.append(data);
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(std::string_view(pending_).substr(start, nl + 1 - start));
    pending_.erase(0, start);
    while (pending_.size() >= kMaxLine) {  // no newline in sight: pass it on in pieces
      emit(std::string_view(pending_).substr(0, kMaxLine));
      write_all(out_fd_, "\n");
      pending_.erase(0, kMaxLine);
    }
  }
  /// End of stream: a last line without '\n' gets one.
  void finish() {
    if (!pending_.empty()) emit(pending_ + "\n");
    pending_.clear();
  }

 private:
  void emit(std::string_view line) { write_all(out_fd_, prefix_ + std::string(line)); }
  std::string prefix_;
  int out_fd_;
  std::string pending_;
};

/// One child's read end of a pipe and where its lines go.
struct Stream {
  int fd = -1;
  LinePrefixer lines;
};

struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // waitpid's, once exited
  std::vector<Stream> streams;  // stdout, stderr (empty with --log-dir)
  std::string log_path;
};

constexpr const char* kThreadVars[] = {"EMBER_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};

/// This machine's cores shared among `nproc` ranks (at least 1 each).
int threads_per_rank(int nproc) { return std::max(1, ember::available_cores() / std::max(1, nproc)); }

/// The child's environment: ours without the six rank variables, then those for this rank, and
/// kThreadVars that the user left unset.
std::vector<std::string> child_env(const Args& a, const std::string& addr, int port, int rank, int local_rank,
                                   int attempt) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(std::begin(kRankVars), std::end(kRankVars), [&](const char* v) { return name == v; }))
      env.emplace_back(entry);
  }
  env.push_back("MASTER_ADDR=" + addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(a.nnodes * a.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(a.nproc));
  env.push_back("EMBER_RESTART_COUNT=" + std::to_string(attempt));
  env.push_back("TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt));
  // The ranks of a node share its cores: unless the user chose, each gets cores / nproc threads
  // for ember's kernels, OpenBLAS and OpenMP (a rank each using every core slows all of them).
  const std::string threads = std::to_string(threads_per_rank(a.nproc));
  for (const char* var : kThreadVars)
    if (std::getenv(var) == nullptr) env.push_back(std::string(var) + "=" + threads);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

class Launcher {
 public:
  /// `watched`: the signals take_signals() blocked, read here through a signalfd.
  Launcher(Args args, std::string program, std::string addr, int port, int attempt, const sigset_t& watched)
      : a_(std::move(args)),
        program_(std::move(program)),
        addr_(std::move(addr)),
        port_(port),
        attempt_(attempt),
        watched_(watched) {}
  ~Launcher() {
    if (sigfd_ >= 0) ::close(sigfd_);
  }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  /// Whether the job ended because a rank failed, and not because ember-run itself was told to
  /// stop (SIGINT/SIGTERM) or could not start the ranks: only then does --max-restarts restart.
  bool rank_failed() const { return first_failure_ >= 0 && interrupt_ == 0; }

  /// Starts every rank, watches them until all have ended, returns ember-run's exit status.
  int run() {
    sigfd_ = ::signalfd(-1, &watched_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd_ < 0) return fail_launch(std::string("signalfd: ") + std::strerror(errno));
    if (!a_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(a_.log_dir, ec);
      if (ec) return fail_launch("cannot create --log-dir " + a_.log_dir + ": " + ec.message());
      const int first = a_.node_rank * a_.nproc;
      say(ranks_text(a_.nproc) + "; output in " + a_.log_dir + "/rank_" +
          (a_.nproc == 1 ? std::to_string(first)
                         : "{" + std::to_string(first) + ".." + std::to_string(first + a_.nproc - 1) + "}") +
          ".log");
    }
    for (int local = 0; local < a_.nproc; ++local) {
      if (!start(local)) {
        stop_all(SIGKILL);
        while (running() > 0) reap(/*block=*/true);
        return kExitLaunch;
      }
    }
    loop();
    kill_leftovers();
    return finish();
  }

 private:
  int fail_launch(const std::string& msg) {
    say(msg);
    return kExitLaunch;
  }

  bool start(int local) {
    Child c;
    c.local_rank = local;
    c.rank = a_.node_rank * a_.nproc + local;
    int out[2] = {-1, -1}, err[2] = {-1, -1}, log_fd = -1;
    if (!a_.log_dir.empty()) {
      c.log_path = a_.log_dir + "/rank_" + std::to_string(c.rank) + ".log";
      // A restart appends: the failed attempt's output stays in the log.
      log_fd = ::open(c.log_path.c_str(), O_WRONLY | O_CREAT | (attempt_ == 0 ? O_TRUNC : O_APPEND) | O_CLOEXEC, 0644);
      if (log_fd < 0) {
        say("cannot write " + c.log_path + ": " + std::strerror(errno));
        return false;
      }
    } else if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      say(std::string("pipe: ") + std::strerror(errno));
      return false;
    }
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<std::string> env = child_env(a_, addr_, port_, c.rank, local, attempt_), argv = a_.command;
    std::vector<char*> envp = pointers(env), argvp = pointers(argv);
    const std::string exec_failed = "ember-run: rank " + std::to_string(c.rank) + ": cannot execute " + program_ + "\n";
    const pid_t parent = ::getpid();

    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only async-signal-safe calls until execve: the parent may have other threads (CUDA's).
      ::setpgid(0, 0);  // its own group: Ctrl-C reaches ember-run once, which forwards it
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // ember-run killed by SIGKILL: the ranks still end
      if (::getppid() != parent) ::_exit(kExitLaunch);
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : out[1], STDOUT_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : err[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGPIPE, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(program_.c_str(), argvp.data(), envp.data());
      (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      ::_exit(kExitNotExecutable);
    }
    const int fork_errno = errno;
    for (int fd : {null_fd, log_fd, out[1], err[1]})
      if (fd >= 0) ::close(fd);
    if (pid < 0) {
      for (int fd : {out[0], err[0]})
        if (fd >= 0) ::close(fd);
      say("fork for rank " + std::to_string(c.rank) + ": " + std::strerror(fork_errno));
      return false;
    }
    ::setpgid(pid, pid);  // also here, so a signal sent right after fork finds the group
    c.pid = pid;
    c.running = true;
    if (a_.log_dir.empty()) {
      const std::string prefix = "[rank " + std::to_string(c.rank) + "] ";
      c.streams.push_back({out[0], LinePrefixer(prefix, STDOUT_FILENO)});
      c.streams.push_back({err[0], LinePrefixer(prefix, STDERR_FILENO)});
    }
    children_.push_back(std::move(c));
    return true;
  }

  int running() const {
    return static_cast<int>(
        std::count_if(children_.begin(), children_.end(), [](const Child& c) { return c.running; }));
  }

  /// Sends `sig` to each rank's process group (the rank and anything it started): also a rank
  /// that has exited, whose group may still hold what it started.
  void stop_all(int sig) {
    for (Child& c : children_)
      if (::kill(-c.pid, sig) != 0 && c.running) ::kill(c.pid, sig);
  }

  /// Every rank has ended: whatever one started and left running (its process group still has
  /// members) is killed, so that nothing of this attempt outlives it or runs into a restart.
  void kill_leftovers() {
    for (const Child& c : children_)
      if (::kill(-c.pid, 0) == 0) {
        say("rank " + std::to_string(c.rank) + " left processes running in its process group " + std::to_string(c.pid) +
            "; killing them");
        ::kill(-c.pid, SIGKILL);
      }
  }

  void loop() {
    while (true) {
      const auto now = Clock::now();
      if (term_at_ && now >= *term_at_) {
        stop_all(SIGTERM);
        term_at_.reset();
      }
      if (kill_at_ && now >= *kill_at_) {
        for (const Child& c : children_)
          if (c.running)
            say("rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") is still running " +
                grace_text() + " after SIGTERM; sending SIGKILL");
        stop_all(SIGKILL);
        kill_at_.reset();
      }
      const bool any_running = running() > 0;
      if (!any_running && !drain_until_) drain_until_ = now + kDrainAfterExit;
      std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
      std::vector<Stream*> owners{nullptr};
      for (Child& c : children_)
        for (Stream& s : c.streams)
          if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0}), owners.push_back(&s);
      if (!any_running && (fds.size() == 1 || now >= *drain_until_)) break;

      std::optional<Clock::time_point> wake;  // the next deadline, if any
      for (const auto& t : {term_at_, kill_at_, drain_until_})
        if (t && (!wake || *t < *wake)) wake = t;
      const int timeout_ms = wake ? static_cast<int>(std::max<long long>(
                                        0, std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count()))
                                  : -1;
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        say(std::string("poll: ") + std::strerror(errno));
        break;
      }
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents != 0) read_stream(*owners[i]);
      if (fds[0].revents & POLLIN) handle_signals();
    }
    for (Child& c : children_)  // past the drain deadline: whatever is left, unterminated
      for (Stream& s : c.streams)
        if (s.fd >= 0) s.lines.finish(), ::close(s.fd), s.fd = -1;
  }

  void read_stream(Stream& s) {
    char buf[65536];
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {  // EOF (or an error, treated alike): the child and its descendants closed it
      s.lines.finish();
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.lines.feed(std::string_view(buf, static_cast<size_t>(n)));
  }

  void handle_signals() {
    signalfd_siginfo si{};
    while (::read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      const int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) {
        reap(/*block=*/false);
      } else if (interrupt_ == 0) {
        interrupt_ = sig;
        say("got " + signal_text(sig) + "; passing it to " + ranks_text(running()) + " (send it again to kill them)");
        stop_all(sig);
      } else {
        say("got " + signal_text(sig) + " again; killing " + ranks_text(running()));
        stop_all(SIGKILL);
      }
    }
  }

  /// Collects every child that has ended; the first failure stops the others.
  void reap(bool block) {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, block ? 0 : WNOHANG)) > 0) {
      const auto it = std::find_if(children_.begin(), children_.end(), [&](const Child& c) { return c.pid == pid; });
      if (it == children_.end()) continue;
      it->running = false;
      it->status = status;
      if (block) return;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || first_failure_ >= 0) continue;
      first_failure_ = static_cast<int>(it - children_.begin());
      if (interrupt_ != 0) continue;  // ending because of the forwarded signal: expected
      const int others = running();
      say("rank " + std::to_string(it->rank) + " (pid " + std::to_string(pid) + ") " + describe(status) +
          (others == 1  ? "; stopping the other rank"
           : others > 1 ? "; stopping the other " + ranks_text(others)
                        : ""));
      if (others > 0) {
        term_at_ = Clock::now() + kSettle;
        kill_at_ = *term_at_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a_.grace_s));
      }
    }
  }

  std::string grace_text() const {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g s", a_.grace_s);
    return buf;
  }

  int finish() {
    if (first_failure_ < 0) {
      if (interrupt_ == 0) return 0;
      say("stopped by " + signal_text(interrupt_) + "; exiting with status " + std::to_string(128 + interrupt_));
      return 128 + interrupt_;
    }
    const Child& f = children_[first_failure_];
    if (!f.log_path.empty()) print_log_tail(f);
    const int code = exit_code(f.status);
    // An attempt that --max-restarts will follow is not the end of ember-run.
    const bool restart = rank_failed() && attempt_ < a_.max_restarts;
    say((restart ? "attempt " + std::to_string(attempt_) + " ended with status " : "exiting with status ") +
        std::to_string(code) + ": rank " + std::to_string(f.rank) + " (pid " + std::to_string(f.pid) + ") " +
        describe(f.status) + (interrupt_ != 0 ? " after " + signal_text(interrupt_) : std::string()));
    return code;
  }

  /// With --log-dir the failure's output is not on the terminal: show its last lines.
  static void print_log_tail(const Child& c) {
    constexpr std::streamoff kTailBytes = 4096;
    std::FILE* f = std::fopen(c.log_path.c_str(), "rb");
    if (f == nullptr) return;
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fseek(f, std::max<long>(0, size - kTailBytes), SEEK_SET);
    std::string tail(static_cast<size_t>(std::min<long>(size, kTailBytes)), '\0');
    tail.resize(std::fread(tail.data(), 1, tail.size(), f));
    std::fclose(f);
    if (size > kTailBytes) tail.erase(0, std::min(tail.size(), tail.find('\n') + 1));  // whole lines only
    say("the end of " + c.log_path + ":");
    LinePrefixer lines("[rank " + std::to_string(c.rank) + "] ", STDERR_FILENO);
    lines.feed(tail);
    lines.finish();
  }

  Args a_;
  std::string program_, addr_;
  int port_;
  int attempt_;  // 0, then 1.. for each --max-restarts restart
  int sigfd_ = -1;
  sigset_t watched_;
  std::vector<Child> children_;
  int first_failure_ = -1;
  int interrupt_ = 0;  // the first SIGINT/SIGTERM ember-run received
  std::optional<Clock::time_point> term_at_, kill_at_, drain_until_;  // SIGTERM, SIGKILL, give up reading
};

}  // namespace

/// Before anything can start a thread (CUDA's, counting GPUs for --nproc-per-node gpu): SIGCHLD
/// back to its default (left ignored by the caller, the kernel would reap the ranks itself and
/// ember-run would wait forever), the signals ember-run watches blocked (threads inherit the mask,
/// so none can take a signal meant for the signalfd; the ranks unblock them) and SIGPIPE ignored (a
/// closed stdout must not kill the launcher; the ranks reset it). A signal ignored at start other
/// than SIGCHLD stays ignored, here and in the ranks (a shell starts background jobs with SIGINT
/// ignored, so Ctrl-C does not reach them). Returns the watched set.
sigset_t take_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);
  sigset_t watched;
  sigemptyset(&watched);
  for (int s : {SIGCHLD, SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (s == SIGCHLD || (::sigaction(s, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)) sigaddset(&watched, s);
  }
  ::sigprocmask(SIG_BLOCK, &watched, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return watched;
}

int main(int argc, char** argv) {
  Args args;
  if (const std::string err = parse_args(argc, argv, args); !err.empty()) {
    std::fprintf(stderr, "ember-run: %s\n\n", err.c_str());
    print_usage(stderr);
    return kExitUsage;
  }
  if (args.help) {
    print_usage(stdout);
    return 0;
  }
  const sigset_t watched = take_signals();
  std::string why;
  if (args.nproc_gpu) {
    args.nproc = visible_gpus(why);
    if (args.nproc == 0) {
      std::fprintf(stderr, "ember-run: --nproc-per-node gpu: no GPU to start a rank on: %s\n", why.c_str());
      return kExitUsage;
    }
  }
  int status = 0;
  const std::string program = find_program(args.command[0], status, why);
  if (program.empty()) {
    std::fprintf(stderr, "ember-run: %s\n", why.c_str());
    return status;
  }
  const std::string addr = args.master_addr.empty() ? "127.0.0.1" : args.master_addr;
  int port = args.master_port;
  if (port < 0 && args.nnodes > 1) port = kDefaultMultiNodePort;
  if (port < 0 && (port = free_port(addr, why)) < 0) {
    std::fprintf(stderr, "ember-run: cannot choose a --master-port: %s\n", why.c_str());
    return kExitLaunch;
  }
  for (int attempt = 0;; ++attempt) {
    Launcher launcher(args, program, addr, port, attempt, watched);
    const int code = launcher.run();
    if (code == 0 || !launcher.rank_failed()) return code;
    if (attempt >= args.max_restarts) {
      if (args.max_restarts > 0) say("no restart left (--max-restarts " + std::to_string(args.max_restarts) + ")");
      return code;
    }
    // A new job: on one node a new store port, so no socket of the failed attempt's is in the way.
    if (args.master_port < 0 && args.nnodes == 1) {
      if (const int p = free_port(addr, why); p > 0) port = p;
    }
    say("restarting every rank: restart " + std::to_string(attempt + 1) + " of " + std::to_string(args.max_restarts) +
        " (EMBER_RESTART_COUNT=" + std::to_string(attempt + 1) + ", master port " + std::to_string(port) + ")");
  }
}
