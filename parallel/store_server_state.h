#pragma once
// Internal: the TCP store server's state and its handling of request bytes (wire format in
// store_protocol.h), apart from the poll() loop in store_server.cpp that feeds it. Kept in a
// header so that tests/fuzz/fuzz_store.cpp can feed bytes to the same parser a connection feeds.
// Not part of the public API.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <ember/parallel/store_protocol.h>
#include <ember/parallel/tcp_socket.h>

namespace ember::parallel::store_wire {

using net::Clock;

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

// Every key, every connection (by fd) and every parked request of one server. consume(fd) handles
// the whole messages in clients[fd].in; replies are appended to clients[fd].out and sent when the
// socket takes them.
struct ServerState {
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
    // A request's timeout is capped at 30 years: now + 2^63 ms overflowed the clock's nanoseconds
    // (tests/fuzz/regressions/store/).
    constexpr int64_t kMaxTimeoutMs = int64_t{30} * 365 * 24 * 3600 * 1000;
    const int64_t ms = std::clamp<int64_t>(timeout_ms, 0, kMaxTimeoutMs);
    Waiter w{fd, cmd, std::move(keys), Clock::now() + std::chrono::milliseconds(ms)};
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
        if (__builtin_add_overflow(v, delta, &v)) {
          Writer e;
          e.u8(static_cast<uint8_t>(Status::error))
              .str("add('" + key + "', " + std::to_string(delta) + "): the key holds " +
                   (it == data.end() ? "0" : it->second) + "; the sum overflows a 64-bit integer");
          reply(fd, e);
          return;
        }
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

}  // namespace ember::parallel::store_wire
