#include "core/transport/tcp/links.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/spin.h"
#include "core/transport/tcp/control_channel.h"

namespace hora {
namespace tcp {
namespace {

// How often a blocked wait looks whether its peers still acknowledge what it sent.
constexpr Millis kReachabilityCheck{1000};

}  // namespace

void TcpPeerSockets::markFailed(const std::string& why) {
  // The first failure is kept, since later ones may only be consequences of the shutdown below.
  if (failure.empty()) failure = why;
  // Shutdown rather than close: the descriptors stay valid for the communicators that share them,
  // while every peer sees EOF at once.
  for (auto& s : sockets) s.shutdownBoth();
  // Peers opening a link to this rank are refused from now on, so they fail at once too.
  if (opener) opener->close();
}

void TcpPeerSockets::adopt(int rank, net::Socket socket) {
  // Keepalive probes unanswered for unreachableAfter fail the socket (control_channel.h).
  net::setKeepalive(socket.fd(), keepaliveIdle, Millis(1000), 5);
  std::string address = net::peerAddress(socket.fd());
  if (!address.empty()) addresses[rank] = address;
  sockets[rank] = std::move(socket);
}

std::vector<int> TcpPeerSockets::linkedRanks() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < sockets.size(); ++r) {
    if (sockets[r].valid()) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

// Every rank reached at the same address is on that host.
std::string TcpPeerSockets::unreachableText(int rank, const char* doing, const char* op) const {
  const std::string address = rank < static_cast<int>(addresses.size()) ? addresses[rank] : "";
  return unreachableHostText(rank, address, addresses, unreachableAfter,
                             std::string(" while ") + doing + " during " + op);
}

TcpLinks::TcpLinks(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks, int rank)
    : peers_(std::move(peers)), worldRanks_(std::move(worldRanks)), rank_(rank) {}

int TcpLinks::fdOf(int peer) {
  HORA_CHECK(peer >= 0 && peer < size() && peer != rank_, "bad peer " + std::to_string(peer));
  net::Socket& s = peers_->sockets[worldRanks_[peer]];
  // The first use of a link opens it; the op timeout bounds the wait for the peer to take part.
  if (!s.valid()) peers_->opener->open(worldRanks_[peer], Clock::now() + peers_->opTimeout, op_);
  return s.fd();
}

// A rank whose collective fails shuts all its sockets down, so a death cascades: the peer a rank
// waits on may only be closing because another rank died first. The kernel closed every socket of
// a dead process at once, so the hung-up sockets this rank holds name the dead rank too.
std::string TcpLinks::alsoClosed(int peer) const {
  std::string names;
  for (size_t r = 0; r < peers_->sockets.size(); ++r) {
    const net::Socket& s = peers_->sockets[r];
    if (!s.valid() || static_cast<int>(r) == worldRanks_[peer]) continue;
    // POLLRDHUP reports a peer's orderly close even while unread data still sits in the socket.
    pollfd p{s.fd(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      names += (names.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r);
    }
  }
  return names.empty() ? "" : "; the connections to " + names + " are closed too";
}

// The peer's host did not answer for unreachableAfter (keepalive failed the socket, or data sent
// to it stayed unacknowledged).
void TcpLinks::unreachable(int peer, const char* direction) const {
  throw IoError("rank " + std::to_string(peers_->worldRank) + ": " +
                peers_->unreachableText(worldRanks_[peer], direction, op_));
}

// Data this rank sent that the peer's kernel has not acknowledged for unreachableAfter: its host
// is down or cut off (keepalive, which covers the idle direction, stays silent while data is
// unacknowledged). A peer that is alive but not reading still acknowledges (a zero window).
void TcpLinks::checkAcknowledged(const Want* wants, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    tcp_info info{};
    socklen_t length = sizeof(info);
    if (::getsockopt(fdOf(wants[i].peer), IPPROTO_TCP, TCP_INFO, &info, &length) != 0) continue;
    // Both conditions are needed: unacknowledged data alone is normal in flight, and an old last
    // ACK alone only means the connection was idle.
    if (info.tcpi_unacked > 0 &&
        info.tcpi_last_ack_recv >= static_cast<uint32_t>(peers_->unreachableAfter.count())) {
      unreachable(wants[i].peer, "sending");
    }
  }
}

void TcpLinks::closed(int peer, const net::IoResult& r, const char* direction) const {
  if (r.error == ETIMEDOUT) unreachable(peer, direction);
  throw IoError("rank " + std::to_string(peers_->worldRank) + ": connection to rank " +
                std::to_string(worldRanks_[peer]) + " closed while " + direction + " during " +
                op_ + " (" + net::describe(r) + ")" + alsoClosed(peer) +
                "; a rank probably exited or failed, see the logs");
}

size_t TcpLinks::trySend(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return 0;
  net::IoResult r = net::sendSome(fdOf(peer), data, bytes);
  if (r.status == net::IoStatus::Ok) return r.bytes;
  if (r.status == net::IoStatus::WouldBlock) return 0;
  closed(peer, r, "sending");
}

size_t TcpLinks::tryRecv(int peer, void* data, size_t bytes) {
  if (bytes == 0) return 0;
  net::IoResult r = net::recvSome(fdOf(peer), data, bytes);
  if (r.status == net::IoStatus::Ok) return r.bytes;
  if (r.status == net::IoStatus::WouldBlock) return 0;
  closed(peer, r, "receiving");
}

void TcpLinks::waitAny(const Want* wants, size_t count) {
  pollSet_.clear();
  for (size_t i = 0; i < count; ++i) {
    short events = short((wants[i].send ? POLLOUT : 0) | (wants[i].recv ? POLLIN : 0));
    int fd = fdOf(wants[i].peer);
    // poll(2) wants one entry per descriptor, so wants for the same peer share an entry.
    bool merged = false;
    for (auto& p : pollSet_) {
      if (p.fd == fd) {
        p.events |= events;
        merged = true;
      }
    }
    if (!merged) pollSet_.push_back({fd, events, 0});
  }
  const size_t wanted = pollSet_.size();
  LinkOpener* opener = peers_->opener.get();
  // Polls the wanted sockets and, behind them, the links other ranks are opening to this one;
  // those are served here (a peer may be waiting for this rank to take its link) but end no wait.
  auto pollOnce = [&](Clock::time_point until) {
    pollSet_.resize(wanted);
    if (opener != nullptr) {
      opener->pollFds(pollSet_);
      until = std::min(until, opener->nextExpiry());
    }
    int rc = ::poll(pollSet_.data(), pollSet_.size(), net::pollTimeoutMs(until));
    if (rc < 0) return rc;
    bool incoming = false;
    for (size_t i = wanted; i < pollSet_.size(); ++i) incoming |= pollSet_[i].revents != 0;
    // Served only when something arrived (or a handshake expired): spinning stays one poll(2).
    if (opener != nullptr && (incoming || Clock::now() >= opener->nextExpiry())) {
      opener->service();
    }
    for (size_t i = 0; i < wanted; ++i) {
      if (pollSet_[i].revents != 0) return 1;
    }
    return 0;
  };
  // Readiness, hang-up or error ends the wait: the next try call reports which. Poll without
  // sleeping first (core/common/spin.h); a failing poll(2) is reported by the blocking loop.
  if (spinUntil(peers_->spin, [&] { return pollOnce(Clock::now()) > 0; })) return;
  // The op timeout counts from the start of this wait, so it bounds time without progress, not the
  // length of the whole collective.
  auto deadline = Clock::now() + peers_->opTimeout;
  for (;;) {
    // Wake at least once a second to check acknowledgements: a dead host would otherwise only be
    // noticed at the op timeout while this rank has data in flight to it.
    auto tick = std::min(deadline, Clock::now() + kReachabilityCheck);
    int rc = pollOnce(tick);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR)
      throw IoError(std::string("poll failed: ") + std::strerror(errno));
    auto now = Clock::now();
    if (now >= deadline) break;
    if (now >= tick) checkAcknowledged(wants, count);
  }
  std::string who;
  for (size_t i = 0; i < count; ++i) {
    who += (who.empty() ? "" : ", ") +
           std::string(wants[i].recv ? "receiving from" : "sending to") + " rank " +
           std::to_string(worldRanks_[wants[i].peer]);
  }
  throw TimeoutError("rank " + std::to_string(peers_->worldRank) + ": " + op_ +
                     " made no progress for " + std::to_string(peers_->opTimeout.count()) +
                     " ms (" + who +
                     "); a peer is stuck, much slower, or not calling the same collective "
                     "(raise HORA_TIMEOUT_SECONDS if it is only slow)");
}

uint8_t* TcpLinks::scratch(int slot, size_t bytes) { return peers_->scratch.get(slot, bytes); }

}  // namespace tcp
}  // namespace hora
