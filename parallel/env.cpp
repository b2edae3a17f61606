// Rank discovery from a launcher's environment (parallel/env.h). Every value carries the name it
// was read under ("RANK", "RankOptions.rank"), so an error says which setting is wrong and what
// it holds, in the user's terms.
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/parallel/env.h>

namespace ember::parallel {
namespace {

using Getenv = std::function<const char*(const char*)>;

constexpr int kDefaultPort = 29500;  // torchrun's
// Under Slurm every node derives the same port from the job id; jobs sharing a node get
// different ports unless their ids are 20000 apart.
constexpr int kSlurmPortBase = 15000, kSlurmPortSpan = 20000;
constexpr size_t kMaxHosts = size_t{1} << 20;  // a guard against "[0-999999999]"

/// An integer setting and where it came from; `name` is empty while unset.
struct Value {
  long long v = -1;
  std::string name;
  bool set() const { return !name.empty(); }
  std::string shown() const { return name + "=" + std::to_string(v); }
};

/// One launcher's variables for the four integers.
struct Launcher {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};
constexpr Launcher kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Launcher kOpenMpi{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Launcher kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

class Reader {
 public:
  explicit Reader(const Getenv& getenv_fn) : getenv_(getenv_fn) {}

  /// The variable's text, or nullopt when unset. Set but empty is an error: `RANK= prog` is a typo
  /// more often than a way to unset.
  std::optional<std::string> text(const char* name) const {
    const char* s = getenv_ ? getenv_(name) : std::getenv(name);
    if (s == nullptr) return std::nullopt;
    EMBER_CHECK(*s != '\0', prefix_, name, " is set but empty");
    return std::string(s);
  }
  bool has(const char* name) const { return (getenv_ ? getenv_(name) : std::getenv(name)) != nullptr; }

  /// The variable as an integer (unset: an unset Value).
  Value integer(const char* name) const {
    const std::optional<std::string> s = text(name);
    if (!s) return {};
    return {parse_int(*s, name), name};
  }

  long long parse_int(const std::string& s, const std::string& name) const {
    long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    const bool whole = end == s.data() + s.size();
    EMBER_CHECK(ec != std::errc::result_out_of_range && !(ec == std::errc() && whole && (v < INT_MIN || v > INT_MAX)),
                prefix_, name, "=", s, " is out of range");
    EMBER_CHECK(ec == std::errc() && whole, prefix_, name, "=", s, " is not an integer");
    return v;
  }

  /// "discover_rank (slurm variables): " once the launcher is known.
  void set_prefix(const std::string& p) { prefix_ = p; }
  const std::string& prefix() const { return prefix_; }

 private:
  const Getenv& getenv_;
  std::string prefix_ = "discover_rank: ";
};

/// An option's value: -1 means unset; any other negative number is an error.
Value option(int v, const char* field, const Reader& r) {
  if (v == -1) return {};
  const Value out{v, std::string("RankOptions.") + field};
  EMBER_CHECK(v >= 0, r.prefix(), out.shown(), " is negative (-1 means: read it from the environment)");
  return out;
}

/// The option when set, else `fallback()`.
template <typename F> Value either(const Value& opt, F&& fallback) { return opt.set() ? opt : fallback(); }

/// Slurm's per-node task counts "2(x3),1" -> {2, 2, 2, 1}.
std::vector<long long> expand_tasks_per_node(const std::string& s, const std::string& name, const Reader& r) {
  std::vector<long long> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    const size_t paren = item.find("(x");
    long long count = 1;
    std::string n = item;
    if (paren != std::string::npos) {
      EMBER_CHECK(item.back() == ')', r.prefix(), name, "=", s, " is not a list like 2(x3),1");
      n = item.substr(0, paren);
      count = r.parse_int(item.substr(paren + 2, item.size() - paren - 3), name + "=" + s + ": the repeat count");
    }
    const long long tasks = r.parse_int(n, name + "=" + s + ": '" + item + "'");
    EMBER_CHECK(tasks >= 1 && count >= 1 && out.size() + count <= kMaxHosts, r.prefix(), name, "=", s,
                " is not a list like 2(x3),1");
    out.insert(out.end(), static_cast<size_t>(count), tasks);
    pos = comma + 1;
  }
  return out;
}

/// Slurm's tasks on this node: SLURM_STEP_TASKS_PER_NODE (srun's step, the most specific), else
/// SLURM_NTASKS_PER_NODE (a plain count), else SLURM_TASKS_PER_NODE (the job's), the lists indexed
/// by SLURM_NODEID.
Value slurm_local_world(const Reader& r) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::optional<std::string> s = r.text(name);
    if (!s) continue;
    if (std::string(name) == "SLURM_NTASKS_PER_NODE") return r.integer(name);
    const std::vector<long long> per_node = expand_tasks_per_node(*s, name, r);
    if (per_node.size() == 1) return {per_node[0], name};
    const Value node = r.integer("SLURM_NODEID");
    EMBER_CHECK(node.set(), r.prefix(), name, "=", *s, " lists several nodes but SLURM_NODEID is not set");
    EMBER_CHECK(node.v >= 0 && node.v < static_cast<long long>(per_node.size()), r.prefix(), node.shown(),
                " is not a node of ", name, "=", *s, " (", per_node.size(), " nodes)");
    return {per_node[node.v], std::string(name) + "[SLURM_NODEID=" + std::to_string(node.v) + "]"};
  }
  return {};
}

