#pragma once
// Receiver: the receiving half of a point-to-point channel. It owns the listening socket and one
// I/O thread, which accepts connections, runs the handshake as acceptor, and reads every
// authenticated connection's messages into a Mailbox.
//
// Contract:
// - Each peer rank sends on the one connection it opened (sender.h); this side never writes on an
//   authenticated connection. An acceptor admits only PeerKind::P2p connectors with a rank of the
//   job other than its own, and one connection per rank for the Receiver's lifetime: a second
//   connection claiming a rank that already connected is refused in the handshake, whether the
//   first is still open or has ended (a rank's stream, and its end, are final; a restarted job
//   makes new channels at new addresses). A handshake that breaks off before it finished frees
//   the rank's claim, so the connector may retry.
// - Connections that fail the handshake are dropped with a log line and the channel goes on. At
//   most net::kMaxPendingHandshakes wait at a time (a new one evicts the oldest), each for at most
//   net::kHandshakeTimeout.
// - A connection's end (EOF, reset) or a malformed message header drops it and tells the mailbox
//   (Mailbox::peerLost), which fails the receives that can no longer complete.
// - The I/O thread blocks in poll(2) on its sockets and a wake-up eventfd; it never spins and
//   never takes a caller's lock other than the mailbox's (briefly, per chunk).
// - stop() (and the destructor) ends the thread and closes every socket; the mailbox is left to
//   its owner. Thread-safe: port() from any thread, stop() from any one thread.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/p2p/inbound_stream.h"
#include "core/p2p/mailbox.h"

namespace hora {
namespace p2p {

class Receiver {
 public:
  // Listens on bindHost ("" = every interface) at a free port and starts the I/O thread. Throws
  // IoError when it cannot bind.
  Receiver(int rank, int size, const std::string& secret, const std::string& bindHost,
           Mailbox& mailbox);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  int port() const { return port_; }
  void stop();

 private:
  // An accepted connection that has not finished the handshake.
  struct Pending {
    Pending(net::Socket s, std::string p, net::Handshake h)
        : sock(std::move(s)), peer(std::move(p)), hs(std::move(h)) {}
    net::Socket sock;
    std::string peer;
    net::Handshake hs;
    Clock::time_point deadline;
    bool dead = false;
  };
  // An authenticated connection from rank `rank`.
  struct Inbound {
    Inbound(net::Socket s, int r, std::string p, Mailbox& mailbox)
        : sock(std::move(s)), rank(r), peer(std::move(p)), stream(mailbox, r) {}
    net::Socket sock;
    int rank;
    std::string peer;
    InboundStream stream;
    bool dead = false;
  };

  void run();
  void serveOnce();
  void acceptAll();
  void evictOldestPending();
  void pump(Pending& p);
  void dropPending(Pending& p, const std::string& why, bool warn);
  void readFrom(Inbound& c);
  void dropInbound(Inbound& c, const std::string& why, bool warn);
  void expire(Clock::time_point now);
  std::string validate(net::PeerKind kind, int rank);
  std::string me() const { return "rank " + std::to_string(rank_); }

  const int rank_;
  const int size_;
  const std::string secret_;
  Mailbox& mailbox_;
  net::Socket listener_;
  int port_ = 0;
  int wakeFd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // The I/O thread's own state.
  std::vector<std::unique_ptr<Pending>> pending_;  // in accept order
  std::vector<std::unique_ptr<Inbound>> inbound_;
  std::vector<bool> claimed_;  // per rank: a connection from it passed validation
};

}  // namespace p2p
}  // namespace hora
