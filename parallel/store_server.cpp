// The TCP store server (see store_server.h and store_protocol.h for the wire format).
#include <ember/parallel/store_server.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <ember/core/error.h>
#include <ember/parallel/store_protocol.h>

namespace ember::parallel {

using namespace store_wire;
using net::Clock;

namespace {

struct Client {
  net::Socket sock;
  std::string in;  // bytes received, not yet a whole message
  std::string out;  // replies not yet written
  bool closed = false;
};

// A get() or wait() parked until its keys are set or its deadline passes.
struct Waiter {
  int fd;
  Cmd cmd;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

}  // namespace

struct TcpStoreServer::State {
  std::unordered_map<std::string, std::string> data;
  std::map<int, Client> clients;  // by fd
  std::vector<Waiter> waiters;

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data.count(k) != 0; });
  }

  void reply(int fd, const Writer& w) {
    auto it = clients.find(fd);
    if (it == clients.end()) return;
    it->second.out += w.framed();
    flush(it->second);
  }

  void flush(Client& c) {
    while (!c.out.empty() && !c.closed) {
      const ssize_t k = ::send(c.sock.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        c.out.erase(0, static_cast<size_t>(k));
      } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;  // the rest goes out when poll says the socket is writable
      } else if (k < 0 && errno == EINTR) {
        continue;
      } else {
        c.closed = true;  // the client is gone; its requests die with it
      }
    }
  }

  // The answer to a satisfied waiter.
  void answer(const Waiter& w) {
    Writer r;
    r.u8(static_cast<uint8_t>(Status::ok));
    if (w.cmd == Cmd::get) r.str(data.at(w.keys[0]));
    reply(w.fd, r);
  }

  // After a key changed: answer every waiter whose keys are now all set, in arrival order.
  void wake() {
    std::vector<Waiter> still;
    for (Waiter& w : waiters) {
      if (has_all(w.keys)) {
        answer(w);
      } else {
        still.push_back(std::move(w));
      }
    }
    waiters.swap(still);
  }

  void expire(Clock::time_point now) {
    std::vector<Waiter> still;
    for (Waiter& w : waiters) {
      if (now < w.deadline) {
        still.push_back(std::move(w));
        continue;
      }
      Writer r;
      r.u8(static_cast<uint8_t>(Status::timeout));
      if (w.cmd == Cmd::wait) {
        std::vector<std::string> missing;
        for (const std::string& k : w.keys)
          if (!data.count(k)) missing.push_back(k);
        r.strs(missing);
      }
      reply(w.fd, r);
    }
    waiters.swap(still);
  }

  void park(int fd, Cmd cmd, std::vector<std::string> keys, int64_t timeout_ms) {
    Waiter w{fd, cmd, std::move(keys), Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0))};
    if (has_all(w.keys)) {
      answer(w);
    } else {
      waiters.push_back(std::move(w));
    }
  }

  void handle(int fd, Reader& rd) {
    const Cmd cmd = static_cast<Cmd>(rd.u8());
    Writer ok;
    ok.u8(static_cast<uint8_t>(Status::ok));
    switch (cmd) {
      case Cmd::set:
      case Cmd::set_noreply: {
        std::string key = rd.str();
        data[key] = rd.str();
        if (cmd == Cmd::set) reply(fd, ok);
        wake();
        return;
      }
      case Cmd::get: {
        std::string key = rd.str();
        park(fd, cmd, {key}, rd.i64());
        return;
      }
      case Cmd::add: {
        const std::string key = rd.str();
        const int64_t delta = rd.i64();
        int64_t v = 0;
        auto it = data.find(key);
        if (it != data.end()) {
          const std::string& s = it->second;
          auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
          if (ec != std::errc() || end != s.data() + s.size()) {
            Writer e;
            e.u8(static_cast<uint8_t>(Status::error))
                .str("add('" + key + "'): the key holds '" + s.substr(0, 40) + "', not an integer");
            reply(fd, e);
            return;
          }
        }
        v += delta;
        data[key] = std::to_string(v);
        reply(fd, ok.i64(v));
        wake();
        return;
      }
      case Cmd::compare_set: {
        const std::string key = rd.str();
        const std::string expected = rd.str();
        std::string desired = rd.str();
        auto it = data.find(key);
        const bool match = it == data.end() ? expected.empty() : it->second == expected;
        if (match) data[key] = std::move(desired);
        auto now = data.find(key);
        reply(fd, ok.str(now == data.end() ? std::string() : now->second));
        if (match) wake();
        return;
      }
      case Cmd::wait: {
        const int64_t timeout_ms = rd.i64();
        park(fd, cmd, rd.strs(), timeout_ms);
        return;
      }
      case Cmd::check:
        reply(fd, ok.i64(has_all(rd.strs()) ? 1 : 0));
        return;
      case Cmd::remove:
        reply(fd, ok.i64(data.erase(rd.str()) ? 1 : 0));
        return;
    }
    Writer e;
    e.u8(static_cast<uint8_t>(Status::error)).str("unknown store command " + std::to_string(int(cmd)));
    reply(fd, e);
  }

  // Handles every whole message in the client's buffer.
  void consume(int fd) {
    Client& c = clients.at(fd);
    size_t pos = 0;
    while (c.in.size() - pos >= 4) {
      uint32_t n;
      std::memcpy(&n, c.in.data() + pos, 4);
      if (n > kMaxMessage) {
        c.closed = true;  // not our protocol: drop the connection
        return;
      }
      if (c.in.size() - pos - 4 < n) break;
      Reader rd(c.in.data() + pos + 4, n);
      pos += 4 + n;
      try {
        handle(fd, rd);
      } catch (const std::exception& e) {  // a malformed request: answer it, keep serving
        Writer w;
        w.u8(static_cast<uint8_t>(Status::error)).str(e.what());
        reply(fd, w);
      }
      if (!clients.count(fd)) return;
    }
    clients.at(fd).in.erase(0, pos);
  }

  void drop_closed() {
    for (auto it = clients.begin(); it != clients.end();) {
      if (!it->second.closed) {
        ++it;
        continue;
      }
      const int fd = it->first;
      waiters.erase(std::remove_if(waiters.begin(), waiters.end(), [fd](const Waiter& w) { return w.fd == fd; }),
                    waiters.end());
      it = clients.erase(it);
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& origin)
    : state_(std::make_unique<State>()) {
  // Bound to the master address itself, not to every interface: a job on 127.0.0.1 stays off the
  // network, and a multi-node job's MASTER_ADDR is an address the other nodes reach.
  listener_ = net::listen_on(host, port, origin);
  port_ = net::local_port(listener_);
  net::set_non_blocking(listener_, true);
  EMBER_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "TcpStoreServer: pipe failed: ", net::error_text(errno));
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char b = 'x';
  if (::write(wake_[1], &b, 1) != 1) std::fprintf(stderr, "ember: TcpStoreServer: cannot wake the server thread\n");
  if (thread_.joinable()) thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() noexcept {
  State& st = *state_;
  std::vector<pollfd> fds;
  char buf[1 << 16];
  for (;;) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (auto& [fd, c] : st.clients) fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    int timeout_ms = -1;
    if (!st.waiters.empty()) {
      Clock::time_point first = st.waiters.front().deadline;
      for (const Waiter& w : st.waiters) first = std::min(first, w.deadline);
      timeout_ms = static_cast<int>(std::clamp<double>(net::seconds_left(first) * 1000.0 + 1.0, 0.0, 3.6e6));
    }
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      std::fprintf(stderr, "ember: TcpStoreServer: poll failed (%s); the store stops\n",
                   net::error_text(errno).c_str());
      return;
    }
    if (fds[0].revents) return;  // destructor
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int cfd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) break;
        net::Socket s(cfd);
        net::set_no_delay(s);
        st.clients[cfd].sock = std::move(s);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      auto it = st.clients.find(fds[i].fd);
      if (it == st.clients.end() || fds[i].revents == 0) continue;
      Client& c = it->second;
      if (fds[i].revents & POLLOUT) st.flush(c);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          const ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
          if (k > 0) {
            c.in.append(buf, static_cast<size_t>(k));
            continue;
          }
          if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.closed = true;
          break;
        }
        st.consume(fds[i].fd);
      }
    }
    st.expire(Clock::now());
    st.drop_closed();
  }
}

}  // namespace ember::parallel
