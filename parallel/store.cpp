// TcpStore client and store_barrier (see store.h; wire format in store_protocol.h).
#include <ember/parallel/store.h>

#include <cstdio>
#include <iomanip>
#include <sstream>

#include <ember/core/error.h>
#include <ember/parallel/store_protocol.h>
#include <ember/parallel/store_server.h>

namespace ember::parallel {

using namespace store_wire;

namespace {

// How long past a request's own timeout a client waits for the server's answer before it calls
// the server unresponsive (the server answers timeouts itself; this covers a stopped server).
constexpr double kReplySlackS = 10.0;

std::string keys_str(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) out += " and " + std::to_string(keys.size() - 8) + " more";
  return out;
}

int64_t to_ms(double s) { return static_cast<int64_t>(s * 1000.0 + 0.5); }

}  // namespace

std::string seconds_str(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << s << " s";
  return os.str();
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

void Store::wait(const std::vector<std::string>& keys, double timeout_s) {
  const std::vector<std::string> missing = wait_for(keys, timeout_s);
  EMBER_CHECK(missing.empty(), "store wait timed out after ", seconds_str(timeout_s), ": key",
              missing.size() == 1 ? " " : "s ", keys_str(missing), missing.size() == 1 ? " was" : " were",
              " never set (store at ", address(), ")");
}

struct TcpStore::Reply {
  Status status;
  std::string body;  // the fields after the status byte
  Reader reader() const { return Reader(body.data(), body.size()); }
};

TcpStore::TcpStore(const TcpStoreOptions& opts)
    : TcpStore(opts, opts.is_server ? std::make_shared<TcpStoreServer>(opts.host, opts.port, opts.origin) : nullptr) {}

TcpStore::TcpStore(const TcpStoreOptions& opts, std::shared_ptr<TcpStoreServer> server)
    : opts_(opts), server_(std::move(server)) {
  timeout_s_ = opts.timeout_s;
  port_ = server_ ? server_->port() : opts.port;
  EMBER_CHECK(port_ > 0 && port_ < 65536, "TcpStore: port ", port_, " is not a TCP port (1-65535)",
              opts.origin.empty() ? "" : " (" + opts.origin + ")");
  sock_ = net::connect_to(opts.host, port_, net::deadline_in(opts.timeout_s),
                          opts.origin.empty() ? "the store" : "the store, " + opts.origin);
}

TcpStore::~TcpStore() = default;

std::shared_ptr<Store> TcpStore::clone() const {
  TcpStoreOptions o = opts_;
  o.port = port_;
  o.is_server = false;
  return std::shared_ptr<TcpStore>(new TcpStore(o, server_));
}

std::string TcpStore::address() const { return opts_.host + ":" + std::to_string(port_); }

std::string TcpStore::local_address() const { return net::local_address(sock_); }

TcpStore::Reply TcpStore::roundtrip(const std::string& request, double wait_s, const char* what,
                                    const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(broken_.empty(), "store ", what, "('", key, "'): the connection to the store at ", address(),
              " is unusable: ", broken_);
  const std::string peer = "the store at " + address();
  std::string body;
  try {
    net::send_all(sock_, request.data(), request.size(), peer);
    uint32_t n = 0;
    const auto deadline = net::deadline_in(wait_s + kReplySlackS);
    bool ok = net::recv_all(sock_, &n, 4, deadline, peer);
    EMBER_CHECK(!ok || (n >= 1 && n <= kMaxMessage), "store ", what, ": reply of ", n, " bytes from ", peer,
                " is not a store reply");
    body.resize(ok ? n : 0);
    ok = ok && net::recv_all(sock_, body.data(), n, deadline, peer);
    EMBER_CHECK(ok, "store ", what, "('", key, "'): ", peer, " did not answer within ",
                seconds_str(wait_s + kReplySlackS));
  } catch (const Error& e) {
    broken_ = e.message();  // a failed send or receive leaves the stream in an unknown state
    throw;
  }
  Reply r{static_cast<Status>(body[0]), body.substr(1)};
  if (r.status == Status::error) {
    Reader rd = r.reader();
    EMBER_FAIL("store ", what, "('", key, "') failed: ", rd.str());
  }
  return r;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  roundtrip(Writer().u8(uint8_t(Cmd::set)).str(key).str(value).framed(), 0, "set", key);
}

void TcpStore::set_nowait(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(broken_.empty(), "store set('", key, "'): the connection to the store at ", address(),
              " is unusable: ", broken_);
  const std::string req = Writer().u8(uint8_t(Cmd::set_noreply)).str(key).str(value).framed();
  try {
    net::send_all(sock_, req.data(), req.size(), "the store at " + address());
  } catch (const Error& e) {
    broken_ = e.message();
    throw;
  }
}

std::string TcpStore::get(const std::string& key) {
  Reply r = roundtrip(Writer().u8(uint8_t(Cmd::get)).str(key).i64(to_ms(timeout_s_)).framed(), timeout_s_, "get", key);
  EMBER_CHECK(r.status == Status::ok, "store get('", key, "') timed out after ", seconds_str(timeout_s_),
              ": no rank set the key (store at ", address(), ")");
  return r.reader().str();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return roundtrip(Writer().u8(uint8_t(Cmd::add)).str(key).i64(delta).framed(), 0, "add", key).reader().i64();
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return roundtrip(Writer().u8(uint8_t(Cmd::compare_set)).str(key).str(expected).str(desired).framed(), 0,
                   "compare_set", key)
      .reader()
      .str();
}

std::vector<std::string> TcpStore::wait_for(const std::vector<std::string>& keys, double timeout_s) {
  Reply r = roundtrip(Writer().u8(uint8_t(Cmd::wait)).i64(to_ms(timeout_s)).strs(keys).framed(), timeout_s, "wait",
                      keys.empty() ? std::string() : keys[0]);
  if (r.status == Status::ok) return {};
  return r.reader().strs();
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return roundtrip(Writer().u8(uint8_t(Cmd::check)).strs(keys).framed(), 0, "check",
                   keys.empty() ? std::string() : keys[0])
             .reader()
             .i64() == 1;
}

bool TcpStore::remove(const std::string& key) {
  return roundtrip(Writer().u8(uint8_t(Cmd::remove)).str(key).framed(), 0, "remove", key).reader().i64() == 1;
}

void store_barrier(Store& store, const std::string& name, int rank, int world_size, double timeout_s) {
  EMBER_CHECK(rank >= 0 && rank < world_size, "store_barrier('", name, "'): rank ", rank, " is not in [0, ", world_size,
              ")");
  const std::string prefix = "barrier/" + name + "/";
  store.set(prefix + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(prefix + std::to_string(r));
  const std::vector<std::string> missing = store.wait_for(keys, timeout_s);
  if (missing.empty()) return;
  std::vector<int> ranks;
  for (const std::string& k : missing) ranks.push_back(std::stoi(k.substr(prefix.size())));
  EMBER_FAIL("barrier '", name, "' timed out after ", seconds_str(timeout_s), " on rank ", rank, ": ", ranks_str(ranks),
             " of ", world_size, ranks.size() == 1 ? " has" : " have", " not arrived (store at ", store.address(), ")");
}

}  // namespace ember::parallel
