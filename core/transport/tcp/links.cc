#include "core/transport/tcp/links.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/spin.h"

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
}

TcpLinks::TcpLinks(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks, int rank)
    : peers_(std::move(peers)), worldRanks_(std::move(worldRanks)), rank_(rank) {}

int TcpLinks::fdOf(int peer) const {
  HORA_CHECK(peer >= 0 && peer < size() && peer != rank_, "bad peer " + std::to_string(peer));
  return peers_->sockets[worldRanks_[peer]].fd();
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
// to it stayed unacknowledged). Every rank reached at the same address is on that host.
void TcpLinks::unreachable(int peer, const char* direction) const {
  const int world = worldRanks_[peer];
  const std::vector<std::string>& at = peers_->addresses;
  const std::string address = world < static_cast<int>(at.size()) ? at[world] : "";
  std::string ranks;
  // Addresses hold the host only, not the port, so equal addresses mean the same host.
  for (size_t r = 0; r < at.size() && !address.empty(); ++r) {
    if (at[r] == address) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  throw IoError("rank " + std::to_string(peers_->worldRank) + ": the host of rank " +
                std::to_string(world) + (address.empty() ? "" : " (" + address + ")") +
                " is unreachable: no answer for " +
                std::to_string(peers_->unreachableAfter.count() / 1000) + " s while " + direction +
                " during " + op_ + (ranks.empty() ? "" : "; ranks " + ranks + " run there") +
                "; the host is down or the network to it is cut");
}

// Data this rank sent that the peer's kernel has not acknowledged for unreachableAfter: its host
// is down or cut off (keepalive, which covers the idle direction, stays silent while data is
// unacknowledged). A peer that is alive but not reading still acknowledges (a zero window).
void TcpLinks::checkAcknowledged(const Want* wants, size_t count) const {
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
  // Readiness, hang-up or error ends the wait: the next try call reports which. Poll without
  // sleeping first (core/common/spin.h); a failing poll(2) is reported by the blocking loop.
  if (spinUntil(peers_->spin, [&] { return ::poll(pollSet_.data(), pollSet_.size(), 0) > 0; }))
    return;
  // The op timeout counts from the start of this wait, so it bounds time without progress, not the
  // length of the whole collective.
  auto deadline = Clock::now() + peers_->opTimeout;
  for (;;) {
    // Wake at least once a second to check acknowledgements: a dead host would otherwise only be
    // noticed at the op timeout while this rank has data in flight to it.
    auto tick = std::min(deadline, Clock::now() + kReachabilityCheck);
    int rc = ::poll(pollSet_.data(), pollSet_.size(), net::pollTimeoutMs(tick));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR)
      throw IoError(std::string("poll failed: ") + std::strerror(errno));
    if (rc == 0 && Clock::now() >= deadline) break;
    if (rc == 0) checkAcknowledged(wants, count);
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
