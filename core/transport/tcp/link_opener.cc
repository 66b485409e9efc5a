#include "core/transport/tcp/link_opener.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/logging.h"

namespace hora {
namespace tcp {
namespace {

// A dial that failed during the handshake (the peer's end closed it: the peer's set-up ended
// while the handshake was under way, and the peer now serves its listener from its waits) is
// tried again after 1 ms, backing off to 500 ms.
constexpr Millis kFirstRetry{1};
constexpr Millis kMaxRetry{500};
// The accepting side starts checking on a dialer that has not come after this long, and then
// checks this often: a peer busy elsewhere for a while is normal, a dead one must be found.
constexpr Millis kCheckDialerEvery{1000};

bool isUnreachableError(int error) {
  return error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH;
}

}  // namespace

// A connection accepted by the listener, in its handshake.
struct LinkOpener::Incoming {
  Incoming(net::Socket s, net::Handshake h) : sock(std::move(s)), hs(std::move(h)) {}
  net::Socket sock;
  net::Handshake hs;
  Clock::time_point deadline;
  std::string peer;
  bool dead = false;
};

// This rank's dial to a peer's listener: a link being opened, or a check that the peer is alive.
struct LinkOpener::Outgoing {
  Outgoing(net::Socket s, net::Handshake h) : sock(std::move(s)), hs(std::move(h)) {}
  net::Socket sock;
  net::Handshake hs;
  bool connecting = false;  // the non-blocking connect has not completed
  Clock::time_point started;
};

LinkOpener::LinkOpener(int rank, std::string secret, net::Socket listener,
                       std::vector<std::string> addresses, const std::vector<bool>& linked,
                       Millis unreachableAfter, Adopt adopt, Unreachable unreachable)
    : rank_(rank),
      secret_(std::move(secret)),
      listener_(std::move(listener)),
      addresses_(std::move(addresses)),
      linked_(linked),
      claimed_(addresses_.size(), false),
      unreachableAfter_(unreachableAfter),
      adopt_(std::move(adopt)),
      unreachable_(std::move(unreachable)) {
  linked_.resize(addresses_.size(), false);
}

LinkOpener::~LinkOpener() = default;

int LinkOpener::linkCount() const {
  return static_cast<int>(std::count(linked_.begin(), linked_.end(), true));
}

void LinkOpener::close() {
  closed_ = true;
  listener_.reset();
  incoming_.clear();
}

// ---- accepting ----------------------------------------------------------------------------

std::string LinkOpener::validate(net::PeerKind kind, int rank) {
  // The control tree is made at start (mesh.h); after it only data links arrive here.
  if (kind != net::PeerKind::Data) {
    return std::string("a ") + net::peerKindName(kind) + " connection after start-up";
  }
  if (rank < 0 || rank >= size()) return "claims rank " + std::to_string(rank) + " outside the job";
  // The higher rank of a pair dials, so each pair has one link and no tie-break.
  if (rank <= rank_) return "rank " + std::to_string(rank) + " should not connect to a higher rank";
  if (linked_[rank] || claimed_[rank]) {
    return "a second data connection claims rank " + std::to_string(rank);
  }
  claimed_[rank] = true;
  return "";
}

void LinkOpener::pollFds(std::vector<pollfd>& fds) const {
  if (closed_) return;
  fds.push_back({listener_.fd(), POLLIN, 0});
  for (const auto& in : incoming_) {
    fds.push_back({in->sock.fd(), short(in->hs.outputPending() > 0 ? POLLOUT : POLLIN), 0});
  }
}

Clock::time_point LinkOpener::nextExpiry() const {
  Clock::time_point t = Clock::time_point::max();
  for (const auto& in : incoming_) t = std::min(t, in->deadline);
  return t;
}

void LinkOpener::drop(Incoming& in, const std::string& why, bool warn) {
  in.dead = true;
  in.sock.reset();
  // A validated connection that broke before it finished gives its rank back.
  if (in.hs.peerRank() >= 0 && in.hs.peerRank() < size() && claimed_[in.hs.peerRank()] &&
      in.hs.peerKind() == net::PeerKind::Data) {
    claimed_[in.hs.peerRank()] = false;
  }
  // A connection closed before it said anything is a peer checking that this rank is alive.
  if (warn) {
    HORA_LOG(Warning, me() << ": dropping connection from " << in.peer << ": " << why);
  } else {
    HORA_LOG(Debug, me() << ": connection from " << in.peer << " ended: " << why);
  }
}

void LinkOpener::pump(Incoming& in) {
  std::string why;
  bool rejected = false;
  int error = 0;
  switch (net::pumpHandshake(in.sock.fd(), in.hs, &why, &rejected, &error)) {
    case net::HandshakeProgress::Running: return;
    case net::HandshakeProgress::Failed: {
      // Garbage or a refusal is worth a warning; a connection closed before the Hello is not.
      bool quiet = !rejected && in.hs.failureKind() == net::HandshakeFailure::None;
      return drop(in, why, !quiet);
    }
    case net::HandshakeProgress::Done: break;
  }
  const int rank = in.hs.peerRank();
  in.dead = true;
  claimed_[rank] = false;
  linked_[rank] = true;
  HORA_LOG(Debug, me() << ": data link from rank " << rank << " ready");
  adopt_(rank, std::move(in.sock));
}

// At the cap, the oldest unauthenticated connection makes room for the new one.
void LinkOpener::evictOldestPending() {
  if (static_cast<int>(incoming_.size()) < net::kMaxPendingHandshakes) return;
  for (auto& in : incoming_) {
    if (in->dead) continue;
    drop(*in, "too many connections waiting for the handshake; the oldest is dropped", true);
    return;
  }
}

void LinkOpener::service() {
  if (closed_) return;
  for (auto& in : incoming_) {
    if (!in->dead) pump(*in);
  }
  for (;;) {
    std::string peer;
    net::Socket s = net::acceptPending(listener_.fd(), &peer);
    if (!s.valid()) break;
    incoming_.erase(std::remove_if(incoming_.begin(), incoming_.end(),
                                   [](const std::unique_ptr<Incoming>& in) { return in->dead; }),
                    incoming_.end());
    evictOldestPending();
    auto validator = [this](net::PeerKind kind, int rank) { return validate(kind, rank); };
    auto in = std::make_unique<Incoming>(std::move(s),
                                         net::Handshake::acceptor(secret_, rank_, validator));
    in->peer = peer;
    in->deadline = Clock::now() + net::kHandshakeTimeout;
    incoming_.push_back(std::move(in));
    pump(*incoming_.back());
  }
  const auto now = Clock::now();
  for (auto& in : incoming_) {
    if (!in->dead && in->deadline <= now) drop(*in, "handshake timed out", true);
  }
  incoming_.erase(std::remove_if(incoming_.begin(), incoming_.end(),
                                 [](const std::unique_ptr<Incoming>& in) { return in->dead; }),
                  incoming_.end());
}

// ---- dialing ------------------------------------------------------------------------------

void LinkOpener::gone(int rank, const char* op, const std::string& detail) const {
  throw IoError(me() + ": cannot open the data link with rank " + std::to_string(rank) + " at " +
                addresses_[rank] + " during " + op + ": " + detail +
                "; that rank exited or failed, see its logs");
}

void LinkOpener::hostUnreachable(int rank, const char* op) const {
  throw IoError(me() + ": " + unreachable_(rank, "connecting", op));
}

void LinkOpener::timedOut(int rank, bool dial, Millis waited, const char* op) const {
  throw TimeoutError(
      me() + ": rank " + std::to_string(rank) + " did not " +
      (dial ? "take the data link this rank dialled" : "open the data link to this rank") +
      " for " + std::to_string(waited.count()) + " ms during " + op +
      "; it is stuck, much slower, or not calling the same collective (raise "
      "HORA_TIMEOUT_SECONDS if it is only slow)");
}

std::unique_ptr<LinkOpener::Outgoing> LinkOpener::dial(int rank, const char* op) const {
  std::string host;
  int port = 0;
  net::parseHostPort(addresses_[rank], &host, &port);
  bool pending = false;
  int err = 0;
  net::Socket s = net::startConnect(host, port, &pending, &err);
  if (!s.valid()) {
    if (err == ECONNREFUSED) gone(rank, op, "its listener refuses connections");
    if (isUnreachableError(err)) hostUnreachable(rank, op);
    gone(rank, op, std::strerror(err));
  }
  // Keepalive: a host that dies while this rank waits for the handshake fails the socket.
  net::setKeepalive(s.fd(), std::max(Millis(1000), unreachableAfter_ - Millis(5000)), Millis(1000),
                    5);
  // A check on the dialer never gets as far as the handshake.
  net::Handshake hs = net::Handshake::connector(secret_, net::PeerKind::Data, rank_, rank);
  auto out = std::make_unique<Outgoing>(std::move(s), std::move(hs));
  out->connecting = pending;
  out->started = Clock::now();
  return out;
}

void LinkOpener::finishConnect(Outgoing& out, int rank, const char* op) const {
  int err = net::connectResult(out.sock.fd());
  if (err == ECONNREFUSED) gone(rank, op, "its listener refuses connections");
  if (isUnreachableError(err)) hostUnreachable(rank, op);
  if (err != 0) gone(rank, op, std::strerror(err));
  out.connecting = false;
}

// Moves this rank's dial on: a completed handshake adopts the link (or, for a check on a dialer,
// which has no handshake to run, only proves the peer alive).
void LinkOpener::progressOutgoing(Outgoing& out, int rank, const char* op,
                                  Clock::time_point* retryAt, Millis* backoff) {
  if (out.connecting) finishConnect(out, rank, op);
  std::string why;
  bool rejected = false;
  int error = 0;
  switch (net::pumpHandshake(out.sock.fd(), out.hs, &why, &rejected, &error)) {
    case net::HandshakeProgress::Running: return;
    case net::HandshakeProgress::Done:
      linked_[rank] = true;
      HORA_LOG(Debug, me() << ": data link to rank " << rank << " ready");
      adopt_(rank, std::move(out.sock));
      return;
    case net::HandshakeProgress::Failed: break;
  }
  if (isUnreachableError(error)) hostUnreachable(rank, op);
  if (rejected || out.hs.failureKind() == net::HandshakeFailure::WrongPeer) {
    throw IoError(me() + ": rank " + std::to_string(rank) + " at " + addresses_[rank] +
                  " refused the data link during " + op + ": " + why);
  }
  // The peer's end closed: tried again; a peer that is gone refuses the next attempt.
  HORA_LOG(Debug,
           me() << ": opening the link to rank " << rank << " failed (" << why << "), retrying");
  out.sock.reset();
  *retryAt = Clock::now() + *backoff;
  *backoff = std::min(*backoff * 2, kMaxRetry);
}

void LinkOpener::open(int rank, Clock::time_point deadline, const char* op) {
  HORA_CHECK(rank >= 0 && rank < size() && rank != rank_, "bad peer " + std::to_string(rank));
  if (linked_[rank]) return;
  if (closed_) {
    throw IoError(me() + ": cannot open the data link with rank " + std::to_string(rank) +
                  ": this rank's data plane has failed");
  }
  const bool dialer = rank_ > rank;
  const auto start = Clock::now();
  // The dialer dials at once; the acceptor checks on the dialer from kCheckDialerEvery on.
  Clock::time_point nextAttempt = dialer ? start : start + kCheckDialerEvery;
  Millis backoff = kFirstRetry;
  std::unique_ptr<Outgoing> out;
  std::vector<pollfd> fds;
  while (!linked_[rank]) {
    auto now = Clock::now();
    if (now >= deadline)
      timedOut(rank, dialer, std::chrono::duration_cast<Millis>(now - start), op);
    if (!out && now >= nextAttempt) out = dial(rank, op);
    if (out && !dialer && !out->connecting) {
      // A check on the dialer: its listener took the connection, so the process is alive.
      out.reset();
      nextAttempt = now + kCheckDialerEvery;
    }
    if (out && out->connecting && now - out->started >= unreachableAfter_) {
      hostUnreachable(rank, op);
    }
    fds.clear();
    pollFds(fds);
    const size_t mine = fds.size();
    if (out) {
      short events = out->connecting || out->hs.outputPending() > 0 ? POLLOUT : POLLIN;
      fds.push_back({out->sock.fd(), events, 0});
    }
    Clock::time_point wake = std::min(deadline, nextExpiry());
    if (!out) wake = std::min(wake, nextAttempt);
    if (out && out->connecting) wake = std::min(wake, out->started + unreachableAfter_);
    int rc = ::poll(fds.data(), fds.size(), net::pollTimeoutMs(wake));
    if (rc < 0 && errno != EINTR) throw IoError(me() + ": poll failed while opening a data link");
    service();
    if (out && rc > 0 && fds[mine].revents != 0) {
      if (dialer) {
        Clock::time_point retryAt = now;
        progressOutgoing(*out, rank, op, &retryAt, &backoff);
        if (!out->sock.valid()) {
          out.reset();
          nextAttempt = retryAt;
        }
      } else {
        finishConnect(*out, rank, op);
      }
    }
  }
}

}  // namespace tcp
}  // namespace hora
