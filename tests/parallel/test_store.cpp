// TcpStore: every operation against a real server on 127.0.0.1 (in this process), atomic adds
// from several threads and connections, waits that time out naming the keys, barriers naming the
// ranks that have not arrived, a server that goes away, and the address errors of a bad setting.
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <ember/parallel/init.h>
#include <ember/parallel/store.h>
#include <ember/parallel/tcp_socket.h>

#include "support/error_of.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::error_of;

namespace {

std::shared_ptr<TcpStore> make_server(double timeout_s = 10.0) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;  // any free port
  o.is_server = true;
  o.timeout_s = timeout_s;
  return std::make_shared<TcpStore>(o);
}

std::shared_ptr<TcpStore> make_client(const TcpStore& server, double timeout_s = 10.0) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = server.port();
  o.timeout_s = timeout_s;
  return std::make_shared<TcpStore>(o);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("TcpStore: set, get, add, compare_set, check, remove across connections", "[cpu][parallel][store]") {
  auto server = make_server();
  auto client = make_client(*server);
  CHECK(server->port() > 0);
  CHECK(server->local_address() == "127.0.0.1");

  server->set("a", std::string("x\0y", 3));  // values are bytes
  CHECK(client->get("a") == std::string("x\0y", 3));
  client->set("a", "2");
  CHECK(server->get("a") == "2");

  CHECK(client->add("n", 5) == 5);
  CHECK(server->add("n", -2) == 3);
  CHECK(client->get("n") == "3");
  CHECK_THAT(error_of([&] { client->add("a2", 1), client->set("a2", "abc"), client->add("a2", 1); }),
             Catch::Contains("add('a2')") && Catch::Contains("'abc', not an integer"));
  // A sum outside int64 is refused and the key keeps its value (tests/fuzz/regressions/store/).
  const int64_t top = std::numeric_limits<int64_t>::max();
  CHECK(client->add("big", top) == top);
  CHECK_THAT(error_of([&] { client->add("big", 1); }), Catch::Contains("add('big')") && Catch::Contains("overflows"));
  CHECK(server->get("big") == std::to_string(top));

  // compare_set: a missing key matches only "", a present one only its value.
  CHECK(client->compare_set("c", "zzz", "1") == "");
  CHECK(client->compare_set("c", "", "1") == "1");
  CHECK(server->compare_set("c", "0", "2") == "1");
  CHECK(server->compare_set("c", "1", "2") == "2");

  CHECK(client->check({"a", "n", "c"}));
  CHECK_FALSE(client->check({"a", "missing"}));
  CHECK(client->remove("a"));
  CHECK_FALSE(client->remove("a"));
  CHECK_FALSE(server->check({"a"}));

  // set_nowait is ordered before the connection's next request.
  client->set_nowait("q", "v");
  CHECK(client->get("q") == "v");

  // A clone is a separate connection to the same server.
  auto other = client->clone();
  other->set("from_clone", "1");
  CHECK(server->get("from_clone") == "1");
}

TEST_CASE("TcpStore: get and wait block until another client sets the keys", "[cpu][parallel][store]") {
  auto server = make_server();
  auto client = make_client(*server);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    server->set("k1", "v1");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server->set("k2", "v2");
  });
  client->wait({"k1", "k2"}, 5.0);
  CHECK(seconds_since(t0) >= 0.19);
  CHECK(client->get("k2") == "v2");
  setter.join();
}

