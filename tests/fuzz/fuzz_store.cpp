// Fuzz harness: the rendezvous store's wire protocol, server side (parallel/store_protocol.h,
// parallel/store_server_state.h: the parser TcpStoreServer runs on each connection's bytes). The
// input is what one client sends. It is fed to two fresh servers, to one in a single piece and to
// the other in pieces of 1, 2, 3, ... bytes, as TCP may split it; parked get/wait requests are then
// timed out. Both servers must answer with the same bytes (the framing does not depend on how the
// stream arrives), every answer must be a well-formed reply frame, and nothing may escape the
// parser: a malformed request is answered with an error reply, a corrupt length closes the
// connection.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <ember/parallel/store_server_state.h>

#include "fuzz_support.h"

namespace ember::fuzz {

namespace {

using namespace parallel::store_wire;

std::string serve(const uint8_t* data, size_t size, bool split) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    violation(std::string("socketpair: ") + std::strerror(errno));
  parallel::net::Socket peer(sv[1]);
  const int fd = sv[0];
  ServerState st;
  st.clients[fd].sock = parallel::net::Socket(fd);
  std::string replies;
  auto drain = [&] {
    char buf[1 << 16];
    for (;;) {
      const ssize_t k = ::recv(peer.fd(), buf, sizeof buf, MSG_DONTWAIT);
      if (k <= 0) break;
      replies.append(buf, static_cast<size_t>(k));
    }
  };
  size_t pos = 0;
  for (size_t piece = 1; pos < size; ++piece) {
    const size_t n = split ? std::min(piece, size - pos) : size - pos;
    Client& c = st.clients.at(fd);
    if (c.closed) break;  // the server drops the connection (a corrupt length)
    c.in.append(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
    st.consume(fd);
    drain();
  }
  st.expire(Clock::time_point::max());
  drain();
  return replies + st.clients.at(fd).out;  // what the socket did not take yet
}

// Every reply is u32 length + status (ok, timeout, error) + fields; an error carries one string.
void check_frames(const std::string& r) {
  size_t pos = 0;
  while (pos < r.size()) {
    if (r.size() - pos < 4) violation("a reply frame is cut short after its first bytes");
    uint32_t n;
    std::memcpy(&n, r.data() + pos, 4);
    if (n < 1 || n > kMaxMessage || r.size() - pos - 4 < n)
      violation("a reply frame states " + std::to_string(n) + " bytes");
    const auto status = static_cast<uint8_t>(r[pos + 4]);
    if (status > static_cast<uint8_t>(Status::error)) violation("a reply has status " + std::to_string(status));
    if (status == static_cast<uint8_t>(Status::error)) {
      uint32_t len = 0;
      if (n >= 5) std::memcpy(&len, r.data() + pos + 5, 4);
      if (n < 5 || len != n - 5 || len == 0) violation("an error reply is not one non-empty string");
    }
    pos += 4 + n;
  }
}

}  // namespace

bool fuzz_one(const uint8_t* data, size_t size) {
  const std::string whole = serve(data, size, false);
  const std::string pieces = serve(data, size, true);
  if (whole != pieces) violation("the replies depend on how the request bytes were split");
  check_frames(whole);
  return true;
}

}  // namespace ember::fuzz
