#pragma once
// LinkOpener: makes the TCP transport's data connections on first use instead of at start, so a
// rank holds only the links its algorithms use (ring neighbours, tree parents and children, the
// partners of recursive doubling) rather than one per other rank.
//
// Every rank listens from connect() on (the set-up's listener, mesh.h) and knows every rank's
// published address. A collective that needs the link to a peer calls open(): the higher rank of
// the pair dials, the lower one accepts, and both reach the link in the same collective. While a
// rank waits for anything on the data plane (open(), and TcpLinks::waitAny through pollFds() and
// service()) it also accepts and authenticates incoming links, so ranks that open their links in
// different orders never wait on each other. Every link runs the handshake (handshake.h): a
// stranger, a wrong secret, a rank that should not dial this one, a second link for a rank, or
// a kind other than data is dropped with a log line; unauthenticated connections are capped
// and time out as at set-up (net::kMaxPendingHandshakes, net::kHandshakeTimeout).
//
// Bounds (open()):
// - the deadline given (the op timeout): TimeoutError naming the peer, which never reached the
//   collective;
// - a peer whose listener refuses connections has exited or failed (a failed rank closes its
//   listener, close()): IoError at once;
// - a peer host that leaves a connect unanswered for unreachableAfter is reported unreachable
//   (IoError naming its address and the ranks there). The dialer's socket has keepalive, so a
//   host that dies while the dialer waits for the handshake is found within the same bound.
// The accepting side checks on the dialer the same way, once a second after the first second: a
// connect to its listener, closed at once. So both sides of a link learn of a dead peer within
// these bounds, also when the link was never made.
//
// Single-threaded: used by the one thread running collectives on the communicators sharing it.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace hora {
namespace tcp {

class LinkOpener {
 public:
  // Receives every link made, in either direction, ready for data (non-blocking, tuned).
  using Adopt = std::function<void(int rank, net::Socket socket)>;
  // Describes an unreachable peer host: "the host of rank 3 (10.0.0.3) is unreachable: ...",
  // given what this rank was doing ("connecting") and the collective.
  using Unreachable = std::function<std::string(int rank, const char* doing, const char* op)>;

  // addresses: "host:port" of every rank's listener, by world rank. linked: the ranks already
  // connected (the eager mesh, HORA_TCP_EAGER_MESH).
  LinkOpener(int rank, std::string secret, net::Socket listener, std::vector<std::string> addresses,
             const std::vector<bool>& linked, Millis unreachableAfter, Adopt adopt,
             Unreachable unreachable);
  ~LinkOpener();

  int size() const { return static_cast<int>(addresses_.size()); }
  bool linked(int rank) const { return linked_[rank]; }
  int linkCount() const;

  // Returns once the link to `rank` exists (adopted); see the bounds above. `op` names the
  // collective in errors.
  void open(int rank, Clock::time_point deadline, const char* op);

  // For a wait on other sockets: the descriptors whose events service() handles (the listener and
  // the incoming connections still in their handshake), appended to fds.
  void pollFds(std::vector<pollfd>& fds) const;
  // Accepts pending connections and moves their handshakes on, without blocking.
  void service();
  // The earliest time service() must run without any event (a handshake's expiry).
  Clock::time_point nextExpiry() const;

  // Closes the listener and every connection in its handshake: peers that try to open a link to
  // this rank learn at once that it failed. Later calls of open() throw IoError.
  void close();

 private:
  struct Incoming;
  struct Outgoing;
  std::string validate(net::PeerKind kind, int rank);
  void pump(Incoming& in);
  void drop(Incoming& in, const std::string& why, bool warn);
  void evictOldestPending();
  void progressOutgoing(Outgoing& out, int rank, const char* op, Clock::time_point* retryAt,
                        Millis* backoff);
  [[noreturn]] void gone(int rank, const char* op, const std::string& detail) const;
  [[noreturn]] void hostUnreachable(int rank, const char* op) const;
  [[noreturn]] void timedOut(int rank, bool dial, Millis waited, const char* op) const;
  // Starts a connect to the rank's listener, with the handshake ready to run.
  std::unique_ptr<Outgoing> dial(int rank, const char* op) const;
  // Completes a non-blocking connect, or throws naming why it failed.
  void finishConnect(Outgoing& out, int rank, const char* op) const;
  std::string me() const { return "rank " + std::to_string(rank_); }

  int rank_;
  std::string secret_;
  net::Socket listener_;
  std::vector<std::string> addresses_;
  std::vector<bool> linked_;
  std::vector<bool> claimed_;  // an incoming handshake passed validation for this rank
  Millis unreachableAfter_;
  Adopt adopt_;
  Unreachable unreachable_;
  std::vector<std::unique_ptr<Incoming>> incoming_;
  bool closed_ = false;
};

}  // namespace tcp
}  // namespace hora