const Launcher* pick_launcher(const Reader& r) {
  // Innermost launcher first: torchrun or ember-run started by srun, or mpirun inside a Slurm
  // allocation, see the outer launcher's variables too, and those describe the outer processes.
  if (r.has("RANK") || r.has("WORLD_SIZE")) return &kTorchrun;
  if (r.has("OMPI_COMM_WORLD_RANK") || r.has("OMPI_COMM_WORLD_SIZE")) return &kOpenMpi;
  if (r.has("SLURM_PROCID")) return &kSlurm;
  return nullptr;
}

/// The launcher's variable `var` (SLURM_NPROCS stands in for an absent SLURM_NTASKS).
Value launcher_int(const Launcher* l, const char* Launcher::*var, const Reader& r) {
  if (l == nullptr) return {};
  Value v = r.integer(l->*var);
  if (!v.set() && l == &kSlurm && var == &Launcher::world) v = r.integer("SLURM_NPROCS");
  return v;
}

/// Rank and world size must both be known; the error names what is missing and what was found.
void check_given(const Value& v, const Value& other, const Launcher* l, const char* Launcher::*var, const char* field,
                 const Reader& r) {
  const std::string found = other.set() ? " but " + other.shown() + " is" : std::string();
  EMBER_CHECK(l != nullptr || v.set(), r.prefix(), "no ", field, " given", found,
              ": pass RankOptions.rank and .world_size, or start the program with ember-run or torchrun (RANK, "
              "WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK) or srun (SLURM_PROCID)");
  EMBER_CHECK(v.set(), r.prefix(), l->*var, " is not set", found);
}

std::string master_addr(const RankOptions& opts, const Launcher* l, bool one_node, const Value& world,
                        const Value& local_world, const Reader& r) {
  if (!opts.master_addr.empty()) return opts.master_addr;
  if (std::optional<std::string> a = r.text("MASTER_ADDR")) return *a;
  if (l == &kSlurm) {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      const std::optional<std::string> list = r.text(name);
      if (!list) continue;
      std::vector<std::string> hosts;
      try {
        hosts = expand_slurm_nodelist(*list);
      } catch (const Error& e) {
        EMBER_FAIL(r.prefix(), name, "=", *list, ": ", e.message());
      }
      return hosts.front();  // expand_slurm_nodelist never returns an empty list for non-empty text
    }
  }
  EMBER_CHECK(one_node, r.prefix(), l == &kSlurm ? "MASTER_ADDR and SLURM_JOB_NODELIST are" : "MASTER_ADDR is",
              " not set and the job spans several nodes (", world.shown(), ", ", local_world.shown(),
              "): set MASTER_ADDR to the host of rank 0", l == &kOpenMpi ? " (mpirun -x MASTER_ADDR=host)" : "");
  return "127.0.0.1";
}

