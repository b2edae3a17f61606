#pragma once
// Internal: non-blocking byte streams to every other rank of a TCP process group, driven by one
// thread (the group's progress thread). Sends to a peer go out in the order posted, receives from
// a peer fill in the order posted; every transfer on every socket makes progress whenever the
// driving thread waits for any of them, so a ring step's send and receive proceed together.
//
// A peer that closes or resets its connection while we still exchange bytes with it is reported
// at once (LinkError naming it); a wait that passes its deadline reports which transfers were
// still pending; while blocked, a stall hook runs about once a second (the group asks the store
// whether another rank has already reported a failure).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ember/parallel/ring.h>
#include <ember/parallel/tcp_socket.h>

namespace ember::parallel {

/// Why a transfer could not finish. `peer` is the rank at fault (-1: none in particular).
struct LinkError : std::runtime_error {
  enum Kind { closed, reset, timeout, remote, aborted };
  LinkError(Kind k, int p, const std::string& what) : std::runtime_error(what), kind(k), peer(p) {}
  Kind kind;
  int peer;
};

class PeerIo {
 public:
  /// `peers[r]` is the connected socket to rank r (invalid for this rank). Takes ownership.
  /// `send_buffer` > 0 sets SO_SNDBUF on the connections to ranks on this machine (on every
  /// connection with `send_buffer_everywhere`); 0 leaves the kernel's autotuning.
  PeerIo(std::vector<net::Socket> peers, int self, int send_buffer = 0, bool send_buffer_everywhere = false);
  ~PeerIo();
  PeerIo(const PeerIo&) = delete;
  PeerIo& operator=(const PeerIo&) = delete;

  /// Queues `n` bytes at `p` for rank `peer`; returns the transfer's ticket for that peer.
  uint64_t post_send(int peer, const void* p, size_t n);
  /// Queues a receive of `n` bytes from rank `peer` into `p`; returns its ticket.
  uint64_t post_recv(int peer, void* p, size_t n);
  /// Drives all queued transfers until send ticket `ticket` to `peer` has completed.
  void wait_send(int peer, uint64_t ticket);
  void wait_recv(int peer, uint64_t ticket);

  /// Deadline of the waits from now on (each collective sets its own).
  void set_deadline(net::Clock::time_point d) { deadline_ = d; }
  /// Runs about once a second while a wait makes no progress; may throw LinkError.
  void set_stall_hook(std::function<void()> hook) { stall_hook_ = std::move(hook); }
  /// Makes every current and future wait throw LinkError(aborted) (thread-safe).
  void abort();
  /// Drops every queued transfer (after a failure, the streams are out of step anyway).
  void clear();

 private:
  struct Transfer {
    char* p;
    size_t left;
  };
  struct Peer {
    net::Socket sock;
    std::deque<Transfer> sends, recvs;
    uint64_t sends_posted = 0, sends_done = 0, recvs_posted = 0, recvs_done = 0;
  };
  void drive(const std::function<bool()>& done);
  // Moves bytes to/from rank r without blocking; true when some moved.
  bool try_io(int r, bool sending, bool receiving);
  std::string pending_str() const;

  std::vector<Peer> peers_;
  int self_;
  int wake_fd_ = -1;  // eventfd: abort() wakes a blocked poll
  std::atomic<bool> aborted_{false};
  net::Clock::time_point deadline_ = net::Clock::time_point::max();
  std::function<void()> stall_hook_;
};

/// The ring transport over a PeerIo: sends go to rank + 1, receives come from rank - 1.
class TcpRingTransport final : public RingTransport {
 public:
  TcpRingTransport(PeerIo& io, int rank, int world_size)
      : io_(io), next_((rank + 1) % world_size), prev_((rank + world_size - 1) % world_size) {}
  void post(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) override;
  void wait_recv() override;
  void wait_sent(int64_t count) override;

 private:
  PeerIo& io_;
  int next_, prev_;
  std::vector<uint64_t> send_tickets_;  // per posted exchange
  std::deque<uint64_t> recv_tickets_;  // exchanges not yet waited for
};

}  // namespace ember::parallel
