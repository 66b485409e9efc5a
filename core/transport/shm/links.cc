#include "core/transport/shm/links.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"

namespace hora {
namespace shm {
namespace {

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

ShmPeers::ShmPeers(Segment seg, int rank, const WaitPolicy& p)
    : worldRank(rank), worldSize(seg.ranks()), segment(std::move(seg)), policy(p) {
  pidfds.assign(worldSize, -1);
  const int self = static_cast<int>(::getpid());
  for (int r = 0; r < worldSize; ++r) {
    int pid = segment.rank(r).identity.pid.load(std::memory_order_acquire);
    // A pidfd turns a peer's death into something poll(2) can see even when the peer died too
    // abruptly to set its gone flag; ranks that share this process (threads in tests) get none.
    if (r != worldRank && pid > 0 && pid != self) pidfds[r] = openPidfd(pid);
  }
}

ShmPeers::~ShmPeers() {
  if (segment.mapped()) {
    // Leaving is announced and every peer woken, so a peer still waiting on this rank fails at once
    // instead of at its timeout.
    segment.rank(worldRank).identity.gone.store(1, std::memory_order_release);
    for (int r = 0; r < worldSize; ++r) {
      if (r != worldRank) ring(doorbell(r));
    }
  }
  for (int fd : pidfds) {
    if (fd >= 0) ::close(fd);
  }
}

std::string ShmPeers::peerGone(int peer) const {
  if (segment.rank(peer).identity.gone.load(std::memory_order_acquire)) {
    return "rank " + std::to_string(jobRank(peer)) + " left the shared-memory group or failed";
  }
  return processExited(peer);
}

std::string ShmPeers::processExited(int peer) const {
  if (pidfds[peer] >= 0) {
    pollfd p{pidfds[peer], POLLIN, 0};
    // A pidfd becomes readable when its process exits; a zero timeout makes this a check, not a
    // wait.
    if (::poll(&p, 1, 0) > 0) {
      return "rank " + std::to_string(jobRank(peer)) + " (pid " +
             std::to_string(segment.rank(peer).identity.pid.load()) + ") exited";
    }
  }
  return "";
}

std::string ShmPeers::othersGone(int peer) const {
  std::string out;
  for (int r = 0; r < worldSize; ++r) {
    if (r == worldRank || r == peer) continue;
    std::string why = peerGone(r);
    if (!why.empty()) out += "; " + why;
  }
  return out.empty() ? "" : out + " too";
}

uint64_t ShmPeers::othersRounds() const {
  uint64_t sum = 0;
  for (int r = 0; r < worldSize; ++r) {
    if (r != worldRank) sum += segment.rank(r).agreement.round.load(std::memory_order_acquire);
  }
  return sum;
}

void ShmPeers::markFailed(const std::string& why) {
  // The first reason is kept: later failures are often consequences of this one.
  if (failure.empty()) failure = why;
  if (!segment.mapped()) return;
  segment.rank(worldRank).identity.gone.store(1, std::memory_order_release);
  for (int r = 0; r < worldSize; ++r) {
    if (r != worldRank) ring(doorbell(r));
  }
  // Nothing but the control channel touches the segment after a failure (the communicator refuses
  // work first), so without one it goes now: the memory is freed as soon as the peers let go too.
  if (controlInUse) return;
  segment.release();
}

ShmLinks::ShmLinks(std::shared_ptr<ShmPeers> peers, std::vector<int> worldRanks, int rank)
    : peers_(std::move(peers)), worldRanks_(std::move(worldRanks)), rank_(rank) {}

size_t ShmLinks::trySend(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return 0;
  const Segment& s = peers_->segment;
  const int me = peers_->worldRank, to = worldRanks_[peer];
  RingControl& c = s.ringControl(me, to);
  // Only this rank writes head, so its own value needs no ordering; tail is acquired so the bytes
  // the receiver consumed are really free before they are overwritten.
  const uint64_t head = c.head.load(std::memory_order_relaxed);
  const uint64_t tail = c.tail.load(std::memory_order_acquire);
  const size_t n = std::min<size_t>(bytes, s.ringBytes() - static_cast<size_t>(head - tail));
  if (n == 0) return 0;
  copyIntoRing(s.ringData(me, to), s.ringBytes(), head, static_cast<const uint8_t*>(data), n);
  // Release publishes the copied bytes before the new head that lets the receiver read them.
  c.head.store(head + n, std::memory_order_release);
  ring(peers_->doorbell(to));
  return n;
}

size_t ShmLinks::tryRecv(int peer, void* data, size_t bytes) {
  if (bytes == 0) return 0;
  const Segment& s = peers_->segment;
  const int me = peers_->worldRank, from = worldRanks_[peer];
  RingControl& c = s.ringControl(from, me);
  // The mirror of trySend(): head is acquired so the bytes it covers are visible, and the tail
  // store below releases the space only after they were copied out.
  const uint64_t tail = c.tail.load(std::memory_order_relaxed);
  const uint64_t head = c.head.load(std::memory_order_acquire);
  const size_t n = std::min<size_t>(bytes, static_cast<size_t>(head - tail));
  if (n == 0) return 0;
  copyOutOfRing(s.ringData(from, me), s.ringBytes(), tail, static_cast<uint8_t*>(data), n);
  c.tail.store(tail + n, std::memory_order_release);
  // The sender may be waiting for room; ring() makes no system call when nobody sleeps.
  ring(peers_->doorbell(from));
  return n;
}

void ShmLinks::waitFor(const std::function<bool()>& ready, const std::vector<int>& peers,
                       const std::function<std::string()>& what,
                       const std::function<bool(int peer)>& stillNeeded) {
  ShmPeers& p = *peers_;
  auto failed = [&]() -> std::string {
    for (int peer : peers) {
      // A peer that already delivered everything this wait needs from it may leave without failing
      // it.
      if (stillNeeded && !stillNeeded(peer)) continue;
      std::string why = p.peerGone(worldRanks_[peer]);
      if (!why.empty()) {
        return "rank " + std::to_string(p.jobRank(p.worldRank)) + ": shm " + op_ +
               " cannot finish: " + why + p.othersGone(worldRanks_[peer]) + " (" + what() + ")";
      }
    }
    return "";
  };
  // Every sender and receiver rings this rank's one doorbell, so a single wait covers all the peers
  // in wants.
  if (waitUntil(p.doorbell(p.worldRank), p.policy, ready, failed)) return;
  throw TimeoutError("rank " + std::to_string(p.jobRank(p.worldRank)) + ": shm " + op_ +
                     " made no progress for " + std::to_string(p.policy.timeout.count()) + " ms (" +
                     what() +
                     "); a peer is stuck, much slower, or not calling the same collective "
                     "(raise HORA_TIMEOUT_SECONDS if it is only slow)");
}

void ShmLinks::waitAny(const Want* wants, size_t count) {
  const Segment& s = peers_->segment;
  const int me = peers_->worldRank;
  waitPeers_.clear();
  for (size_t i = 0; i < count; ++i) waitPeers_.push_back(wants[i].peer);
  auto what = [&] {
    std::string out;
    for (size_t i = 0; i < count; ++i) {
      out += (out.empty() ? "" : ", ") +
             std::string(wants[i].recv ? "receiving from" : "sending to") + " rank " +
             std::to_string(peers_->jobRank(worldRanks_[wants[i].peer]));
    }
    return out;
  };
  auto ready = [&] {
    for (size_t i = 0; i < count; ++i) {
      const int peer = worldRanks_[wants[i].peer];
      if (wants[i].send) {
        RingControl& c = s.ringControl(me, peer);
        if (c.head.load(std::memory_order_relaxed) - c.tail.load(std::memory_order_acquire) <
            s.ringBytes()) {
          return true;
        }
      }
      if (wants[i].recv) {
        RingControl& c = s.ringControl(peer, me);
        if (c.head.load(std::memory_order_acquire) != c.tail.load(std::memory_order_relaxed)) {
          return true;
        }
      }
    }
    return false;
  };
  waitFor(ready, waitPeers_, what);
}

uint8_t* ShmLinks::scratch(int slot, size_t bytes) { return peers_->scratch.get(slot, bytes); }

}  // namespace shm
}  // namespace hora
