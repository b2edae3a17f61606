#pragma once
// Internal: the few POSIX socket calls the store and the TCP process group share (IPv4 and IPv6,
// loopback or a real network). Every blocking call takes a deadline; every failure is an
// ember::Error naming the address, the port and the system's reason. Not part of the public API.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::parallel::net {

using Clock = std::chrono::steady_clock;

/// An owned socket descriptor (closed by the destructor; movable).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close() noexcept;

 private:
  int fd_ = -1;
};

/// Seconds left until `deadline` (0 when passed).
double seconds_left(Clock::time_point deadline);
/// `now + seconds` (seconds may be fractional).
Clock::time_point deadline_in(double seconds);

/// Listens on `host`:`port` (port 0: the system picks one; host "" : every interface). `what`
/// names the setting in errors, e.g. "MASTER_ADDR=node1 / MASTER_PORT=29500". A port in use is
/// an error saying so.
Socket listen_on(const std::string& host, int port, const std::string& what);
/// The port a listening socket is bound to.
int local_port(const Socket& s);
/// The numeric IP address this end of a connected socket uses ("127.0.0.1", "10.0.0.5", "::1").
std::string local_address(const Socket& s);

/// Connects to `host`:`port`, retrying refused or unreachable attempts until `deadline` (the
/// other side may not be listening yet). A host that does not resolve fails at once.
Socket connect_to(const std::string& host, int port, Clock::time_point deadline, const std::string& what);
/// Accepts one connection, waiting until `deadline`; returns an invalid Socket on timeout.
Socket accept_until(const Socket& listener, Clock::time_point deadline);

/// Writes all `n` bytes (blocking socket), or throws naming `peer`. Never raises SIGPIPE.
void send_all(const Socket& s, const void* data, size_t n, const std::string& peer);
/// Reads exactly `n` bytes before `deadline`. Returns false on timeout; throws naming `peer` on
/// EOF or a reset.
bool recv_all(const Socket& s, void* data, size_t n, Clock::time_point deadline, const std::string& peer);

/// True when both ends of a connected socket are on this machine (a loopback address, or the
/// peer's address is this end's own).
bool is_same_host(const Socket& s);
/// SO_SNDBUF (the kernel doubles the value; setting it turns off the send buffer's autotuning).
void set_send_buffer(const Socket& s, int bytes);
/// How long a connection may go unanswered before the kernel ends it (configure_connection):
/// keepalive probes start after kKeepAliveIdleS idle seconds, every kKeepAliveIntervalS, and
/// data or probes unacknowledged for kUserTimeoutS end it with ETIMEDOUT. So a cut link or a
/// host that vanished is noticed within about kUserTimeoutS, idle or busy, long before a
/// collective timeout; a live peer's kernel answers the probes however busy its program is.
inline constexpr int kKeepAliveIdleS = 5, kKeepAliveIntervalS = 2, kUserTimeoutS = 15;
/// TCP_NODELAY on (small control messages go out at once), and the dead-link detection above
/// (SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT).
void configure_connection(const Socket& s);
/// O_NONBLOCK on or off.
void set_non_blocking(const Socket& s, bool on);
/// The text of errno `err` ("Connection reset by peer").
std::string error_text(int err);

}  // namespace ember::parallel::net
