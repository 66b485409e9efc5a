#pragma once
// TcpStoreServer / TcpStoreClient: the rendezvous store of a multi-process job. The launcher (or
// rank 0) runs the server; every rank talks to it through a client.
//
// Security: every connection starts with the handshake of core/net/handshake.h; a
// client that cannot prove knowledge of the secret is logged and dropped, and sees IoError
// "... authentication failed ...". Frames carry magic + version + length; a malformed frame or an
// oversized length drops that one connection (with a log line) while the server keeps serving.
//
// Server: one thread, non-blocking sockets in a poll(2) loop, any number of authenticated clients
// (unauthenticated ones are capped in number and time, see StoreServerLimits). A get() or
// wait() for a missing key parks the request in the server, which replies when a set()/add()
// provides the key or when the request's own timeout ends; clients never poll.
//
// Client: thread-safe. Each call borrows a connection from a small pool (opening one when all are
// busy), so a thread blocked in wait() never holds up another thread's set().
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/store/store.h"
#include "core/store/tcp_store_protocol.h"

namespace hora {

// Bounds on connections that have not passed the handshake (defaults: core/net/handshake.h).
struct StoreServerLimits {
  int maxPendingHandshakes;
  Millis handshakeTimeout;
  // What a connection may have buffered behind a parked request before the server stops reading
  // it (TCP then holds the client back): pipelined requests are served, a flood is not kept.
  size_t parkedInputBytes = store_protocol::kMaxParkedInputBytes;
};
StoreServerLimits defaultStoreServerLimits();

class TcpStoreServer {
 public:
  // Listens on host:port ("" or "0.0.0.0" = every interface; port 0 = a free port, see port())
  // and starts serving at once. Throws IoError when the address cannot be bound. Unauthenticated
  // connections beyond limits.maxPendingHandshakes evict the oldest one; each is dropped when it
  // has not finished the handshake within limits.handshakeTimeout.
  TcpStoreServer(const std::string& host, int port, const std::string& secret,
                 StoreServerLimits limits = defaultStoreServerLimits());
  ~TcpStoreServer();  // stop()
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  // Closes every connection and joins the thread. Idempotent.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStoreClient : public Store {
 public:
  // Connects (retrying while the server is not up yet) and authenticates within connectTimeout.
  // Throws IoError when the server is unreachable or authentication fails.
  TcpStoreClient(const std::string& host, int port, const std::string& secret,
                 Millis connectTimeout);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override;

 private:
  struct Connection;
  struct Reply;

  std::unique_ptr<Connection> open();
  Reply call(uint16_t type, const std::string& payload, Millis replyTimeout);
  std::string where() const;

  std::string host_;
  int port_;
  std::string secret_;
  Millis connectTimeout_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace hora
