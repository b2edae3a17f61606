// Rank discovery from each launcher's variables (torchrun, Open MPI, Slurm), explicit options
// winning over them, Slurm's compact node lists, and each bad setting's message.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include <ember/parallel/env.h>

#include "support/error_of.h"

using Catch::Matchers::Contains;
using ember::parallel::discover_rank;
using ember::parallel::expand_slurm_nodelist;
using ember::parallel::launcher_rank;
using ember::parallel::RankInfo;
using ember::parallel::RankOptions;
using ember::testing::error_of;

namespace {

using Vars = std::map<std::string, std::string>;

/// discover_rank over exactly `vars` (the process's own environment is not read).
RankInfo discover(const Vars& vars, const RankOptions& opts = {}) {
  return discover_rank(opts, [&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_for(const Vars& vars, const RankOptions& opts = {}) {
  return error_of([&] { discover(vars, opts); });
}

const Vars kTorchrun{{"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29611"}, {"RANK", "5"},
                     {"WORLD_SIZE", "8"},      {"LOCAL_RANK", "1"},      {"LOCAL_WORLD_SIZE", "4"}};
const Vars kOpenMpi{{"OMPI_COMM_WORLD_RANK", "2"},
                    {"OMPI_COMM_WORLD_SIZE", "3"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
const Vars kSlurm{{"SLURM_PROCID", "6"},    {"SLURM_NTASKS", "8"},
                  {"SLURM_LOCALID", "2"},   {"SLURM_NTASKS_PER_NODE", "4"},
                  {"SLURM_JOB_ID", "4242"}, {"SLURM_JOB_NODELIST", "gpu[07-09,11],cpu1"}};

Vars with(Vars v, const std::string& name, const std::string& value) {
  v[name] = value;
  return v;
}
Vars without(Vars v, const std::string& name) {
  v.erase(name);
  return v;
}

/// Sets an environment variable for the scope, restoring the previous value (or its absence).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("discover_rank reads torchrun's variables", "[cpu]") {
  const RankInfo r = discover(kTorchrun);
  CHECK(r.rank == 5);
  CHECK(r.world_size == 8);
  CHECK(r.local_rank == 1);
  CHECK(r.local_world_size == 4);
  CHECK(r.master_addr == "node7");
  CHECK(r.master_port == 29611);
  CHECK(r.source == "torchrun");

  // ember-run on one node sets all six; with only RANK and WORLD_SIZE the job is one node on
  // this host at torchrun's default port.
  const RankInfo bare = discover({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  CHECK(bare.local_rank == 2);
  CHECK(bare.local_world_size == 3);
  CHECK(bare.master_addr == "127.0.0.1");
  CHECK(bare.master_port == 29500);
  CHECK(bare.source == "torchrun");
}

TEST_CASE("discover_rank reads Open MPI's variables", "[cpu]") {
  const RankInfo r = discover(kOpenMpi);
  CHECK(r.rank == 2);
  CHECK(r.world_size == 3);
  CHECK(r.local_rank == 2);
  CHECK(r.local_world_size == 3);
  CHECK(r.master_addr == "127.0.0.1");  // one node: mpirun says nothing about rank 0's host
  CHECK(r.master_port == 29500);
  CHECK(r.source == "openmpi");

  const Vars two_nodes = with(with(kOpenMpi, "OMPI_COMM_WORLD_SIZE", "6"), "MASTER_ADDR", "10.0.0.2");
  const RankInfo m = discover(with(two_nodes, "MASTER_PORT", "40000"));
  CHECK(m.world_size == 6);
  CHECK(m.master_addr == "10.0.0.2");
  CHECK(m.master_port == 40000);
  // Several nodes and no MASTER_ADDR: nothing says where rank 0 is.
  const std::string e = error_for(without(two_nodes, "MASTER_ADDR"));
  CHECK_THAT(e, Contains("MASTER_ADDR is not set"));
  CHECK_THAT(e, Contains("OMPI_COMM_WORLD_SIZE=6"));
  CHECK_THAT(e, Contains("OMPI_COMM_WORLD_LOCAL_SIZE=3"));
  CHECK_THAT(e, Contains("mpirun -x MASTER_ADDR"));
}

TEST_CASE("discover_rank reads Slurm's variables and its compact node list", "[cpu]") {
  const RankInfo r = discover(kSlurm);
  CHECK(r.rank == 6);
  CHECK(r.world_size == 8);
  CHECK(r.local_rank == 2);
  CHECK(r.local_world_size == 4);
  CHECK(r.master_addr == "gpu07");  // the first host, its zero padding kept
  CHECK(r.master_port == 15000 + 4242 % 20000);  // the same on every node of the job
  CHECK(r.source == "slurm");

  CHECK(discover(with(kSlurm, "SLURM_JOB_ID", "123456")).master_port == 15000 + 123456 % 20000);
  CHECK(discover(with(kSlurm, "MASTER_PORT", "31000")).master_port == 31000);
  CHECK(discover(with(kSlurm, "MASTER_ADDR", "login2")).master_addr == "login2");
  // The step's node list is more specific than the job's.
  CHECK(discover(with(kSlurm, "SLURM_STEP_NODELIST", "a[2-3]")).master_addr == "a2");
  CHECK(discover(without(with(kSlurm, "SLURM_NODELIST", "b[10-11]"), "SLURM_JOB_NODELIST")).master_addr == "b10");
  // SLURM_NPROCS is the older name of SLURM_NTASKS.
  CHECK(discover(with(without(kSlurm, "SLURM_NTASKS"), "SLURM_NPROCS", "8")).world_size == 8);

  // Without --ntasks-per-node, Slurm describes the tasks per node as "3(x2),2"; this node is SLURM_NODEID.
  Vars uneven = without(kSlurm, "SLURM_NTASKS_PER_NODE");
  uneven["SLURM_TASKS_PER_NODE"] = "3(x2),2";
  uneven["SLURM_PROCID"] = "7";
  uneven["SLURM_LOCALID"] = "1";
  uneven["SLURM_NODEID"] = "2";
  CHECK(discover(uneven).local_world_size == 2);
  CHECK(discover(with(uneven, "SLURM_NODEID", "1")).local_world_size == 3);
  CHECK(discover(with(uneven, "SLURM_STEP_TASKS_PER_NODE", "4(x3)")).local_world_size == 4);
  CHECK_THAT(error_for(without(uneven, "SLURM_NODEID")),
             Contains("SLURM_TASKS_PER_NODE=3(x2),2 lists several nodes but SLURM_NODEID is not set"));
  CHECK_THAT(error_for(with(uneven, "SLURM_NODEID", "3")),
             Contains("SLURM_NODEID=3 is not a node of SLURM_TASKS_PER_NODE=3(x2),2"));
  CHECK_THAT(error_for(with(uneven, "SLURM_TASKS_PER_NODE", "3(x2")),
             Contains("SLURM_TASKS_PER_NODE=3(x2 is not a list"));
}

TEST_CASE("discover_rank: the innermost launcher's variables win", "[cpu]") {
  // torchrun (or ember-run) started by srun, one per node: the children see both sets.
  Vars both = kSlurm;
  both.insert(kTorchrun.begin(), kTorchrun.end());
  const RankInfo t = discover(both);
  CHECK(t.source == "torchrun");
  CHECK(t.rank == 5);
  CHECK(t.master_addr == "node7");
  // mpirun inside a Slurm allocation: Slurm's variables describe mpirun's daemons.
  Vars mpi_in_slurm = kSlurm;
  mpi_in_slurm.insert(kOpenMpi.begin(), kOpenMpi.end());
  const RankInfo m = discover(mpi_in_slurm);
  CHECK(m.source == "openmpi");
  CHECK(m.rank == 2);
  CHECK(m.world_size == 3);
}

TEST_CASE("discover_rank: explicit options win over every variable", "[cpu]") {
  const RankOptions o{.rank = 1, .world_size = 2, .master_addr = "10.1.1.1", .master_port = 12345};
  // Rank and world size given: no launcher variable is read (even a broken one), and the local
  // values default to one node rather than mixing in the launcher's layout.
  for (const Vars& env : {Vars{}, kTorchrun, kSlurm, kOpenMpi, Vars{{"RANK", "abc"}, {"LOCAL_RANK", "x"}}}) {
    const RankInfo r = discover(env, o);
    CHECK(r.rank == 1);
    CHECK(r.world_size == 2);
    CHECK(r.local_rank == 1);
    CHECK(r.local_world_size == 2);
    CHECK(r.master_addr == "10.1.1.1");
    CHECK(r.master_port == 12345);
    CHECK(r.source == "options");
  }
  // MASTER_ADDR / MASTER_PORT still fill what the options leave out.
  const RankOptions no_master{.rank = 0, .world_size = 4, .local_world_size = 2};
  const RankInfo m = discover(kTorchrun, no_master);
  CHECK(m.master_addr == "node7");
  CHECK(m.master_port == 29611);
  CHECK(m.local_world_size == 2);
  CHECK(m.local_rank == 0);
  CHECK(m.source == "options");

  // Partly given: the rest comes from the launcher, which is then the source.
  const RankOptions port_only{.master_port = 3000};
  const RankInfo mixed = discover(kTorchrun, port_only);
  CHECK(mixed.rank == 5);
  CHECK(mixed.master_port == 3000);
  CHECK(mixed.master_addr == "node7");
  CHECK(mixed.source == "torchrun");
  const RankOptions rank_only{.rank = 0};
  const RankInfo r0 = discover(kTorchrun, rank_only);
  CHECK(r0.rank == 0);
  CHECK(r0.world_size == 8);
  CHECK(r0.source == "torchrun");
}

TEST_CASE("discover_rank: missing settings name what is missing", "[cpu]") {
  const std::string none = error_for({});
  CHECK_THAT(none, Contains("no rank given"));
  CHECK_THAT(none, Contains("RANK, WORLD_SIZE"));
  CHECK_THAT(none, Contains("SLURM_PROCID"));
  CHECK_THAT(none, Contains("OMPI_COMM_WORLD_RANK"));
  CHECK_THAT(error_for({{"RANK", "1"}}), Contains("WORLD_SIZE is not set but RANK=1 is"));
  CHECK_THAT(error_for({{"WORLD_SIZE", "4"}}), Contains("RANK is not set but WORLD_SIZE=4 is"));
  CHECK_THAT(error_for(without(kSlurm, "SLURM_NTASKS")), Contains("SLURM_NTASKS is not set but SLURM_PROCID=6 is"));
  CHECK_THAT(error_for(without(kOpenMpi, "OMPI_COMM_WORLD_RANK")),
             Contains("OMPI_COMM_WORLD_RANK is not set but OMPI_COMM_WORLD_SIZE=3 is"));
  const RankOptions rank_only{.rank = 1};
  CHECK_THAT(error_for({}, rank_only), Contains("no world_size given but RankOptions.rank=1 is"));
  // Several nodes and nothing naming rank 0's host.
  const std::string no_master = error_for(without(kTorchrun, "MASTER_ADDR"));
  CHECK_THAT(no_master, Contains("MASTER_ADDR is not set"));
  CHECK_THAT(no_master, Contains("WORLD_SIZE=8"));
  CHECK_THAT(no_master, Contains("LOCAL_WORLD_SIZE=4"));
}

TEST_CASE("launcher_rank: a plain start has none, part of a launcher's variables is an error", "[cpu]") {
  const auto over = [](const Vars& vars) {
    return [vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  CHECK_FALSE(launcher_rank(over({})).has_value());
  CHECK_FALSE(launcher_rank(over({{"SLURM_NTASKS", "4"}, {"MASTER_ADDR", "node7"}})).has_value());
  const auto info = launcher_rank(over(kTorchrun));
  REQUIRE(info.has_value());
  CHECK(info->rank == 5);
  CHECK(info->world_size == 8);
  // A launcher that set the world size but not the rank: the program must not train alone.
  CHECK_THAT(error_of([&] {
               launcher_rank(over({{"WORLD_SIZE", "2"}}));
             }),
             Contains("RANK is not set but WORLD_SIZE=2 is"));
  CHECK_THAT(error_of([&] { launcher_rank(over(without(kOpenMpi, "OMPI_COMM_WORLD_RANK"))); }),
             Contains("OMPI_COMM_WORLD_RANK is not set but OMPI_COMM_WORLD_SIZE=3 is"));
}

TEST_CASE("discover_rank: bad and contradictory settings name the variable and its value", "[cpu]") {
  struct Case {
    Vars env;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {with(kTorchrun, "RANK", "8"), "(torchrun variables): RANK=8 is not below WORLD_SIZE=8"},
      {with(kTorchrun, "RANK", "-1"), "RANK=-1 is negative"},
      {with(kTorchrun, "RANK", "abc"), "RANK=abc is not an integer"},
      {with(kTorchrun, "RANK", "3x"), "RANK=3x is not an integer"},
      {with(kTorchrun, "RANK", " 3"), "RANK= 3 is not an integer"},
      {with(kTorchrun, "RANK", ""), "RANK is set but empty"},
      {with(kTorchrun, "RANK", "99999999999"), "RANK=99999999999 is out of range"},
      {with(kTorchrun, "WORLD_SIZE", "0"), "WORLD_SIZE=0 must be at least 1"},
      {with(kTorchrun, "LOCAL_RANK", "4"), "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"},
      {with(kTorchrun, "LOCAL_RANK", "-2"), "LOCAL_RANK=-2 is negative"},
      {with(kTorchrun, "LOCAL_WORLD_SIZE", "16"), "LOCAL_WORLD_SIZE=16 is larger than WORLD_SIZE=8"},
      {with(kTorchrun, "LOCAL_WORLD_SIZE", "0"), "LOCAL_WORLD_SIZE=0 must be at least 1"},
      {with(kTorchrun, "MASTER_PORT", "70000"), "MASTER_PORT=70000 is out of range (1-65535)"},
      {with(kTorchrun, "MASTER_PORT", "0"), "MASTER_PORT=0 is out of range (1-65535)"},
      {with(kTorchrun, "MASTER_PORT", "http"), "MASTER_PORT=http is not an integer"},
      {with(kTorchrun, "MASTER_ADDR", ""), "MASTER_ADDR is set but empty"},
      {with(kOpenMpi, "OMPI_COMM_WORLD_RANK", "3"),
       "(openmpi variables): OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=3"},
      {with(kOpenMpi, "OMPI_COMM_WORLD_LOCAL_RANK", "x"), "OMPI_COMM_WORLD_LOCAL_RANK=x is not an integer"},
      {with(kSlurm, "SLURM_PROCID", "8"), "(slurm variables): SLURM_PROCID=8 is not below SLURM_NTASKS=8"},
      {with(kSlurm, "SLURM_LOCALID", "4"), "SLURM_LOCALID=4 is not below SLURM_NTASKS_PER_NODE=4"},
      {with(kSlurm, "SLURM_JOB_ID", "12ab"), "SLURM_JOB_ID=12ab is not an integer"},
      {with(kSlurm, "SLURM_JOB_NODELIST", "gpu[01-04"), "SLURM_JOB_NODELIST=gpu[01-04: expand_slurm_nodelist"},
  };
  for (const Case& c : cases) {
    INFO("expected: " << c.expected);
    CHECK_THAT(error_for(c.env), Contains(c.expected));
  }

  const RankOptions bad_rank{.rank = 2, .world_size = 2};
  CHECK_THAT(error_for({}, bad_rank), Contains("RankOptions.rank=2 is not below RankOptions.world_size=2"));
  const RankOptions negative{.rank = -3};
  CHECK_THAT(error_for(kTorchrun, negative), Contains("RankOptions.rank=-3 is negative"));
  const RankOptions bad_port{.master_port = 0};
  CHECK_THAT(error_for(kTorchrun, bad_port), Contains("RankOptions.master_port=0 is out of range"));
  const RankOptions big_node{.rank = 0, .world_size = 2, .local_world_size = 4};
  CHECK_THAT(error_for({}, big_node),
             Contains("RankOptions.local_world_size=4 is larger than RankOptions.world_size=2"));
  // An option contradicting the launcher's layout.
  const RankOptions local_only{.local_rank = 4};
  CHECK_THAT(error_for(kTorchrun, local_only), Contains("RankOptions.local_rank=4 is not below LOCAL_WORLD_SIZE=4"));
}

TEST_CASE("expand_slurm_nodelist expands Slurm's compact host lists", "[cpu]") {
  using V = std::vector<std::string>;
  CHECK(expand_slurm_nodelist("gpu[01-04,07]") == V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"});
  CHECK(expand_slurm_nodelist("a[1-2],b[09-11]") == V{"a1", "a2", "b09", "b10", "b11"});
  CHECK(expand_slurm_nodelist("node1") == V{"node1"});
  CHECK(expand_slurm_nodelist("n1,n2,login") == V{"n1", "n2", "login"});
  CHECK(expand_slurm_nodelist("c[8-10]") == V{"c8", "c9", "c10"});  // no padding on 8: none added
  CHECK(expand_slurm_nodelist("c[098-101]") == V{"c098", "c099", "c100", "c101"});
  CHECK(expand_slurm_nodelist("r[1-2]n[1-2]") == V{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand_slurm_nodelist("rack[3]-gpu[5,7]x") == V{"rack3-gpu5x", "rack3-gpu7x"});
  CHECK(expand_slurm_nodelist("gpu-[1-2],cpu[3],x") == V{"gpu-1", "gpu-2", "cpu3", "x"});
  CHECK(expand_slurm_nodelist("").empty());
  CHECK(expand_slurm_nodelist("h[0-999]").size() == 1000);
  CHECK(expand_slurm_nodelist("h[0-999]").back() == "h999");

  for (const std::string bad : {"gpu[01-04", "gpu01-04]", "a[[1]]", "a[3-1]", "a[x-2]", "a[1-]", "a[]", "a,,b", "a,",
                                "a[1,,2]", "a[0-99999999999]"}) {
    INFO("list: " << bad);
    const std::string e = error_of([&] { expand_slurm_nodelist(bad); });
    CHECK_THAT(e, Contains("expand_slurm_nodelist: '" + bad + "'"));
  }
}

TEST_CASE("restart_count_from_env reads EMBER_RESTART_COUNT, else TORCHELASTIC_RESTART_COUNT", "[cpu]") {
  using ember::parallel::restart_count_from_env;
  ScopedEnv torch("TORCHELASTIC_RESTART_COUNT", nullptr);
  {
    ScopedEnv unset("EMBER_RESTART_COUNT", nullptr);
    CHECK(restart_count_from_env() == 0);
    ScopedEnv t("TORCHELASTIC_RESTART_COUNT", "4");
    CHECK(restart_count_from_env() == 4);
  }
  {
    ScopedEnv set("EMBER_RESTART_COUNT", "2");
    ScopedEnv t("TORCHELASTIC_RESTART_COUNT", "4");
    CHECK(restart_count_from_env() == 2);  // ember-run's own variable first
  }
  for (const char* bad : {"", "-1", "one", "2x"}) {
    ScopedEnv set("EMBER_RESTART_COUNT", bad);
    INFO("value: '" << bad << "'");
    CHECK_THAT(error_of([] { restart_count_from_env(); }),
               Contains(std::string("EMBER_RESTART_COUNT=") + bad + " is not a whole number >= 0"));
  }
}

TEST_CASE("collective_timeout_from_env reads EMBER_COLLECTIVE_TIMEOUT", "[cpu]") {
  using ember::parallel::collective_timeout_from_env;
  {
    ScopedEnv unset("EMBER_COLLECTIVE_TIMEOUT", nullptr);
    CHECK(collective_timeout_from_env().seconds == 300.0);
    CHECK(collective_timeout_from_env(12.5).seconds == 12.5);
    CHECK(collective_timeout_from_env().source == "the default");
  }
  {
    ScopedEnv set("EMBER_COLLECTIVE_TIMEOUT", "2.5");
    CHECK(collective_timeout_from_env().seconds == 2.5);
    CHECK(collective_timeout_from_env(7).seconds == 2.5);
    CHECK(collective_timeout_from_env().source == "EMBER_COLLECTIVE_TIMEOUT");
  }
  for (const char* bad : {"abc", "0", "-5", "", "10s", "inf", "nan"}) {
    ScopedEnv set("EMBER_COLLECTIVE_TIMEOUT", bad);
    INFO("value: '" << bad << "'");
    CHECK_THAT(error_of([] { collective_timeout_from_env(); }),
               Contains(std::string("EMBER_COLLECTIVE_TIMEOUT=") + bad + " is not a number of seconds"));
  }
}
