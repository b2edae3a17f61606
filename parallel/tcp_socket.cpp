// POSIX sockets for the store and the TCP process group (see tcp_socket.h).
#include <ember/parallel/tcp_socket.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include <ember/core/error.h>

namespace ember::parallel::net {

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

double seconds_left(Clock::time_point deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

Clock::time_point deadline_in(double seconds) {
  // Saturated: a timeout of centuries (or infinity) must not wrap the clock into the past.
  const Clock::time_point now = Clock::now();
  const double room = std::chrono::duration<double>(Clock::time_point::max() - now).count();
  if (!(seconds < room)) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(seconds, 0.0)));
}

std::string error_text(int err) {
  char buf[256];
  return std::string(strerror_r(err, buf, sizeof buf));  // GNU strerror_r returns the text
}

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrList resolve(const std::string& host, int port, bool passive, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  EMBER_CHECK(rc == 0 && res != nullptr, "cannot resolve the address '", host, "' (", what, "): ", ::gai_strerror(rc));
  return AddrList(res);
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  const int rc = ::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  EMBER_CHECK(rc == 0, "getnameinfo failed: ", ::gai_strerror(rc));
  return host;
}

// Waits for `events` on fd until the deadline; false on timeout. EINTR restarts.
bool poll_one(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::min(seconds_left(deadline) * 1000.0 + 1.0, 3.6e6));
    const int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    EMBER_CHECK(errno == EINTR, "poll failed: ", error_text(errno));
  }
}

}  // namespace

Socket listen_on(const std::string& host, int port, const std::string& what) {
  AddrList addrs = resolve(host, port, /*passive=*/true, what);
  int last_err = 0;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      continue;
    }
    const int one = 1;
    // Lets a restarted job bind a port whose old connections linger in TIME_WAIT; an active
    // listener still makes bind fail with EADDRINUSE.
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      last_err = errno;
      EMBER_CHECK(last_err != EADDRINUSE, "cannot listen on port ", port, " (", what,
                  "): the port is in use by another process; choose a free port");
      continue;
    }
    if (::listen(s.fd(), 1024) != 0) {
      last_err = errno;
      continue;
    }
    return s;
  }
  EMBER_FAIL("cannot listen on ", host.empty() ? "*" : host, ":", port, " (", what, "): ", error_text(last_err));
}

int local_port(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  EMBER_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0,
              "getsockname failed: ", error_text(errno));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

std::string local_address(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  EMBER_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0,
              "getsockname failed: ", error_text(errno));
  return numeric_host(reinterpret_cast<sockaddr*>(&ss), len);
}

Socket connect_to(const std::string& host, int port, Clock::time_point deadline, const std::string& what) {
  AddrList addrs = resolve(host, port, /*passive=*/false, what);
  int last_err = 0;
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last_err = errno;
        continue;
      }
      // Non-blocking connect, so an unreachable host cannot hold us past the deadline.
      set_non_blocking(s, true);
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!poll_one(s.fd(), POLLOUT, deadline)) {
          last_err = ETIMEDOUT;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        set_non_blocking(s, false);
        configure_connection(s);
        return s;
      }
      last_err = errno;
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
  }
  EMBER_FAIL("cannot connect to ", host, ":", port, " (", what, "): ", error_text(last_err),
             "; is the process that should listen there (rank 0) running?");
}

Socket accept_until(const Socket& listener, Clock::time_point deadline) {
  for (;;) {
    if (!poll_one(listener.fd(), POLLIN, deadline)) return Socket();
    Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (s.valid()) {
      configure_connection(s);
      return s;
    }
    EMBER_CHECK(errno == EINTR || errno == ECONNABORTED || errno == EAGAIN, "accept failed: ", error_text(errno));
  }
}

void send_all(const Socket& s, const void* data, size_t n, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL);
    if (k < 0) {
      EMBER_CHECK(errno == EINTR, "sending to ", peer, " failed: ", error_text(errno));
      continue;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!poll_one(s.fd(), POLLIN, deadline)) return false;
    const ssize_t k = ::recv(s.fd(), p, n, 0);
    EMBER_CHECK(k != 0, peer, " closed the connection (the process exited or was killed)");
    if (k < 0) {
      EMBER_CHECK(errno == EINTR || errno == EAGAIN, "receiving from ", peer, " failed: ", error_text(errno));
      continue;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool is_same_host(const Socket& s) {
  sockaddr_storage mine{}, theirs{};
  socklen_t a = sizeof mine, b = sizeof theirs;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&mine), &a) != 0 ||
      ::getpeername(s.fd(), reinterpret_cast<sockaddr*>(&theirs), &b) != 0) {
    return false;
  }
  const std::string peer = numeric_host(reinterpret_cast<sockaddr*>(&theirs), b);
  return peer == numeric_host(reinterpret_cast<sockaddr*>(&mine), a) || peer.rfind("127.", 0) == 0 || peer == "::1" ||
         peer.rfind("::ffff:127.", 0) == 0;
}

void set_send_buffer(const Socket& s, int bytes) {
  EMBER_CHECK(::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) == 0, "setsockopt(SO_SNDBUF, ", bytes,
              ") failed: ", error_text(errno));
}

void configure_connection(const Socket& s) {
  const int one = 1, idle = kKeepAliveIdleS, interval = kKeepAliveIntervalS;
  const int probes = (kUserTimeoutS - kKeepAliveIdleS) / kKeepAliveIntervalS;
  const unsigned user_timeout_ms = kUserTimeoutS * 1000u;
  // Best effort, as TCP_NODELAY always was: a socket that refuses an option still works.
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(s.fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

void set_non_blocking(const Socket& s, bool on) {
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  EMBER_CHECK(flags >= 0, "fcntl(F_GETFL) failed: ", error_text(errno));
  const int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  EMBER_CHECK(::fcntl(s.fd(), F_SETFL, want) == 0, "fcntl(F_SETFL) failed: ", error_text(errno));
}

}  // namespace ember::parallel::net
