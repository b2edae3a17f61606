// Non-blocking transfers to the ranks of a TCP group (see peer_io.h).
#include <ember/parallel/peer_io.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iomanip>
#include <sstream>

#include <ember/core/error.h>

namespace ember::parallel {

namespace {
// A wait that makes no progress for this long runs the stall hook (then again each period).
constexpr auto kStallPeriod = std::chrono::milliseconds(1000);
}  // namespace

PeerIo::PeerIo(std::vector<net::Socket> peers, int self, int send_buffer, bool send_buffer_everywhere) : self_(self) {
  peers_.resize(peers.size());
  for (size_t r = 0; r < peers.size(); ++r) {
    peers_[r].sock = std::move(peers[r]);
    if (peers_[r].sock.valid()) net::set_non_blocking(peers_[r].sock, true);
    if (peers_[r].sock.valid() && send_buffer > 0 && (send_buffer_everywhere || net::is_same_host(peers_[r].sock)))
      net::set_send_buffer(peers_[r].sock, send_buffer);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  EMBER_CHECK(wake_fd_ >= 0, "PeerIo: eventfd failed: ", net::error_text(errno));
}

PeerIo::~PeerIo() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

uint64_t PeerIo::post_send(int peer, const void* p, size_t n) {
  Peer& pr = peers_[static_cast<size_t>(peer)];
  pr.sends.push_back({const_cast<char*>(static_cast<const char*>(p)), n});
  return ++pr.sends_posted;
}

uint64_t PeerIo::post_recv(int peer, void* p, size_t n) {
  Peer& pr = peers_[static_cast<size_t>(peer)];
  pr.recvs.push_back({static_cast<char*>(p), n});
  return ++pr.recvs_posted;
}

void PeerIo::wait_send(int peer, uint64_t ticket) {
  const Peer& pr = peers_[static_cast<size_t>(peer)];
  drive([&] { return pr.sends_done >= ticket; });
}

void PeerIo::wait_recv(int peer, uint64_t ticket) {
  const Peer& pr = peers_[static_cast<size_t>(peer)];
  drive([&] { return pr.recvs_done >= ticket; });
}

void PeerIo::abort() {
  aborted_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t k = ::write(wake_fd_, &one, sizeof one);  // on failure the flag still stops the
                                                                           // next wait within a poll period
}

void PeerIo::clear() {
  for (Peer& p : peers_) {
    p.sends_done = p.sends_posted;
    p.recvs_done = p.recvs_posted;
    p.sends.clear();
    p.recvs.clear();
  }
}

bool PeerIo::try_io(int r, bool sending, bool receiving) {
  Peer& pr = peers_[static_cast<size_t>(r)];
  bool moved = false;
  auto fail = [&](int err, const char* dir) {
    if (err == ETIMEDOUT) {
      throw LinkError(LinkError::reset, r,
                      "the link to rank " + std::to_string(r) + " stopped answering while " + dir + " it (" +
                          net::error_text(err) + ": nothing acknowledged for " + std::to_string(net::kUserTimeoutS) +
                          " s): the network between the hosts or rank " + std::to_string(r) + "'s host is down");
    }
    if (err == ECONNRESET || err == EPIPE || err == ECONNABORTED) {
      throw LinkError(LinkError::reset, r,
                      "the connection to rank " + std::to_string(r) + " was reset while " + dir + " it (" +
                          net::error_text(err) + "): the process exited or was killed");
    }
    throw LinkError(LinkError::reset, r,
                    std::string(dir) + " rank " + std::to_string(r) + " failed: " + net::error_text(err));
  };
  // Sends: as much of the queue as the socket buffer takes (a short write means it is full).
  while (sending && !pr.sends.empty()) {
    Transfer& t = pr.sends.front();
    if (t.left > 0) {
      const ssize_t k = ::send(pr.sock.fd(), t.p, t.left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        fail(errno, "sending to");
      }
      t.p += k;
      t.left -= static_cast<size_t>(k);
      moved = moved || k > 0;
    }
    if (t.left > 0) break;
    pr.sends.pop_front();
    ++pr.sends_done;
    moved = true;
  }
  // Receives: whatever has arrived, into the posted buffers in order (a short read means the
  // socket is empty for now).
  while (receiving && !pr.recvs.empty()) {
    Transfer& t = pr.recvs.front();
    if (t.left > 0) {
      const ssize_t k = ::recv(pr.sock.fd(), t.p, t.left, MSG_DONTWAIT);
      if (k == 0) {
        throw LinkError(LinkError::closed, r,
                        "rank " + std::to_string(r) + " closed its connection while rank " + std::to_string(self_) +
                            " still expected data from it: the process exited or was killed");
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        fail(errno, "receiving from");
      }
      t.p += k;
      t.left -= static_cast<size_t>(k);
      moved = true;
    }
    if (t.left > 0) break;
    pr.recvs.pop_front();
    ++pr.recvs_done;
    moved = true;
  }
  return moved;
}

std::string PeerIo::pending_str() const {
  std::ostringstream os;
  const char* sep = "";
  for (size_t r = 0; r < peers_.size(); ++r) {
    const Peer& p = peers_[r];
    size_t in = 0, out = 0;
    for (const Transfer& t : p.recvs) in += t.left;
    for (const Transfer& t : p.sends) out += t.left;
    if (!p.recvs.empty()) os << sep << "waiting for " << in << " bytes from rank " << r, sep = "; ";
    if (!p.sends.empty()) os << sep << out << " bytes to rank " << r << " not yet accepted", sep = "; ";
  }
  return os.str();
}

void PeerIo::drive(const std::function<bool()>& done) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  auto last_progress = net::Clock::now();
  auto last_hook = last_progress;
  bool first = true;
  while (!done()) {
    if (aborted_) throw LinkError(LinkError::aborted, -1, "the process group was destroyed");
    bool moved = false;
    if (first) {
      // Often the bytes are already there (or the socket has room): try before polling.
      first = false;
      for (size_t r = 0; r < peers_.size(); ++r) {
        const Peer& p = peers_[r];
        if (!p.sends.empty() || !p.recvs.empty()) moved = try_io(static_cast<int>(r), true, true) || moved;
      }
    } else {
      fds.clear();
      ranks.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (size_t r = 0; r < peers_.size(); ++r) {
        const Peer& p = peers_[r];
        const short ev = static_cast<short>((p.sends.empty() ? 0 : POLLOUT) | (p.recvs.empty() ? 0 : POLLIN));
        if (ev == 0) continue;
        fds.push_back({p.sock.fd(), ev, 0});
        ranks.push_back(static_cast<int>(r));
      }
      const auto until = std::min(deadline_, net::Clock::now() + kStallPeriod);
      const int ms = static_cast<int>(std::clamp<double>(net::seconds_left(until) * 1000.0 + 1.0, 1.0, 1000.0));
      const int rc = ::poll(fds.data(), fds.size(), ms);
      EMBER_CHECK(rc >= 0 || errno == EINTR, "poll failed: ", net::error_text(errno));
      for (size_t k = 1; rc > 0 && k < fds.size(); ++k) {
        const short ev = fds[k].revents;
        if (ev == 0) continue;
        const bool broken = (ev & (POLLERR | POLLHUP)) != 0;  // the calls below report why
        moved = try_io(ranks[k - 1], broken || (ev & POLLOUT), broken || (ev & POLLIN)) || moved;
      }
    }
    if (done()) break;
    const auto now = net::Clock::now();
    if (now >= deadline_) throw LinkError(LinkError::timeout, -1, pending_str());
    if (moved) {
      last_progress = now;
    } else if (stall_hook_ && now - last_progress >= kStallPeriod && now - last_hook >= kStallPeriod) {
      last_hook = now;
      stall_hook_();
    }
  }
}

void TcpRingTransport::post(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) {
  // Receive first: when next == prev (two ranks) the peer's data may already be waiting.
  recv_tickets_.push_back(io_.post_recv(prev_, recv, recv_bytes));
  send_tickets_.push_back(io_.post_send(next_, send, send_bytes));
}

void TcpRingTransport::wait_recv() {
  EMBER_ASSERT(!recv_tickets_.empty(), "TcpRingTransport: wait without a posted exchange");
  const uint64_t r = recv_tickets_.front();
  recv_tickets_.pop_front();
  io_.wait_recv(prev_, r);
}

void TcpRingTransport::wait_sent(int64_t count) {
  EMBER_ASSERT(count >= 0 && count <= static_cast<int64_t>(send_tickets_.size()), "TcpRingTransport: wait_sent(", count,
               ") after ", send_tickets_.size(), " exchanges");
  if (count > 0) io_.wait_send(next_, send_tickets_[static_cast<size_t>(count - 1)]);
}

}  // namespace ember::parallel
