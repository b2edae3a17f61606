#pragma once
// The TCP store server rank 0 hosts (used through TcpStore with is_server = true). One thread
// serves every connection with poll(): requests of one connection are handled in order; a get()
// or wait() whose keys are missing is parked until a set() provides them or its timeout expires.
#include <memory>
#include <string>
#include <thread>

#include <ember/parallel/tcp_socket.h>

namespace ember::parallel {

class TcpStoreServer {
 public:
  /// Listens on `host`:`port` (port 0: any free port). `origin` names the setting in errors
  /// ("MASTER_ADDR=..., MASTER_PORT=...").
  TcpStoreServer(const std::string& host, int port, const std::string& origin);
  /// Stops the thread and closes every connection (clients then see the store as closed).
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  /// The port the server listens on.
  int port() const { return port_; }

 private:
  struct State;
  void serve() noexcept;

  net::Socket listener_;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // pipe: the destructor writes to stop the thread
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace ember::parallel