Value master_port(const RankOptions& opts, const Launcher* l, const Reader& r) {
  Value port = either(option(opts.master_port, "master_port", r), [&] { return r.integer("MASTER_PORT"); });
  if (!port.set() && l == &kSlurm) {
    const Value job = r.integer("SLURM_JOB_ID");
    if (job.set()) {
      EMBER_CHECK(job.v >= 0, r.prefix(), job.shown(), " is negative");
      return {kSlurmPortBase + job.v % kSlurmPortSpan, "the port derived from " + job.shown()};
    }
  }
  if (!port.set()) return {kDefaultPort, "the default port"};
  EMBER_CHECK(port.v >= 1 && port.v <= 65535, r.prefix(), port.shown(), " is out of range (1-65535)");
  return port;
}

/// Parses "N" or "N-M" of a bracket group into `out`, zero-padded to the width of N.
void expand_range(const std::string& item, const std::string& list, std::vector<std::string>& out) {
  const size_t dash = item.find('-');
  const std::string lo_s = item.substr(0, dash), hi_s = dash == std::string::npos ? lo_s : item.substr(dash + 1);
  auto number = [&](const std::string& s) {
    unsigned long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    EMBER_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size() && s.size() <= 18,
                "expand_slurm_nodelist: '", list, "': '", item, "' is not a number or a range like 01-04");
    return v;
  };
  const unsigned long long lo = number(lo_s), hi = number(hi_s);
  EMBER_CHECK(lo <= hi, "expand_slurm_nodelist: '", list, "': the range '", item, "' ends before it starts");
  EMBER_CHECK(hi - lo < kMaxHosts && out.size() + (hi - lo) < kMaxHosts, "expand_slurm_nodelist: '", list,
              "' names more than ", kMaxHosts, " hosts");
  for (unsigned long long v = lo; v <= hi; ++v) {
    std::string s = std::to_string(v);
    if (s.size() < lo_s.size()) s.insert(0, lo_s.size() - s.size(), '0');
    out.push_back(std::move(s));
  }
}

/// One host pattern ("rack[1-2]-n[01-02]") -> its hosts, the first bracket group varying slowest.
void expand_host(const std::string& pattern, const std::string& list, std::vector<std::string>& out) {
  std::vector<std::string> hosts{""};
  size_t pos = 0;
  while (pos < pattern.size()) {
    const size_t open = pattern.find('[', pos);
    const std::string literal = pattern.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    EMBER_CHECK(literal.find(']') == std::string::npos, "expand_slurm_nodelist: '", list, "' has a ']' without '['");
    for (std::string& h : hosts) h += literal;
    if (open == std::string::npos) break;
    const size_t close = pattern.find(']', open);
    EMBER_CHECK(close != std::string::npos, "expand_slurm_nodelist: '", list, "' has a '[' without ']'");
    const std::string group = pattern.substr(open + 1, close - open - 1);
    EMBER_CHECK(group.find('[') == std::string::npos, "expand_slurm_nodelist: '", list, "' nests '['");
    std::vector<std::string> suffixes;
    size_t item_start = 0;
    while (item_start <= group.size()) {
      const size_t comma = std::min(group.find(',', item_start), group.size());
      expand_range(group.substr(item_start, comma - item_start), list, suffixes);
      item_start = comma + 1;
    }
    EMBER_CHECK(hosts.size() * suffixes.size() + out.size() <= kMaxHosts, "expand_slurm_nodelist: '", list,
                "' names more than ", kMaxHosts, " hosts");
    std::vector<std::string> next;
    next.reserve(hosts.size() * suffixes.size());
    for (const std::string& h : hosts)
      for (const std::string& s : suffixes) next.push_back(h + s);
    hosts = std::move(next);
    pos = close + 1;
  }
  out.insert(out.end(), hosts.begin(), hosts.end());
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  // Split at the commas outside brackets: "a[1-2,5],b" -> "a[1-2,5]", "b".
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    EMBER_CHECK(depth >= 0, "expand_slurm_nodelist: '", list, "' has a ']' without '['");
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      EMBER_CHECK(depth == 0, "expand_slurm_nodelist: '", list, "' has a '[' without ']'");
      EMBER_CHECK(i > start, "expand_slurm_nodelist: '", list, "' has an empty host name at offset ", start);
      expand_host(list.substr(start, i - start), list, out);
      start = i + 1;
    }
  }
  return out;
}

