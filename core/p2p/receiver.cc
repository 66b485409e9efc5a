// Receiver (contract in receiver.h): one poll(2) loop over the wake-up eventfd, the listener, the
// connections still in the handshake and the authenticated ones.
//
// Reading is bounded per connection and wake-up (kReadBudget), so one peer streaming a large
// message cannot starve the others or a new connection's handshake.
#include "core/p2p/receiver.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/logging.h"

namespace hora {
namespace p2p {
namespace {

constexpr size_t kReadBudget = 8 << 20;

}  // namespace

Receiver::Receiver(int rank, int size, const std::string& secret, const std::string& bindHost,
                   Mailbox& mailbox)
    : rank_(rank), size_(size), secret_(secret), mailbox_(mailbox), claimed_(size, false) {
  listener_ = net::listenOn(bindHost, 0, &port_);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    throw IoError(me() + ": cannot create an eventfd for the point-to-point channel: " +
                  std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

Receiver::~Receiver() {
  stop();
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

void Receiver::stop() {
  if (!stopping_.exchange(true)) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
  pending_.clear();
  inbound_.clear();
  listener_.reset();
}

void Receiver::run() {
  LogRankScope scope(rank_);
  while (!stopping_) {
    try {
      serveOnce();
    } catch (const std::exception& e) {
      // Only resource exhaustion gets here (poll failing); keep serving.
      HORA_LOG(Error, "point-to-point receiver: " << e.what());
    }
  }
}

void Receiver::serveOnce() {
  std::vector<pollfd> fds;
  fds.push_back({wakeFd_, POLLIN, 0});
  fds.push_back({listener_.fd(), POLLIN, 0});
  Clock::time_point wake = Clock::time_point::max();
  for (auto& p : pending_) {
    short events = p->hs.outputPending() > 0 ? POLLOUT : POLLIN;
    fds.push_back({p->sock.fd(), events, 0});
    wake = std::min(wake, p->deadline);
  }
  for (auto& c : inbound_) fds.push_back({c->sock.fd(), POLLIN, 0});
  int timeout = wake == Clock::time_point::max() ? -1 : net::pollTimeoutMs(wake);
  int rc = ::poll(fds.data(), fds.size(), timeout);
  if (rc < 0 && errno != EINTR) throw IoError(std::string("poll failed: ") + std::strerror(errno));
  if (stopping_) return;
  if (rc > 0) {
    // pending_ and inbound_ only grow below (acceptAll, pump); the polled entries come first.
    size_t pendingPolled = pending_.size();
    size_t inboundPolled = inbound_.size();
    for (size_t i = 0; i < pendingPolled; ++i) {
      if (fds[2 + i].revents != 0 && !pending_[i]->dead) pump(*pending_[i]);
    }
    for (size_t i = 0; i < inboundPolled; ++i) {
      if (fds[2 + pendingPolled + i].revents != 0 && !inbound_[i]->dead) readFrom(*inbound_[i]);
    }
    if (fds[1].revents != 0) acceptAll();
  }
  expire(Clock::now());
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const std::unique_ptr<Pending>& p) { return p->dead; }),
                 pending_.end());
  inbound_.erase(std::remove_if(inbound_.begin(), inbound_.end(),
                                [](const std::unique_ptr<Inbound>& c) { return c->dead; }),
                 inbound_.end());
}

void Receiver::acceptAll() {
  for (;;) {
    std::string peer;
    net::Socket s = net::acceptPending(listener_.fd(), &peer);
    if (!s.valid()) return;
    evictOldestPending();
    auto validator = [this](net::PeerKind kind, int rank) { return validate(kind, rank); };
    auto p = std::make_unique<Pending>(std::move(s), peer,
                                       net::Handshake::acceptor(secret_, rank_, validator));
    p->deadline = Clock::now() + net::kHandshakeTimeout;
    pending_.push_back(std::move(p));
    pump(*pending_.back());
  }
}

// At the cap, the oldest connection still in the handshake makes room for the new one, so a
// stranger holding connections open cannot lock the ranks out.
void Receiver::evictOldestPending() {
  int count = 0;
  Pending* oldest = nullptr;
  for (auto& p : pending_) {
    if (p->dead) continue;
    if (oldest == nullptr) oldest = p.get();
    ++count;
  }
  if (oldest != nullptr && count >= net::kMaxPendingHandshakes) {
    dropPending(*oldest, "too many connections waiting for the handshake; the oldest is dropped",
                true);
  }
}

std::string Receiver::validate(net::PeerKind kind, int rank) {
  if (kind != net::PeerKind::P2p) {
    return std::string("a ") + net::peerKindName(kind) +
           " connection reached a point-to-point port";
  }
  if (rank < 0 || rank >= size_) {
    return "claims rank " + std::to_string(rank) + " outside the job of " + std::to_string(size_) +
           " ranks";
  }
  if (rank == rank_) return "claims this rank's own rank " + std::to_string(rank);
  if (claimed_[rank]) {
    return "rank " + std::to_string(rank) +
           " already connected to this rank (one point-to-point connection per rank)";
  }
  claimed_[rank] = true;
  return "";
}

void Receiver::pump(Pending& p) {
  char buf[256];
  for (;;) {
    if (p.hs.outputPending() > 0) {
      net::IoResult r = net::sendSome(p.sock.fd(), p.hs.outputData(), p.hs.outputPending());
      if (r.status == net::IoStatus::WouldBlock) return;
      if (r.status != net::IoStatus::Ok) {
        return dropPending(p, net::describe(r) + " during the handshake", false);
      }
      p.hs.outputSent(r.bytes);
      continue;
    }
    if (p.hs.state() == net::Handshake::State::Failed) return dropPending(p, p.hs.failure(), true);
    if (p.hs.state() == net::Handshake::State::Done) {
      // The Welcome is out: the connection belongs to its rank from now on.
      int rank = p.hs.peerRank();
      HORA_LOG(Debug,
               "point-to-point connection from rank " << rank << " (" << p.peer << ") ready");
      inbound_.push_back(std::make_unique<Inbound>(std::move(p.sock), rank, p.peer, mailbox_));
      p.dead = true;
      return;
    }
    net::IoResult r = net::recvSome(p.sock.fd(), buf, std::min(sizeof(buf), p.hs.inputWanted()));
    if (r.status == net::IoStatus::WouldBlock) return;
    if (r.status != net::IoStatus::Ok) {
      return dropPending(p, "closed during the handshake (" + net::describe(r) + ")", false);
    }
    p.hs.input(buf, r.bytes);
  }
}

void Receiver::dropPending(Pending& p, const std::string& why, bool warn) {
  if (p.dead) return;
  p.dead = true;
  // Validated but never welcomed: the rank may connect again.
  if (p.hs.state() == net::Handshake::State::Done) claimed_[p.hs.peerRank()] = false;
  if (warn) {
    HORA_LOG(Warning, "dropping point-to-point connection from " << p.peer << ": " << why);
  } else {
    HORA_LOG(Debug, "point-to-point connection from " << p.peer << " ended: " << why);
  }
  p.sock.reset();
}

void Receiver::expire(Clock::time_point now) {
  for (auto& p : pending_) {
    if (!p->dead && p->deadline <= now) dropPending(*p, "handshake timed out", true);
  }
}

void Receiver::readFrom(Inbound& c) {
  size_t budget = kReadBudget;
  try {
    while (budget > 0) {
      PayloadChunk span = c.stream.next();
      net::IoResult r = net::recvSome(c.sock.fd(), span.data, std::min(span.bytes, budget));
      c.stream.advance(r.status == net::IoStatus::Ok ? r.bytes : 0);
      if (r.status == net::IoStatus::WouldBlock) return;
      if (r.status != net::IoStatus::Ok) {
        bool clean = c.stream.atMessageBoundary();
        return dropInbound(c,
                           "rank " + std::to_string(c.rank) +
                               " closed its point-to-point connection (" + net::describe(r) + ")",
                           !clean);
      }
      if (c.stream.failed()) {
        return dropInbound(c,
                           "the point-to-point connection from rank " + std::to_string(c.rank) +
                               " was dropped: " + c.stream.failure(),
                           true);
      }
      budget -= r.bytes;
    }
  } catch (const std::exception& e) {
    // A broken invariant: this connection cannot go on, the others can.
    dropInbound(c,
                "the point-to-point connection from rank " + std::to_string(c.rank) +
                    " failed: " + e.what(),
                true);
  }
}

void Receiver::dropInbound(Inbound& c, const std::string& why, bool warn) {
  if (c.dead) return;
  c.dead = true;
  if (warn) {
    HORA_LOG(Warning, why);
  } else {
    HORA_LOG(Debug, why);
  }
  c.sock.reset();
  mailbox_.peerLost(c.rank, why);
}

}  // namespace p2p
}  // namespace hora
