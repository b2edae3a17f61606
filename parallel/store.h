#pragma once
// The rendezvous store: a small key-value service every rank of a job can reach. Rank 0 hosts a
// TcpStore server (like PyTorch's c10d TCPStore); every rank, rank 0 included, talks to it
// through a client connection. Process groups use it to exchange addresses and NCCL ids, to record
// which collective each rank has reached, and to publish the first failure.
//
// Values are byte strings. Every call that waits has a timeout, and its error names the keys it
// waited for, the time waited and the store's address.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ember/parallel/tcp_socket.h>

namespace ember::parallel {

/// A key-value store shared by the ranks of a job.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets `key` to `value` (replacing any old value) and wakes the ranks waiting for it.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting up to timeout_s() for some rank to set it.
  virtual std::string get(const std::string& key) = 0;
  /// Adds `delta` to the integer stored at `key` (a missing key counts as 0) and returns the sum;
  /// atomic across ranks.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Sets `key` to `desired` when its value is `expected` (a missing key matches only an empty
  /// `expected`); returns the value after the call ("" when the key is still missing). Atomic.
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  /// Waits up to `timeout_s` until every key is set; returns the keys still missing (empty when
  /// all are set). Never throws for a timeout (wait() does).
  virtual std::vector<std::string> wait_for(const std::vector<std::string>& keys, double timeout_s) = 0;
  /// True when every key is set (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes `key`; true when it existed.
  virtual bool remove(const std::string& key) = 0;
  /// Where the store is, for error messages ("127.0.0.1:29500").
  virtual std::string address() const = 0;
  /// set() without waiting for the store's answer, for frequent progress records (default: set()).
  virtual void set_nowait(const std::string& key, const std::string& value) { set(key, value); }
  /// Another handle on the same store for use by another thread without sharing this one's
  /// connection; null when the store cannot make one (callers then share this handle).
  virtual std::shared_ptr<Store> clone() const { return nullptr; }
  /// The IP address other ranks reach this process at, as seen on the way to the store ("" when
  /// the store cannot tell; callers then assume one machine and use 127.0.0.1).
  virtual std::string local_address() const { return ""; }

  /// Waits up to `timeout_s` until every key is set; on timeout throws an error naming the
  /// missing keys, the time waited and the store.
  void wait(const std::vector<std::string>& keys, double timeout_s);
  /// wait() with timeout_s().
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_s_); }
  /// Timeout of get() and of wait() without an explicit one, in seconds.
  double timeout_s() const { return timeout_s_; }
  void set_timeout(double seconds) { timeout_s_ = seconds; }

 protected:
  double timeout_s_ = 300.0;
};

class TcpStoreServer;

/// Settings of a TcpStore.
struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // the server's address (clients connect there)
  int port = 29500;  // the server's port; 0 lets the server pick one (see TcpStore::port)
  bool is_server = false;  // true on rank 0: host the server in this process, then connect to it
  double timeout_s = 300.0;  // connecting, get() and wait() give up after this long
  /// How the address was configured, named by errors ("MASTER_ADDR=node1, MASTER_PORT=29500").
  std::string origin;
};

/// A client of the TCP store server, and on the server rank the server too. Thread-safe: calls
/// from several threads are serialized on the one connection (clone() gives another one).
class TcpStore : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& opts);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, double timeout_s) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::string address() const override;
  /// Sends the request without waiting for the answer; a later call on this connection still sees
  /// its effect (the server handles one connection's requests in order).
  void set_nowait(const std::string& key, const std::string& value) override;
  /// Another connection to the same server (it keeps the server alive while it exists).
  std::shared_ptr<Store> clone() const override;
  /// This end's IP address on the connection to the server ("127.0.0.1" for a job on one machine).
  std::string local_address() const override;
  /// The server's port (the chosen one when the options asked for port 0).
  int port() const { return port_; }

 private:
  struct Reply;
  TcpStore(const TcpStoreOptions& opts, std::shared_ptr<TcpStoreServer> server);
  Reply roundtrip(const std::string& request, double wait_s, const char* what, const std::string& key);

  TcpStoreOptions opts_;
  std::shared_ptr<TcpStoreServer> server_;  // set on the server rank and in its clones
  int port_ = 0;
  mutable std::mutex mu_;
  net::Socket sock_;
  std::string broken_;  // why the connection is unusable ("" while it is fine)
};

/// Blocks until all `world_size` ranks have called store_barrier with the same `name` (each rank
/// once per name). On timeout, the error names the ranks that have not arrived:
/// "barrier 'init' timed out after 30.0 s: ranks 2, 3 of 4 have not arrived".
void store_barrier(Store& store, const std::string& name, int rank, int world_size, double timeout_s);

/// "ranks 2, 3" / "rank 1": the list of ranks in words (for error messages).
std::string ranks_str(const std::vector<int>& ranks);
/// "1.5 s": a duration in seconds with one decimal (for error messages).
std::string seconds_str(double s);

}  // namespace ember::parallel