RankInfo discover_rank(const RankOptions& opts, const Getenv& getenv_fn) {
  Reader r(getenv_fn);
  const Value opt_rank = option(opts.rank, "rank", r), opt_world = option(opts.world_size, "world_size", r);
  const Value opt_local = option(opts.local_rank, "local_rank", r);
  const Value opt_local_world = option(opts.local_world_size, "local_world_size", r);

  // Rank and world size both given: the job is described by the caller, not by a launcher.
  const bool from_options = opt_rank.set() && opt_world.set();
  const Launcher* l = from_options ? nullptr : pick_launcher(r);
  if (l != nullptr) r.set_prefix(std::string("discover_rank (") + l->source + " variables): ");

  const Value rank = either(opt_rank, [&] { return launcher_int(l, &Launcher::rank, r); });
  const Value world = either(opt_world, [&] { return launcher_int(l, &Launcher::world, r); });
  check_given(rank, world, l, &Launcher::rank, "rank", r);
  check_given(world, rank, l, &Launcher::world, "world_size", r);
  EMBER_CHECK(rank.v >= 0, r.prefix(), rank.shown(), " is negative");
  EMBER_CHECK(world.v >= 1, r.prefix(), world.shown(), " must be at least 1");
  EMBER_CHECK(rank.v < world.v, r.prefix(), rank.shown(), " is not below ", world.shown());

  // Local values default to one node holding the whole job.
  Value local_world = either(opt_local_world, [&] {
    return l == &kSlurm ? slurm_local_world(r) : launcher_int(l, &Launcher::local_world, r);
  });
  if (!local_world.set()) local_world = {world.v, "local_world_size"};
  EMBER_CHECK(local_world.v >= 1, r.prefix(), local_world.shown(), " must be at least 1");
  EMBER_CHECK(local_world.v <= world.v, r.prefix(), local_world.shown(), " is larger than ", world.shown());
  Value local = either(opt_local, [&] { return launcher_int(l, &Launcher::local_rank, r); });
  if (!local.set()) local = {rank.v % local_world.v, "local_rank"};
  EMBER_CHECK(local.v >= 0, r.prefix(), local.shown(), " is negative");
  EMBER_CHECK(local.v < local_world.v, r.prefix(), local.shown(), " is not below ", local_world.shown());

  RankInfo info;
  info.rank = static_cast<int>(rank.v);
  info.world_size = static_cast<int>(world.v);
  info.local_rank = static_cast<int>(local.v);
  info.local_world_size = static_cast<int>(local_world.v);
  info.master_addr = master_addr(opts, l, local_world.v == world.v, world, local_world, r);
  info.master_port = static_cast<int>(master_port(opts, l, r).v);
  info.source = l == nullptr ? "options" : l->source;
  return info;
}

int restart_count_from_env() {
  for (const char* var : {"EMBER_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* s = std::getenv(var);
    if (s == nullptr) continue;
    const std::string text(s);
    int v = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    EMBER_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v >= 0, var, "=", text,
                " is not a whole number >= 0");
    return v;
  }
  return 0;
}

CollectiveTimeout collective_timeout_from_env(double fallback_s) {
  const char* s = std::getenv("EMBER_COLLECTIVE_TIMEOUT");
  if (s == nullptr) return {fallback_s, "the default"};
  const std::string text(s);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  EMBER_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v > 0,
              "EMBER_COLLECTIVE_TIMEOUT=", text, " is not a number of seconds above 0 (e.g. 300 or 0.5)");
  return {v, "EMBER_COLLECTIVE_TIMEOUT"};
}

std::optional<RankInfo> launcher_rank(const std::function<const char*(const char*)>& getenv_fn) {
  // A world size without its rank counts too: discover_rank() then says which variable is missing,
  // instead of the program training alone while the user believes it is one rank of several.
  for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"}) {
    const char* value = getenv_fn ? getenv_fn(v) : std::getenv(v);
    if (value != nullptr && *value != '\0') return discover_rank({}, getenv_fn);
  }
  return std::nullopt;
}

}  // namespace ember::parallel
