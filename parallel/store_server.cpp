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
#include <ember/parallel/store_server_state.h>

namespace ember::parallel {

using namespace store_wire;
using net::Clock;

struct TcpStoreServer::State : ServerState {};

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
        net::configure_connection(s);
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