TEST_CASE("TcpStore: adds from many threads and connections are atomic", "[cpu][parallel][store]") {
  auto server = make_server();
  constexpr int kThreads = 4, kAdds = 200;
  std::vector<std::thread> threads;
  std::atomic<int64_t> max_seen{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto c = make_client(*server);
      for (int i = 0; i < kAdds; ++i) {
        const int64_t v = c->add("counter", 1);
        int64_t m = max_seen.load();
        while (v > m && !max_seen.compare_exchange_weak(m, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(server->get("counter") == std::to_string(kThreads * kAdds));
  CHECK(max_seen.load() == kThreads * kAdds);
}

TEST_CASE("TcpStore: timeouts name the keys, the time waited and the store", "[cpu][parallel][store]") {
  auto server = make_server(0.3);
  auto client = make_client(*server, 0.3);
  client->set("present", "1");
  auto t0 = std::chrono::steady_clock::now();
  const std::string wait_err = error_of([&] { client->wait({"present", "absent1", "absent2"}, 0.3); });
  CHECK(seconds_since(t0) >= 0.29);
  CHECK(seconds_since(t0) < 5.0);
  CHECK_THAT(wait_err, Catch::Contains("timed out after 0.3 s") && Catch::Contains("'absent1', 'absent2'") &&
                           Catch::Contains("127.0.0.1:" + std::to_string(server->port())));
  CHECK_THAT(wait_err, !Catch::Contains("'present'"));
  CHECK(client->wait_for({"present", "absent1"}, 0.05) == std::vector<std::string>{"absent1"});

  t0 = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { client->get("never"); }),
             Catch::Contains("get('never') timed out after 0.3 s") && Catch::Contains("no rank set the key"));
  CHECK(seconds_since(t0) >= 0.29);
  // The connection is still in step after the timeouts.
  CHECK(client->get("present") == "1");
}

TEST_CASE("deadlines of huge or infinite timeouts saturate instead of wrapping into the past",
          "[cpu][parallel][store]") {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  CHECK(net::deadline_in(1e10) > now + std::chrono::hours(24 * 365));
  CHECK(net::deadline_in(std::numeric_limits<double>::infinity()) == Clock::time_point::max());
  CHECK(net::seconds_left(net::deadline_in(1e10)) > 1e9);
  CHECK(net::deadline_in(0.5) < now + std::chrono::seconds(2));
  InitOptions o;
  o.timeout_s = std::numeric_limits<double>::infinity();
  CHECK_THAT(error_of([&] { init_process_group(o); }), Catch::Contains("timeout_s must be a finite number"));
}

TEST_CASE("init_process_group: a rank with another world size, or a rank taken by another process, is refused",
          "[cpu][parallel][store]") {
  // What an earlier rank left in the job's store: a world size of 3, and rank 0 taken elsewhere.
  auto server = make_server(5.0);
  server->set("ember/init/world_size", "3");
  InitOptions o;
  o.backend = "tcp";
  o.store = server;
  o.rank.rank = 1;
  o.rank.world_size = 2;
  o.rank.master_addr = "127.0.0.1";
  o.rank.master_port = server->port();
  o.timeout_s = 5;
  CHECK_THAT(error_of([&] { init_process_group(o); }),
             Catch::Contains("rank 1 was started with world size 2 (from options) but an earlier rank joined with "
                             "world size 3") &&
                 Catch::Contains("--nproc-per-node"));
  server->remove("ember/init/world_size");
  server->set("ember/init/rank/0", "node7 pid 4242");
  o.rank.rank = 0;
  o.rank.world_size = 1;
  CHECK_THAT(error_of([&] { init_process_group(o); }),
             Catch::Contains("rank 0 (from options) was already taken by node7 pid 4242 when ") &&
                 Catch::Contains("two processes were given the same rank"));
  CHECK_FALSE(is_initialized());
}

TEST_CASE("init_process_group: rank 0 of a several-node job warns of a MASTER_ADDR that is loopback on its node",
          "[cpu][parallel][store]") {
  RankInfo info;
  info.rank = 0;
  info.world_size = 8;
  info.local_world_size = 4;  // two nodes
  info.master_addr = "node01";
  CHECK_THAT(loopback_master_warning(info, "127.0.1.1"),
             Catch::Contains("MASTER_ADDR=node01 is 127.0.1.1 on rank 0's node, a loopback address") &&
                 Catch::Contains("spans several nodes (world size 8, 4 on this node)") &&
                 Catch::Contains("/etc/hosts"));
  CHECK_FALSE(loopback_master_warning(info, "::1").empty());
  CHECK(loopback_master_warning(info, "10.1.2.3").empty());  // reachable
  info.local_world_size = 8;
  CHECK(loopback_master_warning(info, "127.0.0.1").empty());  // one node: loopback is right
  info.local_world_size = 4;
  info.rank = 4;
  CHECK(loopback_master_warning(info, "127.0.1.1").empty());  // rank 0 says it, once
}

TEST_CASE("store_barrier: passes when all arrive, and a timeout names the missing ranks", "[cpu][parallel][store]") {
  auto server = make_server();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { store_barrier(*make_client(*server), "all", r, 3, 5.0); });
  }
  for (auto& t : threads) t.join();

  std::string one_err;  // rank 1 times out too (Catch assertions stay on the test's thread)
  std::thread one([&] {
    try {
      store_barrier(*make_client(*server), "partial", 1, 4, 1.0);
    } catch (const Error& e) {
      one_err = e.what();
    }
  });
  server->wait({"barrier/partial/1"}, 5.0);  // rank 1 has arrived before rank 0 starts waiting
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of([&] { store_barrier(*server, "partial", 0, 4, 0.4); });
  CHECK_THAT(err, Catch::Contains("barrier 'partial' timed out after 0.4 s on rank 0") &&
                      Catch::Contains("ranks 2, 3 of 4 have not arrived"));
  CHECK(seconds_since(t0) < 5.0);
  one.join();
  CHECK_THAT(one_err, Catch::Contains("on rank 1") && Catch::Contains("ranks 2, 3 of 4 have not arrived"));
}

TEST_CASE("TcpStore: a server that goes away is an error naming the store, never a hang", "[cpu][parallel][store]") {
  auto server = make_server();
  auto client = make_client(*server, 2.0);
  client->set("k", "v");
  const int port = server->port();
  server.reset();  // stops the server: its thread closes every connection
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { client->get("k"); }), Catch::Contains("127.0.0.1:" + std::to_string(port)));
  CHECK(seconds_since(t0) < 2.0);
  CHECK_THAT(error_of([&] { client->set("k", "v"); }), Catch::Contains("unusable"));
}

TEST_CASE("TcpStore: a port in use and an address that does not resolve name the setting", "[cpu][parallel][store]") {
  auto server = make_server();
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = server->port();
  o.is_server = true;
  o.timeout_s = 1.0;
  o.origin = "MASTER_PORT=" + std::to_string(server->port());
  CHECK_THAT(error_of([&] { TcpStore s(o); }), Catch::Contains("port " + std::to_string(server->port())) &&
                                                   Catch::Contains("in use") &&
                                                   Catch::Contains("MASTER_PORT=" + std::to_string(server->port())));

  o.host = "no-such-host.invalid";
  o.is_server = false;
  o.origin = "MASTER_ADDR=no-such-host.invalid";
  CHECK_THAT(error_of([&] { TcpStore s(o); }),
             Catch::Contains("cannot resolve") && Catch::Contains("MASTER_ADDR=no-such-host.invalid"));

  // Nobody listens: connecting retries until the timeout, then says so.
  o.host = "127.0.0.1";
  o.port = server->port();
  server.reset();
  o.timeout_s = 0.3;
  o.origin = "MASTER_PORT=" + std::to_string(o.port);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { TcpStore s(o); }), Catch::Contains("cannot connect") && Catch::Contains("rank 0"));
  CHECK(seconds_since(t0) >= 0.29);
}
